//! Device settlements and pulls that reach a node which no longer serves.
//!
//! A leader gives up its duties first and releases its subscription to the device topics
//! after (`crate::service::leader`): what the broker delivered to it in between, or just
//! before, arrives at a node that must not propose. Dropped, a settlement would leave its
//! message locked until the lock ran out, and the device would get the message twice; a
//! pull would go unanswered. So such a publish is **published again, unchanged** (topic,
//! payload, response topic, correlation data, the rest of its message expiry, user
//! properties) with one more user property, [`FORWARD_MARK`] = this node's client id, for the
//! serving leader, which subscribes to the same topics and handles it like the device's own.
//! The device sees nothing of it (its reply, if it asked for one, comes from the leader).
//!
//! - **When.** Settlements, and pulls that carry an envelope (a pull nobody can answer is
//!   dropped by the leader as well). Not activity (`.../messages/events`): that is the
//!   device's telemetry, which backends subscribe to too; publishing it again would duplicate
//!   it, and all the leader learns from it is that the device is online, which its next
//!   publish tells again.
//! - **Ordering.** The forward is published once this node's own subscription is gone (or
//!   after [`FORWARD_FOR`]): Mosquitto answers PUBACK 0x00 to a publish that matches only the
//!   publisher's own No Local subscription, so a forward sent while this node still subscribed
//!   could be "delivered" to nobody.
//! - **Election in progress.** PUBACK 0x10 (nobody subscribes yet), or no PUBACK at all (the
//!   connection dropped), means no leader took it: it is published again after
//!   [`FIRST_RETRY`] doubling up to [`MAX_RETRY`], for at most [`FORWARD_FOR`] after it
//!   arrived (less if its message expiry is sooner). If this node serves again meanwhile, it
//!   handles the publish itself.
//! - **No loops.** A publish that already carries the mark is not forwarded again: two deposed
//!   nodes cannot pass it back and forth. A device may set the mark itself; that only stops the
//!   forwarding of its own publish (which it would lose as before), and it grants nothing: the
//!   leader ignores the mark, and the reply memory's request digest leaves it out, so a
//!   forwarded retry is still the same request.
//! - **Duplicates.** Should the leader get both the device's publish and the forward (the new
//!   leader subscribed before the old one's subscription went), the second settlement finds
//!   the lock gone (`settled: false`, nothing changes), and a second request with an envelope
//!   gets the remembered reply of the first.
//! - **Bounds.** The forward runs inside the device publish's handling, which holds its share
//!   of the request budget until it ends: at most [`FORWARD_FOR`] each.
//!
//! [`decide`] and [`forwarded_copy`] are pure; [`forward`] drives the publishes through any
//! [`Outbox`], so tests use a fake one.

use std::borrow::Cow;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::mqtt::SessionState;
use crate::service::device_push::DevicePush;
use crate::transport::{
    InboundMessage, OutboundKind, OutboundMessage, Outbox, PubackAnswer, PubackWaiter,
};
use crate::verdict::Unavailable;
use statestore_protocol::devicebound::DeviceTopic;

/// The user property a forwarded publish carries: the forwarding node's client id.
pub const FORWARD_MARK: &str = "__fwd";
/// Longest a forward is tried after its publish arrived.
pub const FORWARD_FOR: Duration = Duration::from_secs(5);
/// First pause before a forward nobody took is published again.
pub const FIRST_RETRY: Duration = Duration::from_millis(50);
/// Longest pause between two publishes of a forward.
pub const MAX_RETRY: Duration = Duration::from_millis(800);

/// What to do with a device publish that arrived while this node does not serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Publish it again for the serving leader.
    Forward,
    /// Already forwarded once: dropped, counted as `looped`.
    Looped,
    /// Nothing to forward (activity, a pull without an envelope): dropped as `not_leader`.
    Drop,
}

/// The rule (see the module docs); `has_envelope`: the publish has what a reply needs.
pub fn decide(topic: &DeviceTopic<'_>, message: &InboundMessage, has_envelope: bool) -> Decision {
    let forwardable = match topic {
        DeviceTopic::Settle { .. } => true,
        DeviceTopic::Receive { .. } => has_envelope,
        DeviceTopic::Activity { .. } => false,
    };
    if !forwardable {
        Decision::Drop
    } else if message.user_property(FORWARD_MARK).is_some() {
        Decision::Looped
    } else {
        Decision::Forward
    }
}

/// `message` as this node (`node`, its client id) publishes it again at `now`, its PUBACK
/// reported to `ack`; `None` once its message expiry has passed. The content type is left
/// out: the leader reads none on these topics.
pub fn forwarded_copy(
    message: &InboundMessage,
    node: &str,
    now: Instant,
    ack: PubackWaiter,
) -> Option<OutboundMessage> {
    let message_expiry_secs = match message.message_expiry_secs {
        None => None,
        Some(secs) => {
            let deadline = message.received_at + Duration::from_secs(u64::from(secs));
            let left = deadline
                .checked_duration_since(now)
                .filter(|left| !left.is_zero())?;
            // Rounded up, as the broker would have: never "no expiry".
            Some(u32::try_from(left.as_millis().div_ceil(1_000)).unwrap_or(u32::MAX))
        }
    };
    let mut user_properties: Vec<(Cow<'static, str>, String)> = message
        .user_properties
        .iter()
        .map(|(name, value)| (Cow::Owned(name.clone()), value.clone()))
        .collect();
    user_properties.push((Cow::Borrowed(FORWARD_MARK), node.to_owned()));
    Some(OutboundMessage {
        topic: message.topic.clone(),
        payload: message.payload.clone(),
        correlation_data: message.correlation_data.clone(),
        response_topic: message.response_topic.clone(),
        message_expiry_secs,
        content_type: None,
        user_properties,
        kind: OutboundKind::DeviceForward { ack },
    })
}

/// What became of a forward (`statestore_devicebound_forwards_total{result}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forwarded {
    /// The broker delivered it (PUBACK 0x00).
    Forwarded,
    /// This node serves again: the caller handles the publish itself.
    Served,
    /// Its message expiry passed first.
    Expired,
    /// The broker refused it (a reason code other than 0x00 and 0x10).
    Refused,
    /// Nobody took it within [`FORWARD_FOR`].
    GaveUp,
}

impl Forwarded {
    /// Metric label (one of [`crate::device_metrics::FORWARD_RESULTS`]).
    pub fn label(self) -> &'static str {
        match self {
            Forwarded::Forwarded => "forwarded",
            Forwarded::Served => "served",
            Forwarded::Expired => "expired",
            Forwarded::Refused => "refused",
            Forwarded::GaveUp => "gave_up",
        }
    }
}

/// What [`forward`] needs of the node around it.
pub struct Forwarder<'a, O: Outbox> {
    /// Where the forward is published.
    pub outbox: &'a O,
    /// This node's client id (the mark's value).
    pub node: &'a str,
    /// True once this node serves again.
    pub serving: &'a (dyn Fn() -> bool + Sync),
    /// The session's state, to wait until this node's own subscription is gone (`None`: no
    /// session to wait for).
    pub session: Option<watch::Receiver<SessionState>>,
    /// Called for every publish after the first.
    pub on_retry: &'a (dyn Fn() + Sync),
}

/// Publishes `message` again for the serving leader until the broker delivers it (see the
/// module docs for when it is published and how often).
pub async fn forward<O: Outbox>(
    forwarder: Forwarder<'_, O>,
    message: &InboundMessage,
) -> Forwarded {
    let give_up = message.received_at + FORWARD_FOR;
    if let Some(mut session) = forwarder.session {
        // Bounded like the whole forward; past it the forward goes out anyway.
        let released = session.wait_for(|state| !state.request_subscription_active);
        let _ = tokio::time::timeout_at(give_up, released).await;
    }
    let mut delay = FIRST_RETRY;
    let mut first = true;
    loop {
        if (forwarder.serving)() {
            return Forwarded::Served;
        }
        let (ack, answer) = PubackWaiter::channel();
        let Some(copy) = forwarded_copy(message, forwarder.node, Instant::now(), ack) else {
            return Forwarded::Expired;
        };
        if !first {
            (forwarder.on_retry)();
        }
        first = false;
        // Refused by a closed session, the copy (and its waiter) is dropped: `answer` ends.
        forwarder.outbox.publish(copy).await;
        match tokio::time::timeout_at(give_up, answer).await {
            Ok(Ok(PubackAnswer::Accepted)) => return Forwarded::Forwarded,
            Ok(Ok(PubackAnswer::Refused)) => return Forwarded::Refused,
            // Nobody subscribed yet, or the publish went nowhere: try again shortly.
            Ok(Ok(PubackAnswer::NoSubscribers) | Err(_)) => {}
            Err(_) => return Forwarded::GaveUp,
        }
        if Instant::now() + delay >= give_up {
            return Forwarded::GaveUp;
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(MAX_RETRY);
    }
}

impl<O: Outbox> DevicePush<O> {
    /// A device publish on `topic` arrived while this node does not serve: forwarded, counted
    /// or dropped (see the module docs). True if this node serves again meanwhile and must
    /// handle the publish itself.
    pub(super) async fn forward_if_deposed(
        &self,
        topic: &DeviceTopic<'_>,
        message: &InboundMessage,
        has_envelope: bool,
    ) -> bool {
        let service = self.service();
        let metrics = &service.metrics().devicebound;
        let forwarded = match decide(topic, message, has_envelope) {
            Decision::Drop => {
                metrics.dropped(Unavailable::NotLeader.label());
                return false;
            }
            Decision::Looped => {
                metrics.forwards_total.with_label_values(&["looped"]).inc();
                tracing::debug!(topic = %message.topic, "forwarded device publish at a node that does not serve: dropped");
                return false;
            }
            Decision::Forward => {
                let retried = metrics.forwards_total.with_label_values(&["retried"]);
                let serving = || service.is_serving();
                let on_retry = || retried.inc();
                forward(
                    Forwarder {
                        outbox: service.outbox(),
                        node: &service.config.node_client_id,
                        serving: &serving,
                        session: self.session_state(),
                        on_retry: &on_retry,
                    },
                    message,
                )
                .await
            }
        };
        metrics
            .forwards_total
            .with_label_values(&[forwarded.label()])
            .inc();
        tracing::debug!(topic = %message.topic, result = forwarded.label(), "device publish at a node that does not serve");
        forwarded == Forwarded::Served
    }
}

#[cfg(test)]
mod tests;
