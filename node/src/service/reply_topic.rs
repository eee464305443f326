//! Where a reply may be published (protocol §1, devicebound.md §3). The node publishes every
//! reply with its own broker rights, so a Response Topic must never turn a reply into a
//! message to someone else: a forged cloud-to-device message on a device's delivery topic, a
//! forged feedback batch, a notification, or a request to the store itself.
//!
//! A state store or device-bound service request may be answered only under one of the
//! operator's reply prefixes (`mqtt.reply_topic_prefixes`, default `clients/`, which every
//! official SDK uses) and never under a topic the store publishes or serves
//! ([`STORE_TOPICS`], the notification prefix), whatever the prefixes say. A device's pull or
//! settlement may also be answered under that device's own `devices/{deviceId}/`, except its
//! delivery topics and the device topics the leader reads (a reply there would come back as
//! a request or as activity). No reply topic holds a wildcard, starts with `$` (the broker's
//! own topics) or contains U+0000.
//!
//! Pure functions of the topic, the device id and the prefixes.

use crate::transport::{DEVICE_FILTERS, NOTIFY_TOPIC_PREFIX};

/// The default reply prefixes: every official SDK answers under `clients/`.
pub const DEFAULT_REPLY_TOPIC_PREFIXES: [&str; 1] = ["clients/"];

/// First levels the store publishes or serves: its request topics and probes (`statestore/`,
/// `devicebound/`), device deliveries and device publishes (`devices/`), feedback
/// (`messages/servicebound/`). A reply topic equal to one of these or under it is refused.
pub const STORE_TOPICS: [&str; 4] = [
    "statestore",
    "devicebound",
    "devices",
    "messages/servicebound",
];

/// The filter of a device's delivery topics (devicebound.md §3).
const DELIVERY_FILTER: &str = "devices/+/messages/devicebound/#";

/// The operator's reply prefixes, checked at start (see [`validate_prefix`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyTopics {
    prefixes: Vec<String>,
}

impl Default for ReplyTopics {
    fn default() -> Self {
        ReplyTopics::new(DEFAULT_REPLY_TOPIC_PREFIXES.iter().map(|p| (*p).to_owned()))
    }
}

impl ReplyTopics {
    /// Replies allowed under `prefixes` (besides the store's own topics, which stay refused).
    pub fn new(prefixes: impl IntoIterator<Item = String>) -> Self {
        ReplyTopics {
            prefixes: prefixes.into_iter().collect(),
        }
    }

    /// Protocol §1: may a state store or device-bound service request be answered on `topic`?
    pub fn allows(&self, topic: &str) -> bool {
        publishable(topic)
            && !is_store_topic(topic)
            && self.prefixes.iter().any(|p| topic.starts_with(p.as_str()))
    }

    /// devicebound.md §3: may a pull or settlement of `device_id` be answered on `topic`? Under
    /// the device's own `devices/{deviceId}/` (not its deliveries, not a topic the leader
    /// reads), or wherever [`ReplyTopics::allows`] says.
    pub fn allows_device(&self, device_id: &str, topic: &str) -> bool {
        let own = topic
            .strip_prefix("devices/")
            .and_then(|rest| rest.strip_prefix(device_id))
            .is_some_and(|rest| rest.starts_with('/'));
        if own {
            return publishable(topic)
                && !matches_filter(DELIVERY_FILTER, topic)
                && !DEVICE_FILTERS
                    .iter()
                    .any(|filter| matches_filter(filter, topic));
        }
        self.allows(topic)
    }
}

/// Why a configured reply prefix is unusable, or `None` if it is fine.
pub fn validate_prefix(prefix: &str) -> Option<&'static str> {
    if prefix.is_empty() {
        Some("must not be empty")
    } else if prefix.contains(['+', '#']) {
        Some("must not contain the wildcards + or #")
    } else if prefix.contains('\0') {
        Some("must not contain U+0000")
    } else {
        None
    }
}

/// A topic name the node may publish to at all: no wildcards, not the broker's `$` topics,
/// no U+0000 (a broker closes the connection of a client that publishes one).
fn publishable(topic: &str) -> bool {
    !topic.is_empty() && !topic.starts_with('$') && !topic.contains(['+', '#', '\0'])
}

/// Under the notification prefix (plain prefix, protocol §1) or equal to or under one of
/// [`STORE_TOPICS`].
fn is_store_topic(topic: &str) -> bool {
    topic.starts_with(NOTIFY_TOPIC_PREFIX)
        || STORE_TOPICS.iter().any(|store| {
            topic
                .strip_prefix(store)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        })
}

/// MQTT topic filter matching (`+` one level, a final `#` any number of levels, the parent
/// level included).
fn matches_filter(filter: &str, topic: &str) -> bool {
    let mut topic_levels = topic.split('/');
    for level in filter.split('/') {
        match (level, topic_levels.next()) {
            ("#", _) => return true,
            ("+", Some(_)) => {}
            (level, Some(actual)) if level == actual => {}
            _ => return false,
        }
    }
    topic_levels.next().is_none()
}

#[cfg(test)]
mod tests;
