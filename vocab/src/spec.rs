//! The constants the specs fix (`shared/spec/protocol.md`, `shared/spec/devicebound.md`) and
//! MQTT's own, each defined once: topics every party must agree on and hard limits. Settings a
//! deployment may change are not here (see the node's configuration).

/// The request topic of the state store protocol (protocol §1).
pub const STATE_STORE_REQUEST_TOPIC: &str =
    "statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke";

/// Prefix of the KEYNOTIFY notification topics (protocol §1, §7):
/// `{prefix}/{hex client id}/command/notify/{hex key}`.
pub const NOTIFY_TOPIC_PREFIX: &str = "clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8";

/// The request topic of the device-bound service (devicebound §2).
pub const DEVICEBOUND_REQUEST_TOPIC: &str = "devicebound/v1/command/invoke";

/// Prefix of every device topic (devicebound §3).
pub const DEVICE_TOPIC_PREFIX: &str = "devices/";

/// Where feedback batches are published (devicebound §4).
pub const FEEDBACK_TOPIC: &str = "messages/servicebound/feedback";

/// The longest a device-bound message lives, whatever TTL or EXPIRES says: 2 days after
/// enqueue (devicebound §1).
pub const MAX_MESSAGE_LIFETIME_MS: u64 = 2 * 24 * 60 * 60 * 1000;

/// The longest MQTT topic name, in bytes (MQTT 5 §1.5.4: a two-byte length).
pub const MAX_MQTT_TOPIC_BYTES: usize = 65_535;
