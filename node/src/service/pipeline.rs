//! The one request pipeline both services run, stage by stage:
//!
//! 1. **intake**: the envelope (§1, §5.2): refused without a reply, answered `__stat` 505 for an
//!    unsupported protocol version, or an [`Envelope`] with the request's deadline;
//! 2. **parse**: the payload into the endpoint's typed request (an error reply when it fails);
//! 3. **admit**: only the serving leader executes (a leader that paused serving holds the
//!    request, any other node drops it), only what the policy allows the requester (else
//!    `-ERR not authorized`), and nothing outlives the request's deadline;
//! 4. **execute**: the endpoint's own work (reads, proposals), as an [`Answer`] or
//!    [`Unavailable`];
//! 5. **reply**: the [`Verdict`] becomes a publish (unless the requester gave up meanwhile), a
//!    metric sample and, for internal faults, a WARN.
//!
//! What differs between the state store and the device-bound service is an [`Endpoint`]: how a
//! payload parses, how a request runs, and which metric family counts it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::time::Instant;
use tracing::Instrument;

use super::envelope::{self, Envelope};
use super::reply_room::ReplyRoom;
use super::{GaugeGuard, Service, ServiceConfig};
use crate::metrics::NodeMetrics;
use crate::transport::{InboundMessage, Outbox};
use crate::verdict::{Answer, NoReply, Unavailable, Verdict};
use statestore_policy::Grants;
use statestore_protocol::{ErrorReply, ProtocolError};

/// Stage 4's work for one request, boxed: the endpoints' futures borrow the request's payload
/// and its reply room for different lifetimes, which a generic `impl Future + Send` cannot yet
/// express (rust-lang/rust#100013); the dispatcher boxes each request's future anyway.
pub type Execution<'f> = Pin<Box<dyn Future<Output = Result<Answer, Unavailable>> + Send + 'f>>;

/// A service on the request pipeline: the state store ([`super::StateStore`]) or the
/// device-bound queues ([`super::devicebound::Devicebound`]).
pub trait Endpoint: Send + Sync + 'static {
    /// The `service` field of the request span.
    const NAME: &'static str;
    /// A parsed request, borrowing from the payload.
    type Request<'a>: Send;
    /// The `command` label of the request metrics.
    type Verb: Copy + Send + 'static;

    /// Stage 2: the payload as a typed request.
    fn parse<'a>(
        config: &ServiceConfig,
        payload: &'a [u8],
    ) -> Result<Self::Request<'a>, ProtocolError>;

    /// The verb of a parsed request.
    fn verb(request: &Self::Request<'_>) -> Self::Verb;

    /// The verb of a payload that did not parse (best effort, for the metrics).
    fn sniff(payload: &[u8]) -> Self::Verb;

    /// The verb's label.
    fn verb_label(verb: Self::Verb) -> &'static str;

    /// Stage 3: whether `grants` (the requester's, under the policy in force) allow `request`.
    fn authorize(grants: &Grants, request: &Self::Request<'_>) -> bool;

    /// Stage 4: runs an admitted request; a read takes `room` for its reply before it keeps it,
    /// and lists only what `grants` allow it to read.
    fn execute<'a: 'f, 'f, O: Outbox>(
        service: &'f Arc<Service<O>>,
        request: Self::Request<'a>,
        message: &'f InboundMessage,
        envelope: &'f Envelope,
        grants: &'f Arc<Grants>,
        room: &'f mut ReplyRoom,
    ) -> Execution<'f>;

    /// Counts one request of `verb` with `result` that took `seconds`.
    fn observe(metrics: &NodeMetrics, verb: Self::Verb, result: &'static str, seconds: f64);
}

impl<O: Outbox> Service<O> {
    /// Handles one request to endpoint `E` end to end: it is answered, refused without a
    /// reply, or (when this node cannot serve it) left for the client to retry. Traced as a
    /// `request` span (continuing the request's `traceparent`) with a child per stage.
    pub async fn handle<E: Endpoint>(self: Arc<Self>, message: InboundMessage) {
        let span = super::request_span(&message, E::NAME);
        serve::<E, O>(self, message).instrument(span).await;
    }
}

async fn serve<E: Endpoint, O: Outbox>(service: Arc<Service<O>>, message: InboundMessage) {
    let _guard = service.in_flight.enter();
    let _gauge = GaugeGuard::new(&service.metrics.service.requests_in_flight);
    let started = Instant::now();
    let Some(envelope) = intake(&service, &message, started).await else {
        return;
    };

    let parsed =
        tracing::debug_span!("validate").in_scope(|| E::parse(&service.config, &message.payload));
    let verb = match &parsed {
        Ok(request) => E::verb(request),
        Err(_) => E::sniff(&message.payload),
    };
    let span = tracing::Span::current();
    span.record("command", E::verb_label(verb));
    let mut room = ReplyRoom::new(&envelope, &service.config.node_client_id);
    let grants = service.authorizer.grants(envelope.client_id.as_deref());
    let verdict = match parsed {
        Ok(request) => {
            let allowed = E::authorize(&grants, &request);
            let execute = async {
                if !allowed {
                    tracing::debug!(requester = ?envelope.client_id, "request not authorized");
                    return Ok(Answer::error(ErrorReply::NotAuthorized));
                }
                E::execute(&service, request, &message, &envelope, &grants, &mut room).await
            };
            Verdict::from(admit(&service, started, &envelope, execute).await)
        }
        Err(err) => Verdict::Answered(Answer::error(err.into())),
    };
    let result = verdict.result_label();
    span.record("result", result);
    let elapsed = started.elapsed().as_secs_f64();
    match verdict {
        Verdict::Answered(answer) => {
            if reply(&service, &envelope, answer, room).await {
                E::observe(&service.metrics, verb, result, elapsed);
            }
        }
        Verdict::Unavailable(unavailable) => {
            E::observe(&service.metrics, verb, result, elapsed);
            if let Unavailable::Internal(err) = &unavailable {
                tracing::warn!(error = %err, service = E::NAME, command = E::verb_label(verb), "request failed; no reply sent");
            } else {
                tracing::debug!(reason = result, "request not served");
            }
            service.count_no_reply(&NoReply::Unavailable(unavailable));
        }
    }
}

/// Stage 1: the request's envelope (protocol §1, §5.2), or `None` once it has been dealt with:
/// dropped without a reply (counted by reason) or answered `__stat` 505 for an unsupported
/// protocol version.
async fn intake<O: Outbox>(
    service: &Service<O>,
    message: &InboundMessage,
    started: Instant,
) -> Option<Envelope> {
    let checked = envelope::check(
        message,
        started,
        &service.config.reply_topics,
        &service.config.identity,
    );
    let envelope = match checked {
        Ok(envelope) => envelope,
        Err(refusal) => {
            tracing::debug!(reason = refusal.label(), topic = %message.topic, "request dropped without reply");
            service.count_no_reply(&NoReply::Refused(refusal));
            return None;
        }
    };
    if let Err(envelope::UnsupportedVersion { requested }) =
        envelope::check_protocol_version(message)
    {
        service.metrics.service.unsupported_version_total.inc();
        let expiry = envelope::remaining_expiry_secs(envelope.deadline, Instant::now());
        service
            .outbox
            .publish(envelope::unsupported_version(&envelope, requested, expiry))
            .await;
        return None;
    }
    Some(envelope)
}

/// Stage 3: runs `execute` (which answers `not authorized` for what the requester may not do)
/// once this node serves requests, until the request's deadline: its Message Expiry or the
/// configured request timeout, whichever comes first. A node that is not the Raft leader (or is
/// shutting down) drops the request at once: another node may be leading, and the client
/// retries there. A leader that paused serving (a quorum round late under load, a take-over
/// under way) holds the request until it serves again, rather than leave the client to time
/// out. Past the deadline nobody waits for the reply: the request is given up (a proposal
/// already submitted still commits, and a retry finds its remembered reply).
async fn admit<O: Outbox>(
    service: &Service<O>,
    started: Instant,
    envelope: &Envelope,
    execute: impl Future<Output = Result<Answer, Unavailable>>,
) -> Result<Answer, Unavailable> {
    let timeout = started + service.config.request_timeout;
    let give_up = envelope
        .deadline
        .map_or(timeout, |deadline| deadline.min(timeout));
    let admitted = async {
        service.wait_until_serving().await?;
        execute.await
    };
    tokio::time::timeout_at(give_up, admitted)
        .await
        .unwrap_or(Err(Unavailable::TimedOut))
}

/// Stage 5: publishes `answer` to the requester with the room taken for it; false (counted)
/// when the requester's Message Expiry passed meanwhile.
async fn reply<O: Outbox>(
    service: &Service<O>,
    envelope: &Envelope,
    answer: Answer,
    mut room: ReplyRoom,
) -> bool {
    let expiry = envelope::remaining_expiry_secs(envelope.deadline, Instant::now());
    if expiry == Some(0) {
        // The requester gave up; its retry (if any) gets the remembered reply.
        service.count_no_reply(&NoReply::ExpiredBeforeReply);
        return false;
    }
    let version = answer.version().map(ToString::to_string);
    let reply = envelope::reply(
        envelope,
        answer.into_payload(),
        version,
        &service.config.node_client_id,
        expiry,
    );
    service
        .outbox
        .publish_charged(reply, room.take())
        .instrument(tracing::debug_span!("reply"))
        .await;
    true
}
