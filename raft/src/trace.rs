//! Trace contexts of proposals on the leader, so the stages that serve many proposals at once
//! (the log append and its fdatasync, apply, notifications) show up in the traces of the
//! requests they serve.
//!
//! A proposal submitted inside a sampled span carries that span's OpenTelemetry context into
//! its batch. The contexts live only in the leader's memory: they are never encoded, so the
//! log and the replication traffic are unchanged, and followers never see them. A stage that
//! serves a batch opens one span, the child of the first sampled proposal's context and linked
//! to the others. Nothing is created when no proposal of a batch is sampled, so with tracing
//! off (the default) the cost is one empty-vector check per log entry.

use std::sync::Mutex;

use opentelemetry::Context;
use opentelemetry::trace::TraceContextExt;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The target of the stage spans (the node's trace filter enables it at DEBUG).
pub const TARGET: &str = "statestore_raft::trace";

/// The context of the current span if it is sampled (exported), else `None`.
pub fn current_sampled() -> Option<Context> {
    let span = tracing::Span::current();
    if span.is_disabled() {
        return None;
    }
    let context = span.context();
    context
        .span()
        .span_context()
        .is_sampled()
        .then_some(context)
}

/// The sampled contexts of a batch's proposals, by position in the batch.
#[derive(Default)]
pub struct ProposalTraces(Mutex<Vec<(usize, Context)>>);

impl ProposalTraces {
    /// From the contexts of a batch's proposals, in batch order.
    pub fn new(contexts: Vec<Option<Context>>) -> ProposalTraces {
        ProposalTraces(Mutex::new(
            contexts
                .into_iter()
                .enumerate()
                .filter_map(|(i, context)| context.map(|c| (i, c)))
                .collect(),
        ))
    }

    /// The contexts (without removing them).
    pub fn contexts(&self) -> Vec<Context> {
        self.lock().iter().map(|(_, c)| c.clone()).collect()
    }

    /// The contexts with their positions in the batch (without removing them).
    pub fn positioned(&self) -> Vec<(usize, Context)> {
        self.lock().clone()
    }

    /// Removes and returns the contexts with their positions: the last stage that needs them
    /// (apply) takes them, so a batch kept in the log cache holds none.
    pub fn take(&self) -> Vec<(usize, Context)> {
        std::mem::take(&mut *self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(usize, Context)>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Makes `span` the child of the first of `parents` and links it to the rest.
pub fn attach(span: &tracing::Span, parents: &[Context]) {
    let Some((first, rest)) = parents.split_first() else {
        return;
    };
    // Fails only if the span was already started (it was created just before): nothing to do.
    let _ = span.set_parent(first.clone());
    for other in rest {
        span.add_link(other.span().span_context().clone());
    }
}
