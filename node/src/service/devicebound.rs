//! The device-bound service RPC on `devicebound/v1/command/invoke` (devicebound.md §2): the
//! same envelope, admission, reply memory and read barrier as the state store's requests;
//! SEND, PURGE, FORGET and FEEDBACK are [`DeviceCommand`] proposals, QUEUE and DEADLETTERS
//! linearizable reads answered with the exact RESP3 arrays of §2.

use std::sync::Arc;

use statestore_storage::devicebound::{DeviceCommand, SendMessage, read as device_read};
use statestore_storage::machine::read;
use statestore_storage::machine::{Mutation, Outcome};
use tokio::time::Instant;
use tracing::Instrument;

use crate::metrics::NodeMetrics;
use crate::service::envelope::Envelope;
use crate::service::pipeline::{Endpoint, Execution};
use crate::service::reply_room::ReplyRoom;
use crate::service::request_digest::{EffectProperties, request_digest};
use crate::service::{Service, ServiceConfig, answer, device_push};
use crate::transport::{InboundMessage, Outbox};
use crate::verdict::{Answer, Unavailable};
use statestore_policy::{DeviceAction, Grants};
use statestore_protocol::ProtocolError;
use statestore_protocol::devicebound::{
    DeadLetterEntry, DeviceRequest, DeviceVerb, SendRequest, application_properties,
    check_delivery_fits, encode_dead_letters, encode_queue_stats, parse_device_request,
    sniff_device_verb,
};

/// The device-bound service RPC on `devicebound/v1/command/invoke`.
pub struct Devicebound;

impl Endpoint for Devicebound {
    const NAME: &'static str = "devicebound";
    type Request<'a> = DeviceRequest<'a>;
    type Verb = DeviceVerb;

    fn parse<'a>(
        config: &ServiceConfig,
        payload: &'a [u8],
    ) -> Result<DeviceRequest<'a>, ProtocolError> {
        parse_device_request(payload, &config.devicebound)
    }

    fn verb(request: &DeviceRequest<'_>) -> DeviceVerb {
        request.verb()
    }

    fn sniff(payload: &[u8]) -> DeviceVerb {
        sniff_device_verb(payload)
    }

    fn verb_label(verb: DeviceVerb) -> &'static str {
        verb.label()
    }

    /// SEND, PURGE and FORGET need their action on the device, QUEUE and DEADLETTERS `read`,
    /// FEEDBACK `feedback` (whatever devices its batch is about).
    fn authorize(grants: &Grants, request: &DeviceRequest<'_>) -> bool {
        let action = match request {
            DeviceRequest::Send(_) => DeviceAction::Send,
            DeviceRequest::Purge { .. } => DeviceAction::Purge,
            DeviceRequest::Forget { .. } => DeviceAction::Forget,
            DeviceRequest::Queue { .. } | DeviceRequest::DeadLetters { .. } => DeviceAction::Read,
            DeviceRequest::Feedback { .. } => DeviceAction::Feedback,
        };
        grants.allows_device(action, request.device_id())
    }

    fn execute<'a: 'f, 'f, O: Outbox>(
        service: &'f Arc<Service<O>>,
        request: DeviceRequest<'a>,
        message: &'f InboundMessage,
        envelope: &'f Envelope,
        _grants: &'f Arc<Grants>,
        room: &'f mut ReplyRoom,
    ) -> Execution<'f> {
        Box::pin(service.execute_device(request, message, envelope, room))
    }

    fn observe(metrics: &NodeMetrics, verb: DeviceVerb, result: &'static str, seconds: f64) {
        metrics.devicebound.observe(verb, result, seconds);
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
        ack: send.ack,
        expiry: send.expiry,
        generation: send.generation.map(|g| g.as_bytes().to_vec()),
    }
}

impl<O: Outbox> Service<O> {
    /// Runs an admitted device-bound request.
    async fn execute_device(
        self: &Arc<Self>,
        request: DeviceRequest<'_>,
        message: &InboundMessage,
        envelope: &Envelope,
        room: &mut ReplyRoom,
    ) -> Result<Answer, Unavailable> {
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
                return Ok(Answer::Encoded(encode_queue_stats(&stats)));
            }
            DeviceRequest::DeadLetters { device_id, count } => {
                // Up to COUNT bodies: room for the reply is taken before it is kept (see
                // `reply_room`); without room it is let go and read again once there is.
                loop {
                    let payload = self.dead_letters(device_id, count).await?;
                    let bytes = room.reply_bytes(payload.len(), None);
                    if room.fits(&self.outbox, bytes) {
                        return Ok(Answer::Encoded(payload));
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
                    Err(err) => return Ok(Answer::error(err.into())),
                };
                if let Err(err) = check_delivery_fits(&send, &properties) {
                    return Ok(Answer::error(err.into()));
                }
                let command = send_command(&send, properties);
                let offline = self
                    .offline_devices
                    .with(|b| b.blocked(send.device_id, Instant::now()));
                if !offline {
                    let outcome = self
                        .send_and_deliver(asked, message.message_expiry_secs, command)
                        .await?;
                    return Ok(answer::from_outcome(outcome));
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
                settlement,
            },
        };
        let outcome = self
            .propose_device(Some(asked), message.message_expiry_secs, command)
            .await?;
        Ok(answer::from_outcome(outcome))
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
                reason: letter.reason,
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
            .map_err(|err| Unavailable::Internal(err.into()))?
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
