//! The `statestore_devicebound_*` metric families (devicebound.md): requests of the
//! device-bound service by verb and result, device topics dropped, message and feedback
//! transitions from the [`DeviceCounters`] apply reports, the push's offline backoff, and the
//! size of the queues' in-memory index (devices, queued messages, bytes, queues by depth).
//! Every labelled series is created up front so dashboards see zeros, not gaps.

use prometheus::{
    HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};
use statestore_storage::devicebound::{DEPTH_CLASSES, DeviceCounters, DeviceIndex};

use statestore_protocol::{ErrorReply, ErrorService};

use crate::verdict::{self, Refusal, Unavailable};
use statestore_protocol::devicebound::{DeviceTopicError, DeviceVerb};

/// Message transitions (`statestore_devicebound_messages_total{transition}`).
pub const TRANSITIONS: [&str; 10] = [
    "enqueued",
    "delivered",
    "undelivered",
    "completed",
    "abandoned",
    "rejected",
    "expired",
    "dead_lettered",
    "purged",
    "forgotten",
];

/// `depth` labels of `statestore_devicebound_queues`, one per
/// [`statestore_storage::devicebound::DEPTH_CLASSES`] class.
pub const DEPTH_LABELS: [&str; DEPTH_CLASSES.len()] = [
    "1", "2-5", "6-10", "11-25", "26-50", "51-100", "101-1000", "1001+",
];

/// Feedback batch events (`statestore_devicebound_feedback_batches_total{event}`).
pub const BATCH_EVENTS: [&str; 6] = [
    "cut",
    "published",
    "undelivered",
    "settled",
    "redelivered",
    "dropped",
];

/// `result` labels of `statestore_devicebound_forwards_total`, one per
/// `crate::service::device_forward::Forwarded` outcome and the retries.
pub const FORWARD_RESULTS: [&str; 7] = [
    "forwarded",
    "retried",
    "served",
    "looped",
    "expired",
    "refused",
    "gave_up",
];

/// The device-bound families.
#[derive(Clone)]
pub struct DeviceboundMetrics {
    /// Requests answered, by verb and result.
    pub requests_total: IntCounterVec,
    /// Request latency, by verb and result.
    pub request_duration_seconds: HistogramVec,
    /// Device publishes dropped without effect (malformed topic, not serving), by reason.
    pub device_topics_dropped_total: IntCounterVec,
    /// Device publishes handled (settle, receive, activity).
    pub device_requests_total: IntCounterVec,
    /// Message transitions.
    pub messages_total: IntCounterVec,
    /// Message locks that ran out.
    pub lock_expiries_total: IntCounter,
    /// Dead letters dropped to stay within the per-device cap.
    pub dead_letters_dropped_total: IntCounter,
    /// Feedback records written.
    pub feedback_records_total: IntCounter,
    /// Feedback batch events.
    pub feedback_batches_total: IntCounterVec,
    /// Times a device's push backed off because it was offline (PUBACK 0x10).
    pub offline_backoffs_total: IntCounter,
    /// Devices whose push is backing off now.
    pub devices_in_backoff: IntGauge,
    /// Devices not backed off because the backoff map was full.
    pub backoff_overflow_total: IntCounter,
    /// Device publishes proposed again after the leader refused them for a moment.
    pub device_request_retries_total: IntCounter,
    /// Device settlements and pulls that reached this node after it stopped serving, by what
    /// became of them (`crate::service::device_forward`).
    pub forwards_total: IntCounterVec,
    /// Devices with state (queued messages or dead letters).
    pub devices: IntGauge,
    /// Messages queued, all devices together.
    pub queued_messages: IntGauge,
    /// Devices by the depth class of their queue.
    pub queues: IntGaugeVec,
    /// Memory of the queues' in-memory index, estimated.
    pub index_bytes: IntGauge,
}

macro_rules! metric {
    ($e:expr) => {
        $e.unwrap_or_else(|err| unreachable!("static metric definition: {err}"))
    };
}

fn counter_vec(name: &str, help: &str, label: &str, values: &[&str]) -> IntCounterVec {
    let vec = metric!(IntCounterVec::new(Opts::new(name, help), &[label]));
    for value in values {
        vec.with_label_values(&[value]);
    }
    vec
}

impl DeviceboundMetrics {
    /// Creates the families and registers them in `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let requests_total = metric!(IntCounterVec::new(
            Opts::new(
                "statestore_devicebound_requests_total",
                "Device-bound service requests answered, by command and result."
            ),
            &["command", "result"]
        ));
        let request_duration_seconds = metric!(HistogramVec::new(
            HistogramOpts::new(
                "statestore_devicebound_request_duration_seconds",
                "Time from receiving a device-bound request to queueing its reply."
            )
            .buckets(prometheus::exponential_buckets(0.0001, 2.0, 17).unwrap_or_default()),
            &["command", "result"]
        ));
        let results = verdict::result_labels(&ErrorReply::of(ErrorService::Devicebound));
        for verb in DeviceVerb::ALL {
            for result in &results {
                requests_total.with_label_values(&[verb.label(), result]);
            }
        }
        let drop_reasons: Vec<&str> = DeviceTopicError::ALL
            .iter()
            .map(|e| e.label())
            .chain(["no_envelope", Refusal::ForbiddenResponseTopic.label()])
            .chain(Unavailable::labels())
            .collect();
        let metrics = DeviceboundMetrics {
            requests_total,
            request_duration_seconds,
            device_topics_dropped_total: counter_vec(
                "statestore_devicebound_device_publishes_dropped_total",
                "Device publishes dropped without effect or reply, by reason.",
                "reason",
                &drop_reasons,
            ),
            device_requests_total: counter_vec(
                "statestore_devicebound_device_publishes_total",
                "Device publishes handled, by kind.",
                "kind",
                &["settle", "receive", "activity"],
            ),
            messages_total: counter_vec(
                "statestore_devicebound_messages_total",
                "Device-bound message transitions.",
                "transition",
                &TRANSITIONS,
            ),
            lock_expiries_total: metric!(IntCounter::new(
                "statestore_devicebound_lock_expiries_total",
                "Message locks that ran out (the message was Enqueued again)."
            )),
            dead_letters_dropped_total: metric!(IntCounter::new(
                "statestore_devicebound_dead_letters_dropped_total",
                "Dead letters dropped to stay within max_dead_letters_per_device."
            )),
            feedback_records_total: metric!(IntCounter::new(
                "statestore_devicebound_feedback_records_total",
                "Feedback records written."
            )),
            feedback_batches_total: counter_vec(
                "statestore_devicebound_feedback_batches_total",
                "Feedback batch events.",
                "event",
                &BATCH_EVENTS,
            ),
            offline_backoffs_total: metric!(IntCounter::new(
                "statestore_devicebound_offline_backoffs_total",
                "Times a device's push backed off after a PUBACK 0x10 (device offline)."
            )),
            devices_in_backoff: metric!(IntGauge::new(
                "statestore_devicebound_devices_in_backoff",
                "Devices whose push is backing off now (bounded)."
            )),
            backoff_overflow_total: metric!(IntCounter::new(
                "statestore_devicebound_backoff_overflow_total",
                "Offline devices not backed off because the backoff map was full."
            )),
            devices: metric!(IntGauge::new(
                "statestore_devicebound_devices",
                "Devices with state: a queued message or a dead letter (capped by max_devices)."
            )),
            queued_messages: metric!(IntGauge::new(
                "statestore_devicebound_queued_messages",
                "Messages queued, Enqueued and Invisible, all devices together (capped by max_messages)."
            )),
            queues: {
                let queues = metric!(IntGaugeVec::new(
                    Opts::new(
                        "statestore_devicebound_queues",
                        "Devices with a non-empty queue, by the number of messages it holds."
                    ),
                    &["depth"]
                ));
                for depth in DEPTH_LABELS {
                    queues.with_label_values(&[depth]);
                }
                queues
            },
            index_bytes: metric!(IntGauge::new(
                "statestore_devicebound_index_bytes",
                "Memory held by the queues' in-memory index (delivery state, due times), estimated."
            )),
            device_request_retries_total: metric!(IntCounter::new(
                "statestore_devicebound_device_request_retries_total",
                "Device settlements and pulls proposed again because the serving leader refused them for a moment (its lease lapsed: a disk stall delayed the followers' acknowledgements)."
            )),
            forwards_total: counter_vec(
                "statestore_devicebound_forwards_total",
                "Device settlements and pulls that reached this node after it stopped serving, by result: forwarded (published again for the serving leader, the broker delivered it), retried (published again after a PUBACK 0x10 or an unanswered publish: no leader subscribed yet), served (this node serves again and handled it itself), looped (already forwarded once: dropped), expired (its message expiry passed), refused (the broker refused the forward), gave_up (no leader took it in time).",
                "result",
                &FORWARD_RESULTS,
            ),
        };
        registry.register(Box::new(metrics.requests_total.clone()))?;
        registry.register(Box::new(metrics.request_duration_seconds.clone()))?;
        registry.register(Box::new(metrics.device_topics_dropped_total.clone()))?;
        registry.register(Box::new(metrics.device_requests_total.clone()))?;
        registry.register(Box::new(metrics.messages_total.clone()))?;
        registry.register(Box::new(metrics.lock_expiries_total.clone()))?;
        registry.register(Box::new(metrics.dead_letters_dropped_total.clone()))?;
        registry.register(Box::new(metrics.feedback_records_total.clone()))?;
        registry.register(Box::new(metrics.feedback_batches_total.clone()))?;
        registry.register(Box::new(metrics.offline_backoffs_total.clone()))?;
        registry.register(Box::new(metrics.devices_in_backoff.clone()))?;
        registry.register(Box::new(metrics.backoff_overflow_total.clone()))?;
        registry.register(Box::new(metrics.device_request_retries_total.clone()))?;
        registry.register(Box::new(metrics.forwards_total.clone()))?;
        registry.register(Box::new(metrics.devices.clone()))?;
        registry.register(Box::new(metrics.queued_messages.clone()))?;
        registry.register(Box::new(metrics.queues.clone()))?;
        registry.register(Box::new(metrics.index_bytes.clone()))?;
        Ok(metrics)
    }

    /// Records one answered request.
    pub fn observe(&self, verb: DeviceVerb, result: &str, seconds: f64) {
        self.requests_total
            .with_label_values(&[verb.label(), result])
            .inc();
        self.request_duration_seconds
            .with_label_values(&[verb.label(), result])
            .observe(seconds);
    }

    /// Counts a device publish dropped for `reason`.
    pub fn dropped(&self, reason: &str) {
        self.device_topics_dropped_total
            .with_label_values(&[reason])
            .inc();
    }

    /// Sets the index gauges from the queues' index.
    pub fn record_index(&self, index: &DeviceIndex) {
        let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.devices
            .set(gauge(u64::try_from(index.devices()).unwrap_or(u64::MAX)));
        self.queued_messages.set(gauge(index.messages()));
        self.index_bytes.set(gauge(index.approximate_bytes()));
        for (depth, n) in DEPTH_LABELS.iter().zip(index.depth_distribution()) {
            self.queues.with_label_values(&[depth]).set(gauge(n));
        }
    }

    /// Adds the transitions one committed command made.
    pub fn record(&self, counters: &DeviceCounters) {
        let messages = [
            ("enqueued", counters.enqueued),
            ("delivered", counters.delivered),
            ("undelivered", counters.undelivered),
            ("completed", counters.completed),
            ("abandoned", counters.abandoned),
            ("rejected", counters.rejected),
            ("expired", counters.expired),
            ("dead_lettered", counters.dead_lettered),
            ("purged", counters.purged),
            ("forgotten", counters.forgotten),
        ];
        for (transition, n) in messages {
            if n > 0 {
                self.messages_total
                    .with_label_values(&[transition])
                    .inc_by(u64::from(n));
            }
        }
        let batches = [
            ("cut", counters.feedback_batches_cut),
            ("published", counters.feedback_batches_delivered),
            ("undelivered", counters.feedback_batches_undelivered),
            ("settled", counters.feedback_batches_settled),
            ("redelivered", counters.feedback_batches_redelivered),
            ("dropped", counters.feedback_batches_dropped),
        ];
        for (event, n) in batches {
            if n > 0 {
                self.feedback_batches_total
                    .with_label_values(&[event])
                    .inc_by(u64::from(n));
            }
        }
        self.lock_expiries_total
            .inc_by(u64::from(counters.lock_expiries));
        self.dead_letters_dropped_total
            .inc_by(u64::from(counters.dead_letters_dropped));
        self.feedback_records_total
            .inc_by(u64::from(counters.feedback_records));
    }
}

#[cfg(test)]
mod tests;
