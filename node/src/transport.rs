//! Plain data crossing between the MQTT session and the service: what arrived, what to send.
//! No MQTT crate types here, so the service never depends on the MQTT client.

use std::borrow::Cow;

use bytes::Bytes;
use tokio::time::Instant;

use crate::outbound::{Charge, Lane};

/// The request topic of the state store protocol (§1).
pub const REQUEST_TOPIC: &str = statestore_vocab::spec::STATE_STORE_REQUEST_TOPIC;

/// The request topic of the device-bound service (devicebound.md §2).
pub const DEVICEBOUND_REQUEST_TOPIC: &str = statestore_vocab::spec::DEVICEBOUND_REQUEST_TOPIC;

/// Prefix of every device topic (devicebound.md §3).
pub const DEVICE_TOPIC_PREFIX: &str = statestore_vocab::spec::DEVICE_TOPIC_PREFIX;

/// What the leader subscribes to of the device topics. Not `devices/+/messages/#`: a
/// subscription matching the delivery topics (even with No Local) makes the broker answer
/// PUBACK 0x00 to deliveries to an offline device, and offline detection relies on 0x10.
/// Any single-level publish (`.../messages/receive`, `.../messages/events`), settlements and
/// telemetry under `.../messages/events/` reach the leader.
pub const DEVICE_FILTERS: [&str; 3] = [
    "devices/+/messages/+",
    "devices/+/messages/settle/#",
    "devices/+/messages/events/#",
];

/// Prefix of the notification topics; response topics under it are refused (§1, §7).
pub const NOTIFY_TOPIC_PREFIX: &str = statestore_vocab::spec::NOTIFY_TOPIC_PREFIX;

/// A PUBLISH received on the request topic.
#[derive(Debug, Clone)]
pub struct InboundMessage {
    /// Topic it arrived on.
    pub topic: String,
    /// 0, 1 or 2.
    pub qos: u8,
    /// Response Topic property.
    pub response_topic: Option<String>,
    /// Correlation Data property.
    pub correlation_data: Option<Bytes>,
    /// Message Expiry Interval property, seconds.
    pub message_expiry_secs: Option<u32>,
    /// Content Type property.
    pub content_type: Option<String>,
    /// User properties in wire order.
    pub user_properties: Vec<(String, String)>,
    /// The payload.
    pub payload: Bytes,
    /// When the session received it (expiry is counted from here). A Tokio instant, so a
    /// paused Tokio clock controls request deadlines in tests.
    pub received_at: Instant,
}

impl InboundMessage {
    /// The first user property named `name`.
    pub fn user_property(&self, name: &str) -> Option<&str> {
        self.user_properties
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A request admitted into the node's request budget, with the share it holds until it is done.
pub struct Admitted {
    /// The request.
    pub message: InboundMessage,
    /// Its share of the request budget (returned when dropped).
    pub admission: crate::admission::Admission,
}

/// Why a message is published; decides how its PUBACK is handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutboundKind {
    /// A reply to a request.
    Response,
    /// A KEYNOTIFY notification to `client_id` (PUBACK 0x10 means the client is gone).
    Notification {
        /// Client the notification is addressed to.
        client_id: String,
    },
    /// A liveness probe of the broker connection (nobody subscribes to it; only its PUBACK
    /// matters).
    Probe,
    /// A message pushed to a device (PUBACK 0x10 means the device is offline).
    DeviceMessage {
        /// The device id.
        device: String,
        /// The delivery's lock token.
        token: String,
    },
    /// A feedback batch (PUBACK 0x10 means no service listens).
    Feedback {
        /// The delivery's lock token.
        token: String,
    },
    /// A device's publish that reached this node after it stopped serving, published again
    /// for the serving leader (`crate::service::device_forward`); its PUBACK goes to `ack`.
    DeviceForward {
        /// Where the broker's answer goes.
        ack: PubackWaiter,
    },
}

/// What the broker answered to a publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PubackAnswer {
    /// PUBACK 0x00: delivered to at least one subscriber.
    Accepted,
    /// PUBACK 0x10: nobody subscribes to its topic.
    NoSubscribers,
    /// Any other reason code (not authorized, quota exceeded, ...).
    Refused,
}

/// The receiving end of one publish's PUBACK: the session reports the answer through a clone
/// of it; when every clone is dropped unanswered (the publish was dropped, or the connection
/// closed before the broker answered), [`PubackWaiter::channel`]'s receiver sees the sender
/// gone.
#[derive(Clone)]
pub struct PubackWaiter(
    std::sync::Arc<std::sync::Mutex<Option<tokio::sync::oneshot::Sender<PubackAnswer>>>>,
);

impl PubackWaiter {
    /// A waiter and the receiver its answer arrives on.
    pub fn channel() -> (PubackWaiter, tokio::sync::oneshot::Receiver<PubackAnswer>) {
        let (sender, receiver) = tokio::sync::oneshot::channel();
        (
            PubackWaiter(std::sync::Arc::new(std::sync::Mutex::new(Some(sender)))),
            receiver,
        )
    }

    /// Reports the broker's answer (the first report counts).
    pub fn report(&self, answer: PubackAnswer) {
        let sender = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(sender) = sender {
            let _ = sender.send(answer);
        }
    }
}

impl std::fmt::Debug for PubackWaiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PubackWaiter")
    }
}

impl PartialEq for PubackWaiter {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for PubackWaiter {}

impl OutboundKind {
    /// Metric label.
    pub fn label(&self) -> &'static str {
        match self {
            OutboundKind::Response => "response",
            OutboundKind::Notification { .. } => "notification",
            OutboundKind::Probe => "probe",
            OutboundKind::DeviceMessage { .. } => "device_message",
            OutboundKind::Feedback { .. } => "feedback",
            OutboundKind::DeviceForward { .. } => "device_forward",
        }
    }
}

/// Topic of the liveness probes (inside the store's namespace; nobody subscribes to it).
pub const PROBE_TOPIC: &str = "statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/probe";

/// A QoS 1 PUBLISH to send.
#[derive(Debug, Clone)]
pub struct OutboundMessage {
    /// Topic.
    pub topic: String,
    /// Payload.
    pub payload: Bytes,
    /// Correlation Data property.
    pub correlation_data: Option<Bytes>,
    /// Response Topic property (only a forwarded device publish has one).
    pub response_topic: Option<String>,
    /// Message Expiry Interval property, seconds.
    pub message_expiry_secs: Option<u32>,
    /// Content Type property.
    pub content_type: Option<&'static str>,
    /// User properties (names are mostly static; device messages carry application ones).
    pub user_properties: Vec<(Cow<'static, str>, String)>,
    /// What it is.
    pub kind: OutboundKind,
}

/// Something that publishes [`OutboundMessage`]s (the MQTT session, or a fake in tests).
///
/// The session's outbox charges every message to the outbound budget ([`crate::outbound`])
/// until the broker acknowledges it; the provided methods are those of an outbox without a
/// budget.
pub trait Outbox: Send + Sync + 'static {
    /// Queues a message, first taking room for it in its lane (waiting for it); returns false
    /// if it was dropped (session gone or queue closed).
    fn publish(&self, message: OutboundMessage) -> impl std::future::Future<Output = bool> + Send;

    /// Like [`Outbox::publish`], with room taken beforehand ([`Outbox::try_charge`],
    /// [`Outbox::charge`]); used as it is if it covers the message.
    fn publish_charged(
        &self,
        message: OutboundMessage,
        prepaid: Option<Charge>,
    ) -> impl std::future::Future<Output = bool> + Send {
        drop(prepaid);
        self.publish(message)
    }

    /// Room for `bytes` in `lane` if there is some now.
    fn try_charge(&self, lane: Lane, bytes: usize) -> Option<Charge> {
        let _ = lane;
        Some(Charge::unbudgeted(bytes))
    }

    /// Room for `bytes` in `lane`, waiting for it.
    fn charge(&self, lane: Lane, bytes: usize) -> impl std::future::Future<Output = Charge> + Send {
        let _ = lane;
        std::future::ready(Charge::unbudgeted(bytes))
    }
}
