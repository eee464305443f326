//! Push delivery to devices and the device side of the protocol (devicebound.md §3).
//!
//! While this node serves as leader, [`DevicePush::run`] looks for devices with deliverable
//! messages, proposes `Deliver{device,max}` and, only once it committed, publishes each
//! locked message QoS 1 to its delivery topic. A PUBACK 0x10 (nobody subscribed: the device
//! is offline) gives the delivery back (`Undeliver`) and backs the device off
//! ([`crate::service::offline_devices`]) until the device publishes anything under its
//! `messages/` topics.
//! [`DevicePush::handle_inbound`] serves those publishes: settlements, pulls and activity; at
//! a node that no longer serves, settlements and pulls are forwarded to the serving leader
//! ([`crate::service::device_forward`]). Malformed device topics are dropped (and counted)
//! without a reply.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use statestore_storage::devicebound::{
    DeliverableDevice, DeviceCommand, DeviceResult, MessageDelivery, Settlement,
    read as device_read,
};
use statestore_storage::machine::Outcome;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::mqtt::{SessionEvent, SessionState};
use crate::service::Service;
use crate::service::envelope::{self, Envelope};
use crate::service::offline_devices::OfflineDevices;
use crate::service::request_digest::{EffectProperties, request_digest};
use crate::transport::{InboundMessage, OutboundKind, OutboundMessage, Outbox};
use crate::verdict::Unavailable;
use statestore_protocol::devicebound::{
    Delivery, DeliveryHeaders, DeviceReply, DeviceTopic, SettleAction, delivery_headers,
    message_expiry_interval_secs, parse_device_topic, pull_reply, settlement_reply,
};

/// Devices read from the deliverable index per page.
const PAGE: usize = 256;
/// Devices looked at per push round (the next round starts from the beginning again).
const MAX_DEVICES_PER_ROUND: usize = 16_384;
/// A push round runs at least this often while serving (locks that expired, backoffs that
/// ran out).
const TICK: Duration = Duration::from_millis(250);

/// The text fields of a committed delivery (stored as bytes, checked as text at SEND), owned
/// so a [`Delivery`] can borrow them for the publish or the pull reply.
struct DeliveryText {
    device: String,
    message_id: String,
    content_type: Option<String>,
    content_encoding: Option<String>,
}

impl DeliveryText {
    fn of(delivered: &MessageDelivery) -> Self {
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        DeliveryText {
            device: text(&delivered.device),
            message_id: text(&delivered.message.message_id),
            content_type: delivered.message.content_type.as_deref().map(text),
            content_encoding: delivered.message.content_encoding.as_deref().map(text),
        }
    }

    fn delivery<'a>(&'a self, delivered: &'a MessageDelivery) -> Delivery<'a> {
        Delivery {
            device_id: &self.device,
            message_id: &self.message_id,
            lock_token: &delivered.token,
            expires_at_ms: delivered.message.expires_at_ms,
            content_type: self.content_type.as_deref(),
            content_encoding: self.content_encoding.as_deref(),
            application_properties: &delivered.message.properties,
        }
    }
}

/// The device push of one node.
pub struct DevicePush<O: Outbox> {
    service: Arc<Service<O>>,
    /// The devices found offline, shared with the service's SEND path.
    offline_devices: Arc<OfflineDevices>,
    /// Feedback publishing pauses until then after a PUBACK 0x10 (no service listens).
    feedback_paused_until: Mutex<Option<Instant>>,
    /// The MQTT session's state (`None` without a session): a forward waits until this node
    /// no longer subscribes to the device topics.
    session: Option<watch::Receiver<SessionState>>,
}

/// First pause before a refused device request is proposed again.
pub const RETRY_FIRST: Duration = Duration::from_millis(50);
/// How long a refused device request is retried while this node serves.
pub const RETRY_FOR: Duration = Duration::from_secs(2);

/// How long feedback publishing pauses after a PUBACK 0x10.
pub const FEEDBACK_PAUSE: Duration = Duration::from_secs(1);

impl<O: Outbox> DevicePush<O> {
    /// A push publishing through `service`'s outbox, whose MQTT session reports its state on
    /// `session`.
    pub fn new(
        service: Arc<Service<O>>,
        offline_devices: Arc<OfflineDevices>,
        session: Option<watch::Receiver<SessionState>>,
    ) -> Arc<Self> {
        Arc::new(DevicePush {
            service,
            offline_devices,
            feedback_paused_until: Mutex::new(None),
            session,
        })
    }

    /// The service it pushes for.
    pub fn service(&self) -> &Arc<Service<O>> {
        &self.service
    }

    /// The MQTT session's state, if there is a session.
    pub fn session_state(&self) -> Option<watch::Receiver<SessionState>> {
        self.session.clone()
    }

    /// True while feedback publishing pauses after a PUBACK 0x10.
    pub fn feedback_paused(&self) -> bool {
        self.feedback_paused_until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_some_and(|until| until > Instant::now())
    }

    /// Runs push rounds while this node serves, until `stop` flips to true.
    pub async fn run(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let wake = self.service.device_wake();
        loop {
            if *stop.borrow() {
                return;
            }
            if self.service.is_serving()
                && let Err(err) = self.push_round().await
            {
                tracing::debug!(error = %err, "device push round failed; retrying");
            }
            tokio::select! {
                _ = wake.notified() => {}
                _ = tokio::time::sleep(TICK) => {}
                _ = stop.changed() => {}
            }
        }
    }

    /// Delivers to every deliverable device not backing off (bounded per round).
    async fn push_round(&self) -> Result<(), Unavailable> {
        let view = self.service.raft().view();
        let window = device_read::meta(&view)?.settings.device_window;
        let mut after: Option<DeliverableDevice> = None;
        let mut seen = 0;
        while seen < MAX_DEVICES_PER_ROUND {
            let page = self
                .service
                .read_device_index(|index| index.deliverable_devices(window, after.as_ref(), PAGE));
            seen += page.len();
            if !self.service.is_serving() {
                return Ok(());
            }
            // One Deliver per device, all of the page proposed at once: the batcher packs them
            // into a few log entries, so a page costs about one commit instead of one each.
            let now = Instant::now();
            let delivers = page
                .iter()
                .filter(|candidate| {
                    let device = String::from_utf8_lossy(&candidate.device);
                    !self.offline_devices.with(|b| b.blocked(&device, now))
                })
                .map(|candidate| {
                    self.service.propose_device(
                        None,
                        None,
                        DeviceCommand::Deliver {
                            device: candidate.device.clone(),
                            max: window.saturating_sub(candidate.invisible).max(1),
                        },
                    )
                });
            // Every committed delivery is published even if another of the page failed (an
            // unpublished one would wait for its lock to run out).
            let mut failed = None;
            for outcome in futures::future::join_all(delivers).await {
                match outcome {
                    Ok(Outcome::Device(outcome)) => {
                        for message in outcome.result.deliveries() {
                            publish_delivery(&self.service, message).await;
                        }
                    }
                    Ok(_) => {}
                    Err(err) => failed = Some(err),
                }
            }
            if let Some(err) = failed {
                return Err(err);
            }
            match page.last() {
                Some(last) if page.len() == PAGE => after = Some(last.clone()),
                _ => break,
            }
        }
        Ok(())
    }

    /// Handles what the session reports about device-bound publishes, until `stop`. The
    /// reports queued meanwhile (up to [`PAGE`]) are handled together: their give-backs are
    /// proposed at once, so a burst of offline devices costs about one commit, not one each
    /// (a device that came back meanwhile would otherwise wait for every give-back before it).
    pub async fn run_events(
        self: Arc<Self>,
        mut events: mpsc::Receiver<SessionEvent>,
        mut stop: watch::Receiver<bool>,
    ) {
        loop {
            let first = tokio::select! {
                event = events.recv() => match event { Some(event) => event, None => return },
                _ = stop.changed() => return,
            };
            let mut burst = vec![first];
            while burst.len() < PAGE {
                match events.try_recv() {
                    Ok(event) => burst.push(event),
                    Err(_) => break,
                }
            }
            if !self.service.is_serving() {
                continue;
            }
            let give_backs = burst
                .into_iter()
                .filter_map(|event| self.give_back(event))
                .map(|command| self.service.propose_device(None, None, command));
            for result in futures::future::join_all(give_backs).await {
                if let Err(err) = result {
                    tracing::debug!(error = ?err, "could not give a delivery back");
                }
            }
        }
    }

    /// What a session report means: the device's backoff or the feedback pause, and the
    /// command that gives the delivery back.
    fn give_back(&self, event: SessionEvent) -> Option<DeviceCommand> {
        match event {
            SessionEvent::DeviceOffline { device, token } => {
                let metrics = &self.service.metrics().devicebound;
                if self
                    .offline_devices
                    .with(|b| b.offline(&device, Instant::now()))
                {
                    metrics.offline_backoffs_total.inc();
                } else {
                    metrics.backoff_overflow_total.inc();
                }
                let until = self.offline_devices.with(|b| b.until(&device));
                tracing::debug!(device, ?until, "device offline: delivery given back");
                Some(DeviceCommand::Undeliver {
                    device: device.into_bytes(),
                    token,
                })
            }
            SessionEvent::FeedbackUnheard { token } => {
                *self
                    .feedback_paused_until
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) =
                    Some(Instant::now() + FEEDBACK_PAUSE);
                Some(DeviceCommand::UndeliverFeedback { token })
            }
            SessionEvent::NoMatchingSubscribers { .. } => None,
        }
    }

    /// Serves one publish under `devices/`: settle, receive or activity.
    pub async fn handle_inbound(self: Arc<Self>, message: InboundMessage) {
        let metrics = &self.service.metrics().devicebound;
        let topic = match parse_device_topic(&message.topic) {
            Ok(topic) => topic,
            Err(err) => {
                metrics.dropped(err.label());
                tracing::debug!(topic = %message.topic, reason = err.label(), "device publish dropped");
                return;
            }
        };
        // A reply goes only under the device's own topics or the reply prefixes (§3); a pull or
        // settlement asking for one elsewhere is refused before it locks or settles anything.
        let envelope = match envelope::check_device(
            &message,
            Instant::now(),
            topic.device_id(),
            &self.service.config.reply_topics,
        ) {
            Ok(envelope) => envelope,
            Err(refusal) if !matches!(topic, DeviceTopic::Activity { .. }) => {
                metrics.dropped(refusal.label());
                tracing::debug!(topic = %message.topic, reason = refusal.label(), "device publish dropped");
                return;
            }
            Err(_) => None,
        };
        // A deposed leader forwards settlements and pulls to the serving one (dropped, a
        // settlement would leave its message locked until the lock ran out).
        if !self.service.is_serving()
            && !self
                .forward_if_deposed(&topic, &message, envelope.is_some())
                .await
        {
            return;
        }
        // Any publish under the device's messages/ topics says it is online.
        if self.offline_devices.with(|b| b.reset(topic.device_id())) {
            self.service.device_wake().notify_one();
        }
        let device = topic.device_id().as_bytes().to_vec();
        let (kind, command) = match topic {
            DeviceTopic::Activity { .. } => {
                metrics
                    .device_requests_total
                    .with_label_values(&["activity"])
                    .inc();
                return;
            }
            DeviceTopic::Settle {
                action, lock_token, ..
            } => (
                "settle",
                // The device is online (it just published): a settlement that frees a slot of
                // its window delivers its next message in the same proposal.
                DeviceCommand::SettleAndDeliver {
                    device,
                    token: lock_token.to_owned(),
                    settlement: match action {
                        SettleAction::Complete => Settlement::Complete,
                        SettleAction::Abandon => Settlement::Abandon,
                        SettleAction::Reject => Settlement::Reject,
                    },
                },
            ),
            DeviceTopic::Receive { .. } => {
                if envelope.is_none() {
                    // A pull nobody can answer would lock a message for nothing.
                    metrics.dropped("no_envelope");
                    return;
                }
                ("receive", DeviceCommand::Receive { device })
            }
        };
        metrics
            .device_requests_total
            .with_label_values(&[kind])
            .inc();
        let outcome = self
            .propose_retrying(
                envelope
                    .as_ref()
                    .map(|envelope| (envelope, request_digest(&message, EffectProperties::None))),
                message.message_expiry_secs,
                command,
            )
            .await;
        let mut result = match outcome {
            Ok(Outcome::Device(outcome)) => outcome.result,
            Ok(_) => return,
            Err(err) => {
                // The device gets no answer; a settlement lost this way leaves its message
                // locked until the lock runs out (then it is delivered again).
                metrics.dropped(err.label());
                match err {
                    Unavailable::Internal(err) => {
                        tracing::warn!(error = %err, "device request failed")
                    }
                    other => {
                        tracing::debug!(reason = other.label(), "device request not proposed")
                    }
                }
                return;
            }
        };
        publish_carried_deliveries(&self.service, &mut result).await;
        let Some(envelope) = envelope else {
            return; // settled without a reply
        };
        let reply = match result {
            DeviceResult::Settled { settled } => settlement_reply(settled),
            DeviceResult::Received(None) => pull_reply(None),
            DeviceResult::Received(Some(delivered)) => {
                let text = DeliveryText::of(&delivered);
                let delivery = text.delivery(&delivered);
                pull_reply(Some((&delivery, &delivered.message.body)))
            }
            _ => return,
        };
        self.reply(&envelope, reply).await;
    }

    /// Proposes a device's settlement or pull; while this node still serves, a refusal is
    /// retried ([`RETRY_FIRST`] doubling, for at most [`RETRY_FOR`]). openraft's leader refuses
    /// writes for a moment when its lease lapses (a disk stall that delays the followers'
    /// acknowledgements by ~100 ms is enough) without losing its leadership; a settlement
    /// dropped then would leave the device's message locked until the lock runs out, and the
    /// device would get it twice. Retrying is safe: a lock token settles once, and a pull is
    /// under the reply memory.
    async fn propose_retrying(
        &self,
        asked: Option<(&Envelope, u128)>,
        message_expiry_secs: Option<u32>,
        command: DeviceCommand,
    ) -> Result<Outcome, Unavailable> {
        let give_up = Instant::now() + RETRY_FOR;
        let mut delay = RETRY_FIRST;
        loop {
            let outcome = self
                .service
                .propose_device(asked, message_expiry_secs, command.clone())
                .await;
            match outcome {
                Err(Unavailable::NotLeader | Unavailable::Overloaded)
                    if self.service.is_serving() && Instant::now() + delay < give_up =>
                {
                    self.service
                        .metrics()
                        .devicebound
                        .device_request_retries_total
                        .inc();
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                }
                other => return other,
            }
        }
    }

    async fn reply(&self, envelope: &Envelope, reply: DeviceReply) {
        let expiry = envelope::remaining_expiry_secs(envelope.deadline, Instant::now());
        if expiry == Some(0) {
            return;
        }
        let message = OutboundMessage {
            topic: envelope.response_topic.clone(),
            payload: Bytes::from(reply.payload),
            correlation_data: Some(envelope.correlation_data.clone()),
            response_topic: None,
            message_expiry_secs: expiry,
            content_type: None,
            user_properties: owned_properties(reply.user_properties),
            kind: OutboundKind::Response,
        };
        self.service.outbox().publish(message).await;
    }
}

/// Publishes the deliveries a `SendAndDeliver` or `SettleAndDeliver` result carries and leaves
/// the plain reply in their place (`Sent`, `Settled`).
pub async fn publish_carried_deliveries<O: Outbox>(
    service: &Service<O>,
    result: &mut DeviceResult,
) {
    if let Some(reply) = result.without_deliveries() {
        for delivery in std::mem::replace(result, reply).deliveries() {
            publish_delivery(service, delivery).await;
        }
    }
}

/// Publishes one committed delivery (only while serving: otherwise its lock runs out and the
/// next leader delivers it again). Shared by the push rounds, SEND and settlements.
async fn publish_delivery<O: Outbox>(service: &Service<O>, delivered: MessageDelivery) {
    if !service.is_serving() {
        return;
    }
    let text = DeliveryText::of(&delivered);
    let delivery = text.delivery(&delivered);
    let Ok(DeliveryHeaders {
        topic,
        user_properties,
    }) = delivery_headers(&delivery)
    else {
        // Refused at SEND already; should one slip through, dead-letter it rather than
        // publish a topic the broker would refuse.
        tracing::warn!(
            device = %text.device,
            "delivery topic too long: dead-lettering the message"
        );
        let _ = service
            .propose_device(
                None,
                None,
                DeviceCommand::Settle {
                    device: delivered.device.clone(),
                    token: delivered.token.clone(),
                    settlement: Settlement::Reject,
                },
            )
            .await;
        return;
    };
    let user_properties = owned_properties(user_properties);
    let expiry = message_expiry_interval_secs(delivered.message.expires_at_ms, service.wall_ms());
    let token = delivered.token.clone();
    let message = OutboundMessage {
        topic,
        payload: Bytes::from(delivered.message.body),
        correlation_data: None,
        response_topic: None,
        message_expiry_secs: Some(expiry),
        content_type: None,
        user_properties,
        kind: OutboundKind::DeviceMessage {
            device: text.device,
            token,
        },
    };
    service.outbox().publish(message).await;
}

fn owned_properties(pairs: Vec<(String, String)>) -> Vec<(Cow<'static, str>, String)> {
    pairs
        .into_iter()
        .map(|(name, value)| (Cow::Owned(name), value))
        .collect()
}
