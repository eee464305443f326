//! The topics devices publish to (devicebound.md §3), read by the leader:
//! settlement (`devices/{id}/messages/settle/{complete|abandon|reject}/{lockToken}`),
//! pull (`devices/{id}/messages/receive`), and any other publish under
//! `devices/{id}/messages/`, which only says the device is online (it resets
//! the device's push backoff). Topics are matched case-sensitively, as MQTT
//! does. A malformed topic is a [`DeviceTopicError`] and gets no reply.

use super::ids::{is_valid_lock_token, validate_device_id};

/// The subscription that brings every device publish to the leader. The
/// leader's own deliveries (`.../messages/devicebound/...`) match it too;
/// subscribe with No Local, and [`parse_device_topic`] refuses them anyway.
pub const DEVICE_INBOUND_FILTER: &str = "devices/+/messages/#";

/// How a device settles a delivered message (devicebound.md §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SettleAction {
    /// Done: the message is Completed (feedback `Success` for ack positive/full).
    Complete,
    /// Give it back: Enqueued again at the head of the queue.
    Abandon,
    /// Refuse it: Dead-lettered (`Rejected`).
    Reject,
}

impl SettleAction {
    /// Every action.
    pub const ALL: [SettleAction; 3] = [
        SettleAction::Complete,
        SettleAction::Abandon,
        SettleAction::Reject,
    ];

    /// The topic level: `complete`, `abandon` or `reject`.
    pub fn topic_level(self) -> &'static str {
        match self {
            SettleAction::Complete => "complete",
            SettleAction::Abandon => "abandon",
            SettleAction::Reject => "reject",
        }
    }
}

/// A well-formed device topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceTopic<'a> {
    /// `devices/{id}/messages/settle/{action}/{lockToken}`.
    Settle {
        /// The publishing device (its identity; the broker's ACL enforces it).
        device_id: &'a str,
        /// What to do with the message.
        action: SettleAction,
        /// The lock token of the delivery being settled.
        lock_token: &'a str,
    },
    /// `devices/{id}/messages/receive`: pull the head message.
    Receive {
        /// The publishing device.
        device_id: &'a str,
    },
    /// Any other publish under `devices/{id}/messages/`: the device is online.
    Activity {
        /// The publishing device.
        device_id: &'a str,
    },
}

impl<'a> DeviceTopic<'a> {
    /// The device that published.
    pub fn device_id(&self) -> &'a str {
        match *self {
            DeviceTopic::Settle { device_id, .. }
            | DeviceTopic::Receive { device_id }
            | DeviceTopic::Activity { device_id } => device_id,
        }
    }
}

/// Why a topic is not a well-formed device topic. Never answered; the label
/// is for a drop counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum DeviceTopicError {
    /// Not of the form `devices/{id}/messages/...`.
    #[error("not a device messages topic")]
    NotDeviceMessages,
    /// The `{id}` level is not a valid device id.
    #[error("invalid device id in topic")]
    InvalidDeviceId,
    /// `devices/{id}/messages/devicebound/...`: a delivery, not a device publish.
    #[error("a delivery topic, not a device publish")]
    DeliveryTopic,
    /// `settle` without exactly an action level and a token level.
    #[error("malformed settle topic")]
    MalformedSettle,
    /// A settle action other than `complete`, `abandon`, `reject`.
    #[error("unknown settle action")]
    UnknownSettleAction,
    /// The lock token level is not a well-formed lock token.
    #[error("invalid lock token in topic")]
    InvalidLockToken,
    /// `receive` followed by more levels.
    #[error("malformed receive topic")]
    MalformedReceive,
}

impl DeviceTopicError {
    /// Every error, for registering metric label values up front.
    pub const ALL: [DeviceTopicError; 7] = [
        DeviceTopicError::NotDeviceMessages,
        DeviceTopicError::InvalidDeviceId,
        DeviceTopicError::DeliveryTopic,
        DeviceTopicError::MalformedSettle,
        DeviceTopicError::UnknownSettleAction,
        DeviceTopicError::InvalidLockToken,
        DeviceTopicError::MalformedReceive,
    ];

    /// Snake_case metric label, e.g. `invalid_lock_token`.
    pub fn label(self) -> &'static str {
        match self {
            DeviceTopicError::NotDeviceMessages => "not_device_messages",
            DeviceTopicError::InvalidDeviceId => "invalid_device_id",
            DeviceTopicError::DeliveryTopic => "delivery_topic",
            DeviceTopicError::MalformedSettle => "malformed_settle",
            DeviceTopicError::UnknownSettleAction => "unknown_settle_action",
            DeviceTopicError::InvalidLockToken => "invalid_lock_token",
            DeviceTopicError::MalformedReceive => "malformed_receive",
        }
    }
}

/// Parse a topic a device published to.
pub fn parse_device_topic(topic: &str) -> Result<DeviceTopic<'_>, DeviceTopicError> {
    let (device_id, under_messages) = split_device_messages(topic)?;
    let mut levels = under_messages.split('/');
    match levels.next() {
        Some("receive") => match levels.next() {
            None => Ok(DeviceTopic::Receive { device_id }),
            Some(_) => Err(DeviceTopicError::MalformedReceive),
        },
        Some("settle") => {
            let (Some(action), Some(lock_token), None) =
                (levels.next(), levels.next(), levels.next())
            else {
                return Err(DeviceTopicError::MalformedSettle);
            };
            let action = SettleAction::ALL
                .into_iter()
                .find(|candidate| candidate.topic_level() == action)
                .ok_or(DeviceTopicError::UnknownSettleAction)?;
            if !is_valid_lock_token(lock_token) {
                return Err(DeviceTopicError::InvalidLockToken);
            }
            Ok(DeviceTopic::Settle {
                device_id,
                action,
                lock_token,
            })
        }
        Some("devicebound") => Err(DeviceTopicError::DeliveryTopic),
        _ => Ok(DeviceTopic::Activity { device_id }),
    }
}

/// The device whose publish to `topic` shows it is online: any topic under
/// `devices/{valid id}/messages/` except deliveries, malformed settle and
/// receive topics included (devicebound.md §3: "publishes anything").
pub fn device_activity(topic: &str) -> Option<&str> {
    let (device_id, under_messages) = split_device_messages(topic).ok()?;
    let first_level = under_messages.split('/').next();
    (first_level != Some("devicebound")).then_some(device_id)
}

/// The filter a device subscribes to for its deliveries (devicebound.md §3):
/// `devices/{deviceId}/messages/devicebound/#`.
pub fn device_subscription_filter(device_id: &str) -> String {
    format!("devices/{device_id}/messages/devicebound/#")
}

/// `devices/{id}/messages/{rest}` → (valid id, rest).
fn split_device_messages(topic: &str) -> Result<(&str, &str), DeviceTopicError> {
    let after_devices = topic
        .strip_prefix("devices/")
        .ok_or(DeviceTopicError::NotDeviceMessages)?;
    let (device_id, after_device) = after_devices
        .split_once('/')
        .ok_or(DeviceTopicError::NotDeviceMessages)?;
    let under_messages = after_device
        .strip_prefix("messages/")
        .ok_or(DeviceTopicError::NotDeviceMessages)?;
    let device_id =
        validate_device_id(device_id.as_bytes()).map_err(|_| DeviceTopicError::InvalidDeviceId)?;
    Ok((device_id, under_messages))
}
