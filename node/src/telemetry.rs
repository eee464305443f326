//! Logs and traces: a `tracing` subscriber writing to stderr, plus an OpenTelemetry OTLP
//! exporter when an endpoint is configured. The only module that knows OpenTelemetry.
//!
//! Repeated WARN and ERROR lines are throttled ([`log_throttle`]): while a peer is down,
//! openraft logs the same failure for every retry, hundreds of lines a second. Each distinct
//! line (same level, target, message and fields; so one per peer) is written the first time,
//! then at most once per [`REPEAT_WINDOW`]; every [`SUMMARY_INTERVAL`] one line per throttled
//! line says how many were held back. INFO and below are never throttled.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use std::io::IsTerminal;
use std::time::Duration;

use tracing::Level;
use tracing_subscriber::filter::{EnvFilter, FilterExt, LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::layer::{Context, Filter};
use tracing_subscriber::registry::{LookupSpan, Registry};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, fmt};
use tracing_throttle::{Policy, TracingRateLimitLayer};

use crate::config::{LogFormat, TelemetryConfig};
use crate::error::NodeError;

/// The counters of the process's log throttle, once [`init`] installed it.
static LOG_THROTTLE: std::sync::OnceLock<tracing_throttle::Metrics> = std::sync::OnceLock::new();

/// `statestore_log_lines_suppressed_total`: WARN/ERROR lines the throttle held back, read from
/// the throttle's own counter at every scrape.
pub struct SuppressedLogLines {
    source: Option<tracing_throttle::Metrics>,
    exported: prometheus::IntCounter,
}

impl SuppressedLogLines {
    /// Counts what the process's log throttle held back (zero until [`init`] ran).
    pub fn for_process() -> Result<Self, prometheus::Error> {
        Self::new(None)
    }

    /// Counts what the throttle with `metrics` held back; `None`: the process's.
    pub fn new(metrics: Option<tracing_throttle::Metrics>) -> Result<Self, prometheus::Error> {
        Ok(SuppressedLogLines {
            source: metrics,
            exported: prometheus::IntCounter::new(
                "statestore_log_lines_suppressed_total",
                "Repeated WARN/ERROR log lines held back by the log throttle (see the summaries in the log).",
            )?,
        })
    }
}

impl prometheus::core::Collector for SuppressedLogLines {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        self.exported.desc()
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        let now = self
            .source
            .as_ref()
            .or_else(|| LOG_THROTTLE.get())
            .map_or(0, |m| m.events_suppressed());
        let seen = self.exported.get();
        if now > seen {
            self.exported.inc_by(now - seen);
        }
        self.exported.collect()
    }
}

/// A repeated WARN/ERROR line is written at most once per this window.
pub const REPEAT_WINDOW: Duration = Duration::from_secs(10);
/// How often the counts of held-back lines are written.
pub const SUMMARY_INTERVAL: Duration = Duration::from_secs(30);
/// Distinct lines whose repeats are tracked (least recently seen forgotten first).
pub const MAX_THROTTLED_LINES: usize = 10_000;

/// The throttle for WARN and ERROR lines (see the module docs). With `summaries`, a Tokio task
/// writes the held-back counts every [`SUMMARY_INTERVAL`]; it must then be built inside a
/// Tokio runtime.
pub fn log_throttle(summaries: bool) -> Result<TracingRateLimitLayer, NodeError> {
    let policy = Policy::time_window(1, REPEAT_WINDOW)
        .map_err(|e| NodeError::Telemetry(format!("log throttle policy: {e}")))?;
    TracingRateLimitLayer::builder()
        .with_policy(policy)
        .with_max_signatures(MAX_THROTTLED_LINES)
        .with_summary_interval(SUMMARY_INTERVAL)
        .with_active_emission(summaries)
        .build()
        .map_err(|e| NodeError::Telemetry(format!("log throttle: {e}")))
}

/// The filter of the log output besides its level filter: INFO and below pass, WARN and ERROR
/// go through the throttle.
pub struct ThrottledWarnings(TracingRateLimitLayer);

impl ThrottledWarnings {
    /// Throttles WARN and ERROR events with `throttle`.
    pub fn new(throttle: TracingRateLimitLayer) -> Self {
        ThrottledWarnings(throttle)
    }
}

impl<S> Filter<S> for ThrottledWarnings
where
    S: tracing::Subscriber + for<'lookup> LookupSpan<'lookup>,
{
    fn enabled(&self, _meta: &tracing::Metadata<'_>, _cx: &Context<'_, S>) -> bool {
        true
    }

    /// Lets every level through, and says so: without a hint, the log filter combined with this
    /// one would have none either, and every `log` record and DEBUG callsite of the process
    /// would be evaluated at run time instead of being skipped by the global level.
    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::TRACE)
    }

    fn event_enabled(&self, event: &tracing::Event<'_>, cx: &Context<'_, S>) -> bool {
        *event.metadata().level() > Level::WARN || Filter::<S>::event_enabled(&self.0, event, cx)
    }

    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: Context<'_, S>,
    ) {
        Filter::<S>::on_new_span(&self.0, attrs, id, ctx);
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        ctx: Context<'_, S>,
    ) {
        Filter::<S>::on_record(&self.0, id, values, ctx);
    }
}

/// Keeps the trace exporter alive; flushes it on drop.
pub struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(err) = provider.shutdown()
        {
            eprintln!("trace exporter shutdown: {err}");
        }
    }
}

/// The layers of the process's subscriber.
pub type Layers = Vec<Box<dyn Layer<Registry> + Send + Sync>>;

/// Installs the global subscriber. Must run inside a Tokio runtime when OTLP is enabled.
/// `RUST_LOG`, when set, replaces the configured log filter, and `OTEL_EXPORTER_OTLP_ENDPOINT`
/// stands in for an endpoint the configuration does not set.
pub fn init(config: &TelemetryConfig) -> Result<TelemetryGuard, NodeError> {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&config.log))
        .map_err(|e| NodeError::Telemetry(format!("log filter {:?}: {e}", config.log)))?;
    let config = TelemetryConfig {
        otlp_endpoint: config
            .otlp_endpoint
            .clone()
            .or_else(|| std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT").ok()),
        ..config.clone()
    };
    let (layers, provider) = layers(&config, filter)?;
    tracing_subscriber::registry()
        .with(layers)
        .try_init()
        .map_err(|e| NodeError::Telemetry(e.to_string()))?;
    Ok(TelemetryGuard { provider })
}

/// The log layer (stderr, `log_filter`, throttled warnings) and, when `config` has an OTLP
/// endpoint, the trace layer with its own filter. Must run inside a Tokio runtime (the log
/// throttle's summaries are a task).
///
/// Every layer has its own filter, and they are handed to the registry as one `Vec`: a span or
/// event no layer wants is then disabled at its callsite and costs nothing. (An
/// `Option<Layer>` that is `None` would not do: it reports interest in every callsite, so the
/// registry would create every DEBUG span of statestore and openraft for nobody: measured as
/// 13.7 % of a leader's CPU under GET 64×8.)
pub fn layers(
    config: &TelemetryConfig,
    log_filter: EnvFilter,
) -> Result<(Layers, Option<SdkTracerProvider>), NodeError> {
    let throttle = log_throttle(true)?;
    let _ = LOG_THROTTLE.set(throttle.metrics().clone());
    let filter = log_filter.and(ThrottledWarnings::new(throttle));
    let mut layers: Layers = vec![log_layer(config.log_format, std::io::stderr(), filter)];

    let Some(endpoint) = config.otlp_endpoint.clone() else {
        return Ok((layers, None));
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .with_timeout(std::time::Duration::from_secs(3))
        .build()
        .map_err(|e| NodeError::Telemetry(format!("OTLP exporter: {e}")))?;
    // Parent-based: a request's sampled `traceparent` decides; others by ratio.
    let sampler = Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
        config.trace_sample_ratio,
    )));
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(sampler)
        .with_resource(Resource::builder().with_service_name("statestore").build())
        .build();
    // Own filter: a quiet log level must not silence spans, and the exporter's own HTTP/2
    // spans must not feed back into it.
    let spans = Targets::new()
        .with_target("statestore_node", LevelFilter::DEBUG)
        .with_target("statestore_raft", LevelFilter::INFO)
        .with_target(statestore_raft::trace::TARGET, LevelFilter::DEBUG)
        .with_target("statestore_storage", LevelFilter::INFO);
    let traces = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("statestore"))
        .with_filter(spans);
    layers.push(traces.boxed());
    Ok((layers, Some(provider)))
}

/// The log layer: `format` lines written to `stream`, as `filter` lets them through. Text is
/// coloured (ANSI escapes) only when `stream` is a terminal: a file, a pipe or a container
/// runtime's log collector gets plain text. JSON is one object per line: `timestamp`,
/// `level`, `target`, `fields`, the current `span` and the list of `spans` it is in, each
/// with its name and fields.
fn log_layer<W, F>(
    format: LogFormat,
    stream: W,
    filter: F,
) -> Box<dyn Layer<Registry> + Send + Sync>
where
    W: std::io::Write + IsTerminal + Send + 'static,
    F: Filter<Registry> + Send + Sync + 'static,
{
    let colour = stream.is_terminal();
    // One write per line: the layer formats a whole line, then writes it under the lock.
    let writer = std::sync::Mutex::new(stream);
    match format {
        LogFormat::Text => fmt::layer()
            .with_writer(writer)
            .with_ansi(colour)
            .with_target(true)
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => fmt::layer()
            .json()
            .with_writer(writer)
            .with_ansi(false)
            .with_target(true)
            .with_current_span(true)
            .with_span_list(true)
            .with_filter(filter)
            .boxed(),
    }
}

/// Makes `span` a child of the W3C trace context in `traceparent` (an MQTT user property of the
/// request), so a client's trace continues through the store. Ignored when malformed or when no
/// OpenTelemetry layer is installed.
pub fn continue_remote_trace(
    span: &tracing::Span,
    traceparent: Option<&str>,
    tracestate: Option<&str>,
) {
    use opentelemetry::propagation::TextMapPropagator;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let Some(traceparent) = traceparent else {
        return;
    };
    let mut carrier = std::collections::HashMap::new();
    carrier.insert("traceparent".to_owned(), traceparent.to_owned());
    if let Some(tracestate) = tracestate {
        carrier.insert("tracestate".to_owned(), tracestate.to_owned());
    }
    let parent = opentelemetry_sdk::propagation::TraceContextPropagator::new().extract(&carrier);
    let _ = span.set_parent(parent);
}

#[cfg(test)]
mod tests;
