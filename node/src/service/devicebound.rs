//! The device-bound service RPC on `devicebound/v1/command/invoke` (devicebound.md §2): the
//! same envelope, admission, reply memory and read barrier as the state store's requests;
//! SEND, PURGE, FORGET and FEEDBACK are [`DeviceCommand`] proposals, QUEUE and DEADLETTERS
//! linearizable reads answered with the exact RESP3 arrays of §2.

use std::sync::Arc;

use statestore_storage::devicebound::{
    self as store, DeviceCommand, SendMessage, read as device_read,
};
use statestore_storage::machine::read;
use statestore_storage::machine::{Mutation, Outcome};
use tokio::time::Instant;
use tracing::Instrument;

use crate::devicebound::{
    self as codec, AckMode, DeadLetterEntry, DeviceRequest, Expiry, FeedbackSettlement, QueueStats,
    SendRequest, application_properties, check_delivery_fits, encode_dead_letters,
    encode_queue_stats, parse_device_request, sniff_device_verb,
};
use crate::protocol::{ErrorReply, Reply};
use crate::service::envelope::{self, Envelope};
use crate::service::reply_room::ReplyRoom;
use crate::service::request_digest::{EffectProperties, request_digest};
use crate::service::{GaugeGuard, Service, Unavailable, answer, device_push, request_span};
use crate::transport::{InboundMessage, Outbox};

/// A device-bound reply payload and its `result` label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAnswer {
    /// Byte-exact RESP3 payload.
    pub payload: Vec<u8>,
    /// `result` label of the request metrics.
    pub label: &'static str,
}

impl From<Reply> for DeviceAnswer {
    fn from(reply: Reply) -> Self {
        DeviceAnswer {
            payload: reply.encode(),
            label: reply.result_label(),
        }
    }
}

impl DeviceAnswer {
    fn error(error: ErrorReply) -> Self {
        Reply::Error(error).into()
    }

    fn read(payload: Vec<u8>) -> Self {
        DeviceAnswer {
            payload,
            label: "ok",
        }
    }
}

/// The storage form of a SEND validated at the door.
pub fn send_command(send: &SendRequest<'_>, properties: Vec<(String, String)>) -> SendMessage {
    SendMessage {
        device: send.device_id.as_bytes().to_vec(),
        message_id: send.message_id.as_bytes().to_vec(),
        body: send.body.to_vec(),
        properties,
        content_type: send.content_type.map(|t| t.as_bytes().to_vec()),
        content_encoding: send.content_encoding.map(|e| e.as_bytes().to_vec()),
        ack: match send.ack {
            AckMode::None => store::Ack::None,
            AckMode::Positive => store::Ack::Positive,
            AckMode::Negative => store::Ack::Negative,
            AckMode::Full => store::Ack::Full,
        },
        expiry: match send.expiry {
            Some(Expiry::AfterMs(ms)) => store::Expiry::Ttl(ms),
            Some(Expiry::AtUnixMs(ms)) => store::Expiry::At(ms),
            None => store::Expiry::Default,
        },
        generation: send.generation.map(|g| g.as_bytes().to_vec()),
    }
}

/// The node codec's reason for a stored dead letter's reason.
fn reason(reason: store::DeadLetterReason) -> codec::DeadLetterReason {
    match reason {
        store::DeadLetterReason::Expired => codec::DeadLetterReason::Expired,
        store::DeadLetterReason::DeliveryCountExceeded => {
            codec::DeadLetterReason::DeliveryCountExceeded
        }
        store::DeadLetterReason::Rejected => codec::DeadLetterReason::Rejected,
    }
}

impl<O: Outbox> Service<O> {
    /// Handles one device-bound service request end to end (like [`Service::handle`], and
    /// traced the same way).
    pub async fn handle_device(self: Arc<Self>, message: InboundMessage) {
        let span = request_span(&message, "devicebound");
        self.serve_device(message).instrument(span).await;
    }

    async fn serve_device(self: Arc<Self>, message: InboundMessage) {
        let _guard = self.in_flight.enter();
        let _gauge = GaugeGuard::new(&self.metrics.service.requests_in_flight);
        let started = Instant::now();
        let Some(envelope) = self.open_envelope(&message, started).await else {
            return;
        };
        let parsed = tracing::debug_span!("validate")
            .in_scope(|| parse_device_request(&message.payload, &self.config.devicebound));
        let verb = match &parsed {
            Ok(request) => request.verb(),
            Err(_) => sniff_device_verb(&message.payload),
        };
        let span = tracing::Span::current();
        span.record("command", verb.label());
        let give_up = envelope
            .deadline
            .map_or(started + self.config.request_timeout, |deadline| {
                deadline.min(started + self.config.request_timeout)
            });
        let mut room = ReplyRoom::new(&envelope, &self.config.node_client_id);
        let result = match parsed {
            Ok(request) => tokio::time::timeout_at(
                give_up,
                self.execute_device(request, &message, &envelope, &mut room),
            )
            .await
            .unwrap_or(Err(Unavailable::TimedOut)),
            Err(err) => Ok(DeviceAnswer::error(err.into())),
        };
        let elapsed = started.elapsed().as_secs_f64();
        match result {
            Ok(answer) => {
                let expiry = envelope::remaining_expiry_secs(envelope.deadline, Instant::now());
                if expiry == Some(0) {
                    self.metrics.service.dropped("expired");
                    return;
                }
                let reply = envelope::reply(
                    &envelope,
                    answer.payload,
                    None,
                    &self.config.node_client_id,
                    expiry,
                );
                span.record("result", answer.label);
                self.outbox
                    .publish_charged(reply, room.take())
                    .instrument(tracing::debug_span!("reply"))
                    .await;
                self.metrics
                    .devicebound
                    .observe(verb, answer.label, elapsed);
            }
            Err(unavailable) => {
                let label = unavailable.label();
                span.record("result", label);
                self.metrics.devicebound.observe(verb, label, elapsed);
                self.metrics.service.dropped(label);
                if let Unavailable::Internal(err) = &unavailable {
                    tracing::warn!(error = %err, command = verb.label(), "device-bound request failed; no reply sent");
                }
            }
        }
    }

    async fn execute_device(
        self: &Arc<Self>,
        request: DeviceRequest<'_>,
        message: &InboundMessage,
        envelope: &Envelope,
        room: &mut ReplyRoom,
    ) -> Result<DeviceAnswer, Unavailable> {
        if !self.is_serving() {
            return Err(Unavailable::NotLeader);
        }
        let effect = if matches!(request, DeviceRequest::Send(_)) {
            EffectProperties::DeviceSend
        } else {
            EffectProperties::None
        };
        let asked = (envelope, request_digest(message, effect));
        let command = match request {
            DeviceRequest::Queue { device_id } => {
                self.raft.ensure_linearizable().await?;
                let stats = self.read_device_index(|index| index.queue_stats(device_id.as_bytes()));
                return Ok(DeviceAnswer::read(encode_queue_stats(&QueueStats {
                    enqueued: u64::from(stats.enqueued),
                    invisible: u64::from(stats.invisible),
                    dead_lettered: u64::from(stats.dead_lettered),
                    oldest_enqueued_at_ms: stats.oldest_enqueued_ms,
                })));
            }
            DeviceRequest::DeadLetters { device_id, count } => {
                // Up to COUNT bodies: room for the reply is taken before it is kept (see
                // `reply_room`); without room it is let go and read again once there is.
                loop {
                    let payload = self.dead_letters(device_id, count).await?;
                    let bytes = room.reply_bytes(payload.len(), None);
                    if room.fits(&self.outbox, bytes) {
                        return Ok(DeviceAnswer::read(payload));
                    }
                    drop(payload);
                    room.wait(&self.outbox, bytes).await;
                }
            }
            DeviceRequest::Send(send) => {
                let properties = match application_properties(
                    message
                        .user_properties
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_str())),
                ) {
                    Ok(properties) => properties,
                    Err(err) => return Ok(DeviceAnswer::error(err.into())),
                };
                if let Err(err) = check_delivery_fits(&send, &properties) {
                    return Ok(DeviceAnswer::error(err.into()));
                }
                let command = send_command(&send, properties);
                let offline =
                    self.with_device_backoffs(|b| b.blocked(send.device_id, Instant::now()));
                if !offline {
                    let outcome = self
                        .send_and_deliver(asked, message.message_expiry_secs, command)
                        .await?;
                    return Ok(answer::from_outcome(outcome).reply.into());
                }
                DeviceCommand::Send(command)
            }
            DeviceRequest::Purge { device_id } => DeviceCommand::Purge {
                device: device_id.as_bytes().to_vec(),
            },
            DeviceRequest::Forget { device_id } => DeviceCommand::Forget {
                device: device_id.as_bytes().to_vec(),
            },
            DeviceRequest::Feedback {
                settlement,
                lock_token,
            } => DeviceCommand::SettleFeedback {
                token: lock_token.to_owned(),
                settlement: match settlement {
                    FeedbackSettlement::Complete => store::FeedbackSettlement::Complete,
                    FeedbackSettlement::Abandon => store::FeedbackSettlement::Abandon,
                },
            },
        };
        let outcome = self
            .propose_device(Some(asked), message.message_expiry_secs, command)
            .await?;
        Ok(answer::from_outcome(outcome).reply.into())
    }

    /// DEADLETTERS: the encoded reply, read linearizably.
    async fn dead_letters(&self, device_id: &str, count: u32) -> Result<Vec<u8>, Unavailable> {
        self.raft.ensure_linearizable().await?;
        let count = usize::try_from(count).unwrap_or(usize::MAX);
        let letters = device_read::dead_letters(&self.raft.view(), device_id.as_bytes(), count)?;
        let ids: Vec<String> = letters
            .iter()
            .map(|l| String::from_utf8_lossy(&l.message.message_id).into_owned())
            .collect();
        let entries: Vec<DeadLetterEntry<'_>> = letters
            .iter()
            .zip(&ids)
            .map(|(letter, id)| DeadLetterEntry {
                message_id: id,
                body: &letter.message.body,
                reason: reason(letter.reason),
                dead_lettered_at_ms: letter.time_ms,
            })
            .collect();
        Ok(encode_dead_letters(&entries))
    }

    /// SEND to a device not known to be offline: `SendAndDeliver`, proposed in a task of its
    /// own that publishes what it delivered once it commits, even if the request stops waiting
    /// (its deadline): a committed delivery left unpublished would hold the device's window
    /// until its lock runs out.
    async fn send_and_deliver(
        self: &Arc<Self>,
        (envelope, digest): (&Envelope, u128),
        message_expiry_secs: Option<u32>,
        send: SendMessage,
    ) -> Result<Outcome, Unavailable> {
        let service = self.clone();
        let envelope = envelope.clone();
        let task = tokio::spawn(
            async move {
                let mut outcome = service
                    .propose_device(
                        Some((&envelope, digest)),
                        message_expiry_secs,
                        DeviceCommand::SendAndDeliver(send),
                    )
                    .await?;
                if let Outcome::Device(device) = &mut outcome {
                    device_push::publish_carried_deliveries(&service, &mut device.result).await;
                }
                Ok(outcome)
            }
            .in_current_span(),
        );
        task.await
            .map_err(|err| Unavailable::Internal(format!("SEND task: {err}")))?
    }

    /// Proposes `command`; with a request's envelope and digest, under the reply memory (a
    /// retry gets the remembered outcome and changes nothing).
    pub(super) async fn propose_device(
        &self,
        asked: Option<(&Envelope, u128)>,
        message_expiry_secs: Option<u32>,
        command: DeviceCommand,
    ) -> Result<Outcome, Unavailable> {
        let Some((envelope, digest)) = asked else {
            return self.propose(None, Mutation::Device(command), None).await;
        };
        let request = self.request_id(envelope, message_expiry_secs, digest);
        if let Some(outcome) =
            read::remembered_reply(&self.raft.view(), &request, self.wall.now_ms())?
        {
            self.metrics.service.dedup_hits_total.inc();
            return Ok(outcome);
        }
        self.propose(Some(request), Mutation::Device(command), None)
            .await
    }
}
