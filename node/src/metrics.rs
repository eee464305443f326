//! The node's metrics and the registry it owns (the raft crate registers its own into it).
//! Names follow `statestore_<subsystem>_<name>_<unit>`; label sets are closed (never keys or
//! client ids); labelled series are created at start so dashboards see zeros, not gaps.

use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry,
};

use statestore_storage::keyspace::KeyspaceMeta;

use crate::transport::OutboundKind;
use crate::verdict::{self, NoReply};
use statestore_protocol::{CommandVerb, ErrorReply, ErrorService};

macro_rules! metric {
    ($e:expr) => {
        $e.unwrap_or_else(|err| unreachable!("static metric definition: {err}"))
    };
}

fn register<T: prometheus::core::Collector + Clone + 'static>(
    registry: &Registry,
    metric: &T,
) -> prometheus::Result<()> {
    registry.register(Box::new(metric.clone()))
}

/// Request latency buckets: 100 µs .. ~6.5 s, doubling.
fn latency_buckets() -> Vec<f64> {
    prometheus::exponential_buckets(0.0001, 2.0, 17).unwrap_or_default()
}

/// Why a leader gave up its duties (`statestore_leader_releases_total{reason}`).
pub const RELEASE_REASONS: [&str; 3] = ["not_leader", "new_term", "quorum_lost"];

/// Request-path metrics.
pub struct ServiceMetrics {
    /// `statestore_server_requests_total{command,result}`
    pub requests_total: IntCounterVec,
    /// `statestore_server_request_duration_seconds{command,result}`
    pub request_duration_seconds: HistogramVec,
    /// `statestore_server_requests_dropped_total{reason}`
    pub requests_dropped_total: IntCounterVec,
    /// `statestore_server_requests_in_flight`
    pub requests_in_flight: IntGauge,
    /// `statestore_server_dedup_hits_total`
    pub dedup_hits_total: IntCounter,
    /// `statestore_server_unsupported_protocol_version_total`
    pub unsupported_version_total: IntCounter,
    /// `statestore_process_stalls_total`
    pub stalls_total: IntCounter,
    /// `statestore_server_request_budget_used_bytes`
    pub request_budget_used_bytes: IntGauge,
    /// `statestore_leader_takeovers_total`
    pub leader_takeovers_total: IntCounter,
    /// `statestore_leader_releases_total{reason}`
    pub leader_releases_total: IntCounterVec,
    /// `statestore_leader_quorum_ack_age_seconds`
    pub leader_quorum_ack_age_seconds: prometheus::Gauge,
    /// `statestore_scan_page_duration_seconds`
    pub scan_page_duration_seconds: Histogram,
    /// `statestore_scan_pages_total{end}`
    pub scan_pages_total: IntCounterVec,
    /// `statestore_scan_pages_in_flight`
    pub scan_pages_in_flight: IntGauge,
    /// `statestore_scan_pages_waiting`
    pub scan_pages_waiting: IntGauge,
}

impl ServiceMetrics {
    fn new() -> Self {
        let requests_total = metric!(IntCounterVec::new(
            Opts::new(
                "statestore_server_requests_total",
                "Requests answered, by command and result."
            ),
            &["command", "result"]
        ));
        let request_duration_seconds = metric!(HistogramVec::new(
            HistogramOpts::new(
                "statestore_server_request_duration_seconds",
                "Time from receiving a request to queueing its reply, by command and result."
            )
            .buckets(latency_buckets()),
            &["command", "result"]
        ));
        let requests_dropped_total = metric!(IntCounterVec::new(
            Opts::new(
                "statestore_server_requests_dropped_total",
                "Requests not answered, by reason."
            ),
            &["reason"]
        ));
        let results = verdict::result_labels(&ErrorReply::of(ErrorService::StateStore));
        for verb in CommandVerb::ALL {
            for result in &results {
                requests_total.with_label_values(&[verb.label(), result]);
            }
        }
        for reason in NoReply::labels() {
            requests_dropped_total.with_label_values(&[reason]);
        }
        let leader_releases_total = metric!(IntCounterVec::new(
            Opts::new(
                "statestore_leader_releases_total",
                "Times this node gave up the request subscription and leader duties, by reason."
            ),
            &["reason"]
        ));
        for reason in RELEASE_REASONS {
            leader_releases_total.with_label_values(&[reason]);
        }
        let scan_pages_total = metric!(IntCounterVec::new(
            Opts::new(
                "statestore_scan_pages_total",
                "SCAN pages built, by why they ended: complete (no key left), or the limit that cut them (keys, reply_bytes, examined, examined_bytes, comparisons, deadline)."
            ),
            &["end"]
        ));
        for end in statestore_protocol::scan::PageEnd::ALL {
            scan_pages_total.with_label_values(&[end.label()]);
        }
        ServiceMetrics {
            requests_total,
            request_duration_seconds,
            requests_dropped_total,
            requests_in_flight: metric!(IntGauge::new(
                "statestore_server_requests_in_flight",
                "Requests being processed."
            )),
            dedup_hits_total: metric!(IntCounter::new(
                "statestore_server_dedup_hits_total",
                "Retried requests answered from the reply memory."
            )),
            stalls_total: metric!(IntCounter::new(
                "statestore_process_stalls_total",
                "Times the process was frozen for more than 500 ms (paused, starved of CPU)."
            )),
            unsupported_version_total: metric!(IntCounter::new(
                "statestore_server_unsupported_protocol_version_total",
                "Requests refused with __stat 505."
            )),
            request_budget_used_bytes: metric!(IntGauge::new(
                "statestore_server_request_budget_used_bytes",
                "Bytes of admitted requests not finished yet (bounded by limits.request_budget_mb)."
            )),
            leader_takeovers_total: metric!(IntCounter::new(
                "statestore_leader_takeovers_total",
                "Quorum-confirmed take-overs of the request subscription."
            )),
            leader_releases_total,
            leader_quorum_ack_age_seconds: metric!(prometheus::Gauge::new(
                "statestore_leader_quorum_ack_age_seconds",
                "On the serving leader: time since a quorum last acknowledged it (0 elsewhere)."
            )),
            scan_page_duration_seconds: metric!(Histogram::with_opts(
                HistogramOpts::new(
                    "statestore_scan_page_duration_seconds",
                    "Time one SCAN page took on the blocking pool (store iteration and matching)."
                )
                .buckets(latency_buckets())
            )),
            scan_pages_total,
            scan_pages_in_flight: metric!(IntGauge::new(
                "statestore_scan_pages_in_flight",
                "SCAN pages being built on the blocking pool (at most the service's SCAN slots)."
            )),
            scan_pages_waiting: metric!(IntGauge::new(
                "statestore_scan_pages_waiting",
                "SCAN requests waiting for a free SCAN slot."
            )),
        }
    }

    /// Records one answered request.
    pub fn observe(&self, command: CommandVerb, result: &str, seconds: f64) {
        self.requests_total
            .with_label_values(&[command.label(), result])
            .inc();
        self.request_duration_seconds
            .with_label_values(&[command.label(), result])
            .observe(seconds);
    }

    /// Records one request that gets no reply.
    pub fn dropped(&self, reason: &'static str) {
        self.requests_dropped_total
            .with_label_values(&[reason])
            .inc();
    }
}

/// Keyspace, expiry and notification metrics.
pub struct StoreMetrics {
    /// `statestore_keyspace_keys`
    pub keys: IntGauge,
    /// `statestore_keyspace_size_bytes`
    pub size_bytes: IntGauge,
    /// `statestore_keyspace_quota_limit_keys`
    pub quota_limit_keys: IntGauge,
    /// `statestore_keyspace_quota_limit_bytes`
    pub quota_limit_bytes: IntGauge,
    /// `statestore_keyspace_quota_used_ratio` (per mille precision is plenty)
    pub quota_used_ratio: prometheus::Gauge,
    /// `statestore_disk_db_size_bytes`
    pub db_size_bytes: IntGauge,
    /// `statestore_disk_log_size_bytes`
    pub log_size_bytes: IntGauge,
    /// `statestore_disk_memtable_bytes`
    pub memtable_bytes: IntGauge,
    /// `statestore_disk_memtable_stalls_total`
    pub memtable_stalls_total: IntCounter,
    /// `statestore_disk_snapshot_preimage_bytes`
    pub snapshot_preimage_bytes: IntGauge,
    /// `statestore_disk_snapshot_preimage_waits_total`
    pub snapshot_preimage_waits_total: IntCounter,
    /// `statestore_disk_db_level0_tables`
    pub db_level0_tables: IntGauge,
    /// `statestore_disk_compaction_waits_total`
    pub compaction_waits_total: IntCounter,
    /// `statestore_disk_files_being_freed`
    pub files_being_freed: IntGauge,
    /// `statestore_disk_bytes_being_freed`
    pub bytes_being_freed: IntGauge,
    /// `statestore_reply_memory_resident_entries`
    pub remembered_replies: IntGauge,
    /// `statestore_reply_memory_resident_bytes`
    pub reply_memory_bytes: IntGauge,
    /// `statestore_disk_reply_log_bytes`
    pub reply_log_bytes: IntGauge,
    /// `statestore_keyspace_registrations`
    pub registrations: IntGauge,
    /// `statestore_reply_memory_entries`
    pub reply_memory_entries: IntGauge,
    /// `statestore_reply_memory_bytes`
    pub reply_memory_counted_bytes: IntGauge,
    /// `statestore_reply_memory_evicted_total`
    pub reply_memory_evicted_total: IntCounter,
    /// `statestore_keyspace_observer_cap_refusals_total`
    pub observer_cap_refusals_total: IntCounter,
    /// `statestore_reply_memory_mismatches_total`
    pub reply_memory_mismatches_total: IntCounter,
    /// `statestore_expiry_sweep_duration_seconds`
    pub sweep_duration_seconds: Histogram,
    /// `statestore_expiry_keys_expired_total`
    pub keys_expired_total: IntCounter,
    /// `statestore_expiry_due_keys`
    pub due_keys: IntGauge,
    /// `statestore_notify_sent_total{op}`
    pub notify_sent_total: IntCounterVec,
    /// `statestore_notify_dropped_total{reason}`
    pub notify_dropped_total: IntCounterVec,
    /// `statestore_notify_pending`
    pub notify_pending: IntGauge,
    /// `statestore_notify_pending_bytes`
    pub notify_pending_bytes: IntGauge,
    /// `statestore_notify_observers_per_event`
    pub notify_observers_per_event: Histogram,
    /// `statestore_notify_clients_forgotten_total`
    pub clients_forgotten_total: IntCounter,
}

impl StoreMetrics {
    fn new() -> Self {
        let notify_sent_total = metric!(IntCounterVec::new(
            Opts::new(
                "statestore_notify_sent_total",
                "Key notifications published, by operation."
            ),
            &["op"]
        ));
        for op in ["set", "delete"] {
            notify_sent_total.with_label_values(&[op]);
        }
        let notify_dropped_total = metric!(IntCounterVec::new(
            Opts::new(
                "statestore_notify_dropped_total",
                "Key notifications not published, by reason: queue_full counts key events \
                 refused by the notifier's full queue, one per event (its observers are not \
                 read yet); publish_failed one per notification the MQTT session refused; \
                 read_failed one per event whose observers could not be read."
            ),
            &["reason"]
        ));
        for reason in ["queue_full", "publish_failed", "read_failed"] {
            notify_dropped_total.with_label_values(&[reason]);
        }
        StoreMetrics {
            keys: metric!(IntGauge::new("statestore_keyspace_keys", "Keys stored.")),
            size_bytes: metric!(IntGauge::new(
                "statestore_keyspace_size_bytes",
                "Key and value bytes stored."
            )),
            quota_limit_keys: metric!(IntGauge::new(
                "statestore_keyspace_quota_limit_keys",
                "Key count quota."
            )),
            quota_limit_bytes: metric!(IntGauge::new(
                "statestore_keyspace_quota_limit_bytes",
                "Key and value byte quota."
            )),
            quota_used_ratio: metric!(prometheus::Gauge::new(
                "statestore_keyspace_quota_used_ratio",
                "max(keys / key quota, bytes / byte quota, registrations / registration quota)."
            )),
            db_size_bytes: metric!(IntGauge::new(
                "statestore_disk_db_size_bytes",
                "Size of the state-machine database (fjall) on disk."
            )),
            log_size_bytes: metric!(IntGauge::new(
                "statestore_disk_log_size_bytes",
                "Size of the Raft log (WAL chunks) on disk."
            )),
            memtable_bytes: metric!(IntGauge::new(
                "statestore_disk_memtable_bytes",
                "Applied state-machine writes held in memory, not yet written to the state database (the reply memory's changes as estimated)."
            )),
            memtable_stalls_total: metric!(IntCounter::new(
                "statestore_disk_memtable_stalls_total",
                "Times apply waited because the memtable was full while a flush ran."
            )),
            snapshot_preimage_bytes: metric!(IntGauge::new(
                "statestore_disk_snapshot_preimage_bytes",
                "Pre-images kept for a snapshot export in progress: rows the state database held at its start that the flush thread has overwritten since."
            )),
            snapshot_preimage_waits_total: metric!(IntCounter::new(
                "statestore_disk_snapshot_preimage_waits_total",
                "Times the memtable flush waited because a snapshot export's pre-images were at their cap."
            )),
            db_level0_tables: metric!(IntGauge::new(
                "statestore_disk_db_level0_tables",
                "Tables in level 0 of the state database (each memtable layer is one until compaction merges it); the flush waits at 20."
            )),
            compaction_waits_total: metric!(IntCounter::new(
                "statestore_disk_compaction_waits_total",
                "Times the memtable flush waited for the state database's compaction (20 tables in level 0) before writing a layer."
            )),
            files_being_freed: metric!(IntGauge::new(
                "statestore_disk_files_being_freed",
                "Removed files (old snapshots, old reply-memory logs) whose blocks a background thread is freeing 16 MiB at a time (at most 64 queued)."
            )),
            bytes_being_freed: metric!(IntGauge::new(
                "statestore_disk_bytes_being_freed",
                "Bytes of the files in statestore_disk_files_being_freed, as they were when queued."
            )),
            remembered_replies: metric!(IntGauge::new(
                "statestore_reply_memory_resident_entries",
                "Entries of the reply memory and its expiry index this node keeps resident in RAM."
            )),
            reply_memory_bytes: metric!(IntGauge::new(
                "statestore_reply_memory_resident_bytes",
                "RAM this node holds for the resident reply memory and its expiry index."
            )),
            reply_log_bytes: metric!(IntGauge::new(
                "statestore_disk_reply_log_bytes",
                "Bytes of the reply memory's own log on disk: a base of every row and the changes of later memtable layers, rebased once they pass twice the live rows."
            )),
            registrations: metric!(IntGauge::new(
                "statestore_keyspace_registrations",
                "KEYNOTIFY registrations stored, all clients together (capped by limits.max_registrations)."
            )),
            reply_memory_entries: metric!(IntGauge::new(
                "statestore_reply_memory_entries",
                "Remembered replies in the replicated state (capped by limits.max_remembered_replies)."
            )),
            reply_memory_counted_bytes: metric!(IntGauge::new(
                "statestore_reply_memory_bytes",
                "Remembered replies' bytes as the cap counts them, key plus encoded reply (capped by limits.max_remembered_reply_bytes)."
            )),
            reply_memory_evicted_total: metric!(IntCounter::new(
                "statestore_reply_memory_evicted_total",
                "Remembered replies evicted to stay within the reply-memory caps (a retry of an evicted request runs again)."
            )),
            observer_cap_refusals_total: metric!(IntCounter::new(
                "statestore_keyspace_observer_cap_refusals_total",
                "New KEYNOTIFY registrations refused because their key already had limits.max_observers_per_key observers (replicated; also in statestore_server_requests_total{command=\"KEYNOTIFY\",result=\"quota_exceeded\"})."
            )),
            reply_memory_mismatches_total: metric!(IntCounter::new(
                "statestore_reply_memory_mismatches_total",
                "Requests that claimed the client id and correlation data of a remembered reply to another request (another request digest): executed as new, never answered with the other's reply."
            )),
            sweep_duration_seconds: metric!(Histogram::with_opts(
                HistogramOpts::new(
                    "statestore_expiry_sweep_duration_seconds",
                    "One expiry sweep: scan, propose, apply."
                )
                .buckets(latency_buckets())
            )),
            keys_expired_total: metric!(IntCounter::new(
                "statestore_expiry_keys_expired_total",
                "Keys removed by expiry."
            )),
            due_keys: metric!(IntGauge::new(
                "statestore_expiry_due_keys",
                "Keys past their expiry not yet removed (counted up to one sweep batch)."
            )),
            notify_sent_total,
            notify_dropped_total,
            notify_pending: metric!(IntGauge::new(
                "statestore_notify_pending",
                "Key events queued for the notifier (at most 65,536)."
            )),
            notify_pending_bytes: metric!(IntGauge::new(
                "statestore_notify_pending_bytes",
                "Bytes of keys and values of the key events queued for the notifier (at most 64 MiB)."
            )),
            notify_observers_per_event: metric!(Histogram::with_opts(
                HistogramOpts::new(
                    "statestore_notify_observers_per_event",
                    "Clients one key event was published to (registered before the change)."
                )
                .buckets(vec![
                    0.0,
                    1.0,
                    2.0,
                    5.0,
                    10.0,
                    100.0,
                    1_000.0,
                    10_000.0,
                    100_000.0,
                    1_000_000.0
                ])
            )),
            clients_forgotten_total: metric!(IntCounter::new(
                "statestore_notify_clients_forgotten_total",
                "Clients whose registrations were dropped after PUBACK 0x10."
            )),
        }
    }
}

impl StoreMetrics {
    /// Sets the gauges read from the replicated store-wide record: keys, bytes, quotas and their
    /// use, registrations, the reply memory and its evictions.
    pub fn record_keyspace(&self, meta: &KeyspaceMeta) {
        set_gauge(&self.keys, meta.keys);
        set_gauge(&self.size_bytes, meta.bytes);
        set_gauge(&self.quota_limit_keys, meta.limits.max_keys);
        set_gauge(&self.quota_limit_bytes, meta.limits.max_bytes);
        let ratio = |used: u64, limit: u64| {
            if limit == 0 {
                1.0
            } else {
                used as f64 / limit as f64
            }
        };
        // The quotas whose exhaustion fails requests. The reply memory is not one: at its caps
        // the oldest replies are evicted (statestore_reply_memory_evicted_total), nothing fails.
        self.quota_used_ratio.set(
            ratio(meta.keys, meta.limits.max_keys)
                .max(ratio(meta.bytes, meta.limits.max_bytes))
                .max(ratio(meta.registrations, meta.limits.max_registrations)),
        );
        set_gauge(&self.registrations, meta.registrations);
        set_gauge(&self.reply_memory_entries, meta.remembered_replies);
        set_gauge(
            &self.reply_memory_counted_bytes,
            meta.remembered_reply_bytes,
        );
        // Replicated and cumulative, while this process counts from 0: advance by what is new.
        raise_to(&self.reply_memory_evicted_total, meta.replies_evicted);
        raise_to(
            &self.observer_cap_refusals_total,
            meta.observer_cap_refusals,
        );
        raise_to(&self.reply_memory_mismatches_total, meta.reply_mismatches);
    }
}

/// Sets `gauge` to `value`, a count or size kept elsewhere; past `i64::MAX` it shows `i64::MAX`.
pub(crate) fn set_gauge(gauge: &IntGauge, value: impl TryInto<i64>) {
    gauge.set(value.try_into().unwrap_or(i64::MAX));
}

/// Advances `counter` to `total`, a count kept elsewhere (replicated, or by the storage crate)
/// that only grows; a `total` below what the counter shows changes nothing.
pub(crate) fn raise_to(counter: &IntCounter, total: u64) {
    counter.inc_by(total.saturating_sub(counter.get()));
}

/// MQTT session metrics (recorded on the session thread; prometheus types are Sync).
pub struct MqttMetrics {
    /// `statestore_mqtt_connection_state{state}`
    pub connection_state: IntGaugeVec,
    /// `statestore_mqtt_connects_total{result}`
    pub connects_total: IntCounterVec,
    /// `statestore_mqtt_disconnects_total`
    pub disconnects_total: IntCounter,
    /// `statestore_mqtt_request_subscription_active`
    pub request_subscription_active: IntGauge,
    /// `statestore_mqtt_messages_received_total`
    pub messages_received_total: IntCounter,
    /// `statestore_mqtt_messages_sent_total{kind}`
    pub messages_sent_total: IntCounterVec,
    /// `statestore_mqtt_publish_failures_total{kind}`
    pub publish_failures_total: IntCounterVec,
    /// `statestore_mqtt_session_events_dropped_total{kind}`
    pub session_events_dropped_total: IntCounterVec,
    /// `statestore_mqtt_tls_reloads_total{result}`
    pub tls_reloads_total: IntCounterVec,
    /// `statestore_mqtt_tls_client_cert_not_after_seconds{file}`
    pub tls_client_cert_not_after_seconds: IntGaugeVec,
    /// `statestore_mqtt_outbound_bytes{lane}`
    pub outbound_bytes: IntGaugeVec,
    /// `statestore_mqtt_outbound_waits_total{lane}`
    pub outbound_waits_total: IntCounterVec,
    /// `statestore_mqtt_bulk_paced_total`
    pub bulk_paced_total: IntCounter,
    /// `statestore_mqtt_write_backpressure_total`
    pub write_backpressure_total: IntCounter,
}

const CONNECTION_STATES: [&str; 3] = ["connected", "connecting", "disconnected"];

impl MqttMetrics {
    fn new() -> Self {
        let connection_state = metric!(IntGaugeVec::new(
            Opts::new(
                "statestore_mqtt_connection_state",
                "1 for the current broker connection state."
            ),
            &["state"]
        ));
        let connects_total = metric!(IntCounterVec::new(
            Opts::new(
                "statestore_mqtt_connects_total",
                "Connection attempts, by result."
            ),
            &["result"]
        ));
        for result in ["success", "failure"] {
            connects_total.with_label_values(&[result]);
        }
        let messages_sent_total = metric!(IntCounterVec::new(
            Opts::new(
                "statestore_mqtt_messages_sent_total",
                "QoS 1 publishes sent, by kind."
            ),
            &["kind"]
        ));
        let publish_failures_total = metric!(IntCounterVec::new(
            Opts::new(
                "statestore_mqtt_publish_failures_total",
                "Publishes dropped or failed, by kind."
            ),
            &["kind"]
        ));
        for kind in [
            "response",
            "notification",
            "device_message",
            "feedback",
            "device_forward",
        ] {
            messages_sent_total.with_label_values(&[kind]);
            publish_failures_total.with_label_values(&[kind]);
        }
        let tls_reloads_total = metric!(IntCounterVec::new(
            Opts::new(
                "statestore_mqtt_tls_reloads_total",
                "Changes of the broker TLS files (CA, client certificate, key), by result: ok (used from the next connection on) or error (unusable; the last good files stay in use)."
            ),
            &["result"]
        ));
        for result in ["ok", "error"] {
            tls_reloads_total.with_label_values(&[result]);
        }
        let outbound_bytes = metric!(IntGaugeVec::new(
            Opts::new(
                "statestore_mqtt_outbound_bytes",
                "Bytes of messages queued for the broker or awaiting its PUBACK, by lane (replies: replies up to 16 KiB; bulk: notifications, device deliveries, feedback, forwards and larger replies); each lane is half of limits.outbound_budget_mb."
            ),
            &["lane"]
        ));
        let outbound_waits_total = metric!(IntCounterVec::new(
            Opts::new(
                "statestore_mqtt_outbound_waits_total",
                "Publishes (or replies about to be built) that had to wait for room in their lane of the outbound budget, by lane."
            ),
            &["lane"]
        ));
        for lane in crate::outbound::Lane::ALL {
            outbound_bytes.with_label_values(&[lane.label()]);
            outbound_waits_total.with_label_values(&[lane.label()]);
        }
        let metrics = MqttMetrics {
            connection_state,
            connects_total,
            bulk_paced_total: metric!(IntCounter::new(
                "statestore_mqtt_bulk_paced_total",
                "Times the bulk lane (notifications, device deliveries, feedback, large replies) held queued messages back to keep to limits.bulk_egress_mb_per_sec and limits.bulk_egress_messages_per_sec."
            )),
            write_backpressure_total: metric!(IntCounter::new(
                "statestore_mqtt_write_backpressure_total",
                "Times the connection's write buffer filled up and publishing paused until the broker read it (large messages, a slow broker)."
            )),
            disconnects_total: metric!(IntCounter::new(
                "statestore_mqtt_disconnects_total",
                "Broker connections lost."
            )),
            request_subscription_active: metric!(IntGauge::new(
                "statestore_mqtt_request_subscription_active",
                "1 while this node holds the request-topic subscription (summed over a cluster: 1)."
            )),
            messages_received_total: metric!(IntCounter::new(
                "statestore_mqtt_messages_received_total",
                "Requests received from the broker."
            )),
            messages_sent_total,
            publish_failures_total,
            session_events_dropped_total: metric!(IntCounterVec::new(
                Opts::new(
                    "statestore_mqtt_session_events_dropped_total",
                    "Broker reports (PUBACK 0x10: client gone, device offline, feedback unheard) dropped because their queue was full."
                ),
                &["kind"]
            )),
            tls_reloads_total,
            tls_client_cert_not_after_seconds: metric!(IntGaugeVec::new(
                Opts::new(
                    "statestore_mqtt_tls_client_cert_not_after_seconds",
                    "Expiry (notAfter) of the client certificate in use for the broker, seconds since the epoch (only with mqtt.tls.cert_file)."
                ),
                &["file"]
            )),
            outbound_bytes,
            outbound_waits_total,
        };
        metrics.set_connection_state("disconnected");
        metrics
    }

    /// Marks `state` as the current connection state.
    pub fn set_connection_state(&self, state: &str) {
        for s in CONNECTION_STATES {
            self.connection_state
                .with_label_values(&[s])
                .set(i64::from(s == state));
        }
    }

    /// Counts a publish that could not be sent.
    pub fn publish_dropped(&self, kind: &OutboundKind) {
        self.publish_failures_total
            .with_label_values(&[kind.label()])
            .inc();
    }
}

/// All node metrics plus the registry they (and the raft crate's) live in.
pub struct NodeMetrics {
    /// The registry `/metrics` serves.
    pub registry: Registry,
    /// Request path.
    pub service: ServiceMetrics,
    /// Keyspace, expiry, notifications.
    pub store: StoreMetrics,
    /// MQTT session.
    pub mqtt: std::sync::Arc<MqttMetrics>,
    /// Device-bound queues.
    pub devicebound: crate::device_metrics::DeviceboundMetrics,
    /// Authorization: the policy in force and the grants cache.
    pub authz: crate::authz::AuthzMetrics,
    /// `statestore_tls_cert_not_after_seconds{listener,file}`: the peer and HTTPS
    /// certificates, read at start (the broker client certificate has its own, reloaded gauge).
    pub tls_cert_not_after_seconds: IntGaugeVec,
}

impl NodeMetrics {
    /// Creates and registers every node metric.
    pub fn new() -> prometheus::Result<Self> {
        let registry = Registry::new();
        let service = ServiceMetrics::new();
        let store = StoreMetrics::new();
        let mqtt = MqttMetrics::new();
        register(&registry, &service.requests_total)?;
        register(&registry, &service.request_duration_seconds)?;
        register(&registry, &service.requests_dropped_total)?;
        register(&registry, &service.requests_in_flight)?;
        register(&registry, &service.dedup_hits_total)?;
        register(&registry, &service.unsupported_version_total)?;
        register(&registry, &service.stalls_total)?;
        register(&registry, &service.request_budget_used_bytes)?;
        register(&registry, &service.leader_takeovers_total)?;
        register(&registry, &service.leader_releases_total)?;
        register(&registry, &service.leader_quorum_ack_age_seconds)?;
        register(&registry, &service.scan_page_duration_seconds)?;
        register(&registry, &service.scan_pages_total)?;
        register(&registry, &service.scan_pages_in_flight)?;
        register(&registry, &service.scan_pages_waiting)?;
        register(&registry, &store.keys)?;
        register(&registry, &store.size_bytes)?;
        register(&registry, &store.quota_limit_keys)?;
        register(&registry, &store.quota_limit_bytes)?;
        register(&registry, &store.quota_used_ratio)?;
        register(&registry, &store.db_size_bytes)?;
        register(&registry, &store.log_size_bytes)?;
        register(&registry, &store.memtable_bytes)?;
        register(&registry, &store.memtable_stalls_total)?;
        register(&registry, &store.snapshot_preimage_bytes)?;
        register(&registry, &store.snapshot_preimage_waits_total)?;
        register(&registry, &store.db_level0_tables)?;
        register(&registry, &store.compaction_waits_total)?;
        register(&registry, &store.files_being_freed)?;
        register(&registry, &store.bytes_being_freed)?;
        register(&registry, &store.remembered_replies)?;
        register(&registry, &store.reply_memory_bytes)?;
        register(&registry, &store.reply_log_bytes)?;
        register(&registry, &store.registrations)?;
        register(&registry, &store.reply_memory_entries)?;
        register(&registry, &store.reply_memory_counted_bytes)?;
        register(&registry, &store.reply_memory_evicted_total)?;
        register(&registry, &store.observer_cap_refusals_total)?;
        register(&registry, &store.reply_memory_mismatches_total)?;
        register(&registry, &store.sweep_duration_seconds)?;
        register(&registry, &store.keys_expired_total)?;
        register(&registry, &store.due_keys)?;
        register(&registry, &store.notify_sent_total)?;
        register(&registry, &store.notify_dropped_total)?;
        register(&registry, &store.notify_pending)?;
        register(&registry, &store.notify_pending_bytes)?;
        register(&registry, &store.notify_observers_per_event)?;
        register(&registry, &store.clients_forgotten_total)?;
        register(&registry, &mqtt.connection_state)?;
        register(&registry, &mqtt.connects_total)?;
        register(&registry, &mqtt.disconnects_total)?;
        register(&registry, &mqtt.request_subscription_active)?;
        register(&registry, &mqtt.messages_received_total)?;
        register(&registry, &mqtt.messages_sent_total)?;
        register(&registry, &mqtt.publish_failures_total)?;
        register(&registry, &mqtt.session_events_dropped_total)?;
        register(&registry, &mqtt.tls_reloads_total)?;
        register(&registry, &mqtt.tls_client_cert_not_after_seconds)?;
        register(&registry, &mqtt.outbound_bytes)?;
        register(&registry, &mqtt.outbound_waits_total)?;
        register(&registry, &mqtt.bulk_paced_total)?;
        register(&registry, &mqtt.write_backpressure_total)?;
        let build_info = metric!(IntGaugeVec::new(
            Opts::new(
                "statestore_build_info",
                "Always 1; labels describe the build."
            ),
            &["version"]
        ));
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        register(&registry, &build_info)?;
        registry.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        registry.register(Box::new(
            crate::telemetry::SuppressedLogLines::for_process()?
        ))?;
        let devicebound = crate::device_metrics::DeviceboundMetrics::register(&registry)?;
        let authz = crate::authz::AuthzMetrics::register(&registry)?;
        let tls_cert_not_after_seconds = metric!(IntGaugeVec::new(
            Opts::new(
                "statestore_tls_cert_not_after_seconds",
                "Expiry (notAfter) of the certificate a listener serves, seconds since the epoch: peer (cluster.tls, also its client certificate) and http (admin.tls). Read at start: a renewed certificate needs a restart."
            ),
            &["listener", "file"]
        ));
        register(&registry, &tls_cert_not_after_seconds)?;
        Ok(NodeMetrics {
            registry,
            service,
            store,
            mqtt: std::sync::Arc::new(mqtt),
            devicebound,
            authz,
            tls_cert_not_after_seconds,
        })
    }

    /// Records the expiry of the certificate `listener` serves from `file` (left unset when
    /// it cannot be read: the node refused to start then anyway).
    pub fn record_cert_expiry(&self, listener: &str, file: &std::path::Path) {
        if let Some(not_after) = crate::tls::pem_file_not_after_unix(file) {
            self.tls_cert_not_after_seconds
                .with_label_values(&[listener, &file.display().to_string()])
                .set(not_after);
        }
    }

    /// The text exposition of every registered metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let encoder = prometheus::TextEncoder::new();
        if let Err(err) = encoder.encode_utf8(&self.registry.gather(), &mut out) {
            tracing::warn!(error = %err, "metrics encoding failed");
        }
        out
    }
}

#[cfg(test)]
mod tests;
