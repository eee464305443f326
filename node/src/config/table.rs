//! THE settings table: one row per setting (TOML path, flag, default, range, help). Defaults
//! ([`super::Config::default`]), the generated `statestore run` flags, the range checks, the
//! README's configuration tables and the Helm chart's `config` schema all come from here; a
//! new setting is a field in its section struct and a row here.
//!
//! Rows of kind [`Kind::List`] and [`Kind::Table`] (peers, reply topic prefixes, TLS file
//! groups) are documented here but parsed and checked by hand.

use super::setting::{DefaultValue as D, DocTable, Flag, Kind, Setting};

/// `--long VALUE`.
const fn flag(long: &'static str, value_name: &'static str) -> Flag {
    Flag::Value { long, value_name }
}

/// The longest TTL of a device-bound message or feedback batch: two days (devicebound.md §1, §4).
const MAX_TTL_MS: i64 = statestore_vocab::spec::MAX_MESSAGE_LIFETIME_MS as i64;

/// Every setting, in README order.
pub const SETTINGS: &[Setting] = &[
    // ---- The node, its broker session and its listeners ----
    Setting {
        path: "id",
        flag: flag("id", "U64"),
        default: D::Int(1),
        kind: Kind::at_least(1),
        table: DocTable::Node,
        help: "Raft node id: unique in the cluster, never reused for another data directory",
    },
    Setting {
        path: "name",
        flag: flag("name", "NAME"),
        default: D::Unset("`statestore-<id>`"),
        kind: Kind::Text,
        table: DocTable::Node,
        help: "node name written into versions (`__ts`, the HLC node id); no `:`",
    },
    Setting {
        path: "data_dir",
        flag: flag("data-dir", "PATH"),
        default: D::Text("statestore-data"),
        kind: Kind::Path,
        table: DocTable::Node,
        help: "data directory: Raft log, state database and snapshots; layout below",
    },
    Setting {
        path: "mqtt.broker",
        flag: flag("broker", "HOST:PORT"),
        default: D::Text("127.0.0.1:1883"),
        kind: Kind::Text,
        table: DocTable::Node,
        help: "MQTT 5 broker: `host:port`, `mqtt://host[:port]` or `mqtts://host[:port]` (TLS); \
               an IPv6 address in brackets (`[fd00::1]:1883`); without a port 1883, or 8883 with \
               TLS ([TLS to the broker](#tls-to-the-broker))",
    },
    Setting {
        path: "mqtt.client_id",
        flag: flag("mqtt-client-id", "ID"),
        default: D::Unset("`statestore-node-<id>`"),
        kind: Kind::Text,
        table: DocTable::Node,
        help: "MQTT client id of this node; must be unique per node",
    },
    Setting {
        path: "mqtt.username",
        flag: flag("mqtt-username", "NAME"),
        default: D::Unset("none"),
        kind: Kind::Text,
        table: DocTable::Node,
        help: "MQTT user name",
    },
    Setting {
        path: "mqtt.password",
        flag: Flag::None,
        default: D::Unset("none"),
        kind: Kind::Text,
        table: DocTable::Node,
        help: "MQTT password; prefer `mqtt.password_file` or `STATESTORE_MQTT_PASSWORD`",
    },
    Setting {
        path: "mqtt.password_file",
        flag: flag("mqtt-password-file", "FILE"),
        default: D::Unset("none"),
        kind: Kind::Path,
        table: DocTable::Node,
        help: "file whose first line is the MQTT password; without it `STATESTORE_MQTT_PASSWORD`, \
               then `mqtt.password`",
    },
    Setting {
        path: "mqtt.keep_alive_secs",
        flag: Flag::None,
        default: D::Int(10),
        kind: Kind::between(0, 65_535),
        table: DocTable::Node,
        help: "MQTT keep-alive, seconds",
    },
    Setting {
        path: "mqtt.receive_maximum",
        flag: Flag::None,
        default: D::Int(1_024),
        kind: Kind::between(1, 65_535),
        table: DocTable::Node,
        help: "QoS 1 requests the broker may have in flight to the node",
    },
    Setting {
        path: "mqtt.ack_timeout_ms",
        flag: Flag::None,
        default: D::Int(5_000),
        kind: Kind::at_least(1),
        table: DocTable::Node,
        help: "how long the broker has to acknowledge a publish or (un)subscribe, ms; past it the \
               connection is presumed dead and re-established. A late PUBACK counts only while \
               nothing else arrives from the broker either (under a flood it queues behind the \
               requests), and an idle node publishes a probe every second to find out",
    },
    Setting {
        path: "mqtt.reply_topic_prefixes",
        flag: Flag::HandWritten("`--reply-topic-prefix PREFIX` (repeat)"),
        default: D::Texts(&["clients/"]),
        kind: Kind::List,
        table: DocTable::Node,
        help: "where replies may be published: requests are answered only on a Response Topic \
               that starts with one of these (protocol §1; every official SDK answers under \
               `clients/`); any other gets no reply \
               (`statestore_server_requests_dropped_total{reason=\"forbidden_response_topic\"}`). \
               Whatever the prefixes say, no reply goes to a topic the store publishes or serves \
               (`statestore/…`, `devicebound/…`, `devices/…`, `messages/servicebound/…`, the \
               notification prefix `clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8`), \
               to one with `+` or `#`, or to a `$` topic. Each prefix: non-empty, no wildcards",
    },
    Setting {
        path: "listen.http",
        flag: flag("http", "ADDR:PORT"),
        default: D::Text("127.0.0.1:7480"),
        kind: Kind::Address,
        table: DocTable::Node,
        help: "HTTP listener: `/metrics`, `/livez`, `/readyz`, admin API",
    },
    Setting {
        path: "listen.raft",
        flag: flag("raft", "ADDR:PORT"),
        default: D::Text("127.0.0.1:7481"),
        kind: Kind::Address,
        table: DocTable::Node,
        help: "Raft peer listener",
    },
    // ---- Cluster membership and Raft ----
    Setting {
        path: "cluster.advertise",
        flag: flag("advertise", "HOST:PORT"),
        default: D::Unset("`listen.raft`"),
        kind: Kind::Text,
        table: DocTable::Node,
        help: "Raft address peers use for this node",
    },
    Setting {
        path: "cluster.peers",
        flag: Flag::HandWritten("`--peer ID=HOST:PORT` (repeat)"),
        default: D::Unset("this node alone"),
        kind: Kind::Table,
        table: DocTable::Node,
        help: "initial members `id = \"host:port\"`, this node included; with `--join`, the \
               existing members (not bootstrapped: their peer certificates are accepted before \
               the cluster reaches this node, see [Security](#security))",
    },
    Setting {
        path: "cluster.join",
        flag: Flag::Switch("join"),
        default: D::Bool(false),
        kind: Kind::Bool,
        table: DocTable::Node,
        help: "start without bootstrapping: wait to be added to an existing cluster \
               (`statestore cluster add-node`)",
    },
    Setting {
        path: "cluster.heartbeat_ms",
        flag: flag("heartbeat-ms", "MS"),
        default: D::Int(100),
        kind: Kind::at_least(1),
        table: DocTable::Node,
        help: "leader heartbeat interval, ms",
    },
    Setting {
        path: "cluster.election_timeout_min_ms",
        flag: flag("election-timeout-min-ms", "MS"),
        default: D::Int(250),
        kind: Kind::at_least(1),
        table: DocTable::Node,
        help: "election timeout lower bound, ms; above `cluster.heartbeat_ms`",
    },
    Setting {
        path: "cluster.election_timeout_max_ms",
        flag: flag("election-timeout-max-ms", "MS"),
        default: D::Int(500),
        kind: Kind::at_least(1),
        table: DocTable::Node,
        help: "election timeout upper bound, ms; above the lower bound. Also the leader lease and \
               the quorum timeout after which a leader nobody acknowledges gives up",
    },
    Setting {
        path: "cluster.replication_timeout_ms",
        flag: flag("replication-timeout-ms", "MS"),
        default: D::Int(3_000),
        kind: Kind::at_least(1),
        table: DocTable::Node,
        help: "how long the leader waits for a follower to acknowledge replicated entries before \
               it reconnects, ms; at least `cluster.heartbeat_ms` (it covers a loaded follower's \
               fsync and is not tied to the heartbeat)",
    },
    Setting {
        path: "cluster.snapshot_after_proposals",
        flag: flag("snapshot-after-proposals", "N"),
        default: D::Int(200_000),
        kind: Kind::at_least(1),
        table: DocTable::Node,
        help: "build a snapshot once this many proposals (client writes, sweeps) were applied \
               since the last one; each node adds 0–50 % jitter so replicas do not snapshot \
               together",
    },
    Setting {
        path: "cluster.snapshot_after_entries",
        flag: flag("snapshot-after-entries", "N"),
        default: D::Int(50_000),
        kind: Kind::at_least(1),
        table: DocTable::Node,
        help: "build a snapshot also once this many log entries were applied since the last one \
               (an entry is a batch of up to 1,024 concurrent writes)",
    },
    Setting {
        path: "cluster.snapshot_after_state_percent",
        flag: flag("snapshot-after-state-percent", "PCT"),
        default: D::Int(25),
        kind: Kind::between(0, 1_000),
        table: DocTable::Node,
        help: "but not before the log since the last snapshot holds this percentage of the \
               state's bytes (keys, values, remembered replies): snapshots of a large state \
               come in proportion to the writes; a node that stopped uncleanly replays up to \
               that much log; 0: the counts alone",
    },
    Setting {
        path: "cluster.entries_kept_after_snapshot",
        flag: flag("entries-kept-after-snapshot", "N"),
        default: D::Int(1_000),
        kind: Kind::at_least(0),
        table: DocTable::Node,
        help: "log entries kept behind a snapshot (for followers only slightly behind)",
    },
    Setting {
        path: "cluster.log_cache_mb",
        flag: Flag::None,
        default: D::Int(64),
        kind: Kind::between(1, 65_536),
        table: DocTable::Node,
        help: "Raft log payloads kept in memory for replication and apply, MiB (bounded in bytes)",
    },
    Setting {
        path: "cluster.max_snapshot_mb",
        flag: Flag::None,
        default: D::Unset("twice what the caps hold"),
        kind: Kind::between(1, 16 << 20),
        table: DocTable::Node,
        help: "largest snapshot this node receives from a leader, MiB; a larger transfer is \
               refused, its partial file removed, and counted in \
               `statestore_raft_snapshots_refused_total{reason=\"too_large\"}`. Unset: 2 × \
               (`limits.max_bytes` + `limits.max_remembered_reply_bytes` + \
               `devicebound.max_messages` × `devicebound.max_message_bytes`), at least 4096 MiB \
               (about 125 GiB with the defaults): what a store within its caps can hold, twice \
               over for per-record overhead and dead letters, so a real snapshot is never \
               refused; an endless or bloated one stops there rather than at a full disk. Set it \
               to your data volume's size (a snapshot larger than the disk cannot be installed \
               anyway)",
    },
    // ---- Budgets, pacing and the protocol's limits (§9) ----
    Setting {
        path: "limits.request_budget_mb",
        flag: Flag::None,
        default: D::Int(64),
        kind: Kind::at_least(1),
        table: DocTable::Node,
        help: "bytes of requests a node holds at once, MiB (each request whole: payload, topic, \
               content type, user properties at name + value + 96 bytes each, response topic and \
               correlation data twice since its reply repeats them, plus 1 KiB), in two halves: \
               requests being served, and requests read from the broker waiting for room (their \
               PUBACK waits, so the broker holds further ones). A request that finds the waiting \
               half full too is refused at once (PUBACK 0x97, no reply, \
               `statestore_server_requests_dropped_total{reason=\"overloaded\"}`) \
               (`statestore_server_request_budget_used_bytes`). A request (or device publish) \
               with more than 128 user properties, or more than 128 KiB of their names and \
               values, is refused before it is copied: PUBACK 0x97 (Quota exceeded), no reply, \
               `statestore_server_requests_dropped_total{reason=\"too_many_properties\"}`",
    },
    Setting {
        path: "limits.outbound_budget_mb",
        flag: Flag::None,
        default: D::Int(64),
        kind: Kind::between(1, 65_536),
        table: DocTable::Node,
        help: "bytes of messages the node publishes, MiB, held from when each is queued for the \
               broker until its PUBACK (or until it is dropped): half for replies of up to 16 \
               KiB, half for the bulk lane (notifications, device deliveries, feedback, forwarded \
               device publishes and larger replies), so a flood of either never holds up the \
               other (the session also sends small replies first, with one bulk message after \
               every 8 replies in a row so the bulk lane is never starved). Each message counts \
               its payload, topic, correlation data, content type and user properties (+64 bytes \
               each) plus 256 bytes; one larger than its half goes alone. When a half is spent \
               its publishers wait: a request holding its admission (so intake, then the broker, \
               hold further requests), the notifier, the device push. GET, SCAN and DEADLETTERS \
               take room for their reply before building it: a read that finds none lets go of \
               what it read, waits, and reads again (`statestore_mqtt_outbound_bytes{lane}`, \
               `statestore_mqtt_outbound_waits_total{lane}`). See [Memory](#memory)",
    },
    // The default pace, 8 MiB a second, is a 4 MiB value twice a second, or about 6,000
    // notifications of 1 KiB values: at this pace a flood of GETs of a 4 MiB value keeps other
    // clients' SET p99 within 1.4x (`statestore-bench abuse --attacks getbig`).
    Setting {
        path: "limits.bulk_egress_mb_per_sec",
        flag: flag("bulk-egress-mb-per-sec", "MIB"),
        default: D::Int(8),
        kind: Kind::between(1, 1 << 20),
        table: DocTable::Node,
        help: "pace of the bulk lane, MiB a second of payload and topic the node publishes as \
               notifications, device deliveries, feedback and replies over 16 KiB. A \
               single-threaded broker such as Mosquitto handles one large message at a time \
               while every other client waits (Mosquitto alone, no statestore: a 1-byte round \
               trip's p99 went from 0.42 to 12.8 ms while 4 MiB messages passed ten times a \
               second), so what one client can make the store publish (a GET loop on a 4 MiB \
               value, a watched key written in a loop) is paced; small replies are never paced. \
               Raise it for a broker that copes (`statestore_mqtt_bulk_paced_total` counts the \
               times the lane held messages back)",
    },
    Setting {
        path: "limits.bulk_egress_messages_per_sec",
        flag: flag("bulk-egress-messages-per-sec", "N"),
        default: D::Int(20_000),
        kind: Kind::between(1, 100_000_000),
        table: DocTable::Node,
        help: "pace of the bulk lane, messages a second: a key with 1,000 observers written in a \
               loop costs 1,000 notifications a write",
    },
    Setting {
        path: "limits.request_timeout_ms",
        flag: Flag::None,
        default: D::Int(10_000),
        kind: Kind::at_least(1),
        table: DocTable::Node,
        help: "longest a request may take, ms (less when its Message Expiry is sooner); past it, \
               no reply (`statestore_server_requests_dropped_total{reason=\"timed_out\"}`) and \
               the client's retry finds the remembered reply",
    },
    Setting {
        path: "limits.max_key_bytes",
        flag: flag("max-key-bytes", "BYTES"),
        default: D::Int(60 << 10),
        kind: Kind::between(1, statestore_storage::MAX_USER_KEY_BYTES as i64),
        table: DocTable::Node,
        help: "longest key, bytes; longer keys: `syntax error`. The protocol's 1 KiB is raised \
               because the SDKs' own tests write 6,500-byte keys; at most 65,526, as the state \
               database stores keys of up to 65,535 bytes with a 9-byte prefix. A KEYNOTIFY on a key longer \
               than about 32 KiB is also `syntax error`: its notification topic (hex of the \
               client id and of the key) would exceed MQTT's 65,535 bytes",
    },
    Setting {
        path: "limits.max_value_bytes",
        flag: flag("max-value-bytes", "BYTES"),
        default: D::Int(4 << 20),
        kind: Kind::between(1, 256 << 20),
        table: DocTable::Node,
        help: "longest value, bytes; longer values: `syntax error`",
    },
    Setting {
        path: "limits.max_array_len",
        flag: flag("max-array-len", "N"),
        default: D::Int(8),
        kind: Kind::at_least(6),
        table: DocTable::Node,
        help: "most elements in a request array; at least 6 (`SET key value NX PX ms`)",
    },
    Setting {
        path: "limits.max_px_ms",
        flag: Flag::None,
        default: D::Int(30 * 24 * 3_600 * 1_000),
        kind: Kind::at_least(1),
        table: DocTable::Node,
        help: "longest PX, ms (default 30 days)",
    },
    Setting {
        path: "limits.max_keys",
        flag: flag("max-keys", "N"),
        default: D::Int(1_000_000),
        kind: Kind::at_least(1),
        table: DocTable::Node,
        help: "keys stored; over it: `the quota has been exceeded`",
    },
    Setting {
        path: "limits.max_bytes",
        flag: flag("max-bytes", "BYTES"),
        default: D::Int(1 << 30),
        kind: Kind::at_least(1),
        table: DocTable::Node,
        help: "key+value bytes stored (default 1 GiB)",
    },
    Setting {
        path: "limits.max_registrations_per_client",
        flag: flag("max-registrations-per-client", "N"),
        default: D::Int(1_000),
        kind: Kind::between(0, u32::MAX as i64),
        table: DocTable::Node,
        help: "KEYNOTIFY registrations per client",
    },
    Setting {
        path: "limits.max_registrations",
        flag: flag("max-registrations", "N"),
        default: D::Int(1_000_000),
        kind: Kind::at_least(0),
        table: DocTable::Node,
        help: "KEYNOTIFY registrations of all clients together (client ids are whatever requests \
               say); over it: `the quota has been exceeded`",
    },
    Setting {
        path: "limits.max_observers_per_key",
        flag: flag("max-observers-per-key", "N"),
        default: D::Int(1_000),
        kind: Kind::between(1, 1_000_000),
        table: DocTable::Node,
        help: "KEYNOTIFY registrations of one key, all clients together: what one change of the \
               key is published to. A new registration on a key that has this many: `the quota \
               has been exceeded` (`statestore_keyspace_observer_cap_refusals_total`); \
               registering again a (client, key) pair already registered still succeeds",
    },
    Setting {
        path: "limits.max_remembered_replies",
        flag: flag("max-remembered-replies", "N"),
        default: D::Int(1_000_000),
        kind: Kind::at_least(1),
        table: DocTable::Node,
        help: "replies remembered for retried requests (§6); over it the replies that expire \
               first are evicted, and a retry of an evicted request runs again \
               (`statestore_reply_memory_evicted_total`)",
    },
    Setting {
        path: "limits.max_remembered_reply_bytes",
        flag: flag("max-remembered-reply-bytes", "BYTES"),
        default: D::Int(256 << 20),
        kind: Kind::at_least(1),
        table: DocTable::Node,
        help: "bytes of remembered replies (default 256 MiB; each counted as its key, client id \
               plus correlation data, plus the encoded reply); evicts like the count cap",
    },
    // ---- Expiry, reply memory, storage, telemetry, shutdown ----
    Setting {
        path: "expiry.sweep_interval_ms",
        flag: flag("sweep-interval-ms", "MS"),
        default: D::Int(250),
        kind: Kind::at_least(1),
        table: DocTable::Node,
        help: "time between expiry sweeps, ms",
    },
    Setting {
        path: "expiry.batch_size",
        flag: Flag::None,
        default: D::Int(1_000),
        kind: Kind::at_least(1),
        table: DocTable::Node,
        help: "keys removed per sweep proposal",
    },
    Setting {
        path: "dedup.default_window_ms",
        flag: Flag::None,
        default: D::Int(10_000),
        kind: Kind::at_least(0),
        table: DocTable::Node,
        help: "how long a reply is remembered when its request has no Message Expiry, ms; at \
               most `dedup.max_window_ms`",
    },
    Setting {
        path: "dedup.max_window_ms",
        flag: Flag::None,
        default: D::Int(600_000),
        kind: Kind::at_least(0),
        table: DocTable::Node,
        help: "longest a reply is remembered whatever the Message Expiry says, ms",
    },
    Setting {
        path: "storage.cache_capacity_mb",
        flag: flag("cache-capacity-mb", "MIB"),
        default: D::Int(256),
        kind: Kind::at_least(0),
        table: DocTable::Node,
        help: "state database (fjall) block cache, MiB",
    },
    Setting {
        path: "telemetry.log",
        flag: flag("log", "FILTER"),
        default: D::Text("info,openraft=warn,raft_log=warn,chunked_wal=warn,lsm_tree=warn"),
        kind: Kind::Text,
        table: DocTable::Node,
        help: "log filter in `RUST_LOG` syntax (`info`, `statestore_node=debug`); `RUST_LOG` wins",
    },
    Setting {
        path: "telemetry.log_format",
        flag: flag("log-format", "FORMAT"),
        default: D::Text("text"),
        kind: Kind::Choice(&["text", "json"]),
        table: DocTable::Node,
        help: "log lines as text (coloured only on a terminal) or one JSON object per line; a \
               JSON line holds `timestamp`, `level`, `target`, `fields`, the current span and \
               its parents, for Loki, Elasticsearch and the like; the Helm chart sets `json`. A \
               panic's message is written by Rust's runtime as plain text",
    },
    Setting {
        path: "telemetry.otlp_endpoint",
        flag: flag("otlp-endpoint", "URL"),
        default: D::Unset("none"),
        kind: Kind::Text,
        table: DocTable::Node,
        help: "OTLP/gRPC endpoint for traces (`http://127.0.0.1:4317`); or \
               `OTEL_EXPORTER_OTLP_ENDPOINT`. Without it nothing is traced",
    },
    Setting {
        path: "telemetry.trace_sample_ratio",
        flag: flag("trace-sample-ratio", "RATIO"),
        default: D::Float(0.01),
        kind: Kind::Float { min: 0.0, max: 1.0 },
        table: DocTable::Node,
        help: "fraction of requests traced when an OTLP endpoint is set; a request whose \
               `traceparent` is sampled is always traced, one whose `traceparent` is not never is",
    },
    Setting {
        path: "shutdown_grace_ms",
        flag: Flag::None,
        default: D::Int(10_000),
        kind: Kind::at_least(0),
        table: DocTable::Node,
        help: "how long SIGTERM waits for in-flight requests, ms",
    },
    // ---- TLS to the broker ----
    Setting {
        path: "mqtt.tls.enabled",
        flag: Flag::Switch("mqtt-tls"),
        default: D::Bool(false),
        kind: Kind::Bool,
        table: DocTable::MqttTls,
        help: "connect to the broker with TLS; also on with an `mqtts://` broker or any \
               `mqtt.tls` file or `server_name`",
    },
    Setting {
        path: "mqtt.tls.ca_file",
        flag: flag("mqtt-tls-ca-file", "FILE"),
        default: D::Unset("the system's CA certificates"),
        kind: Kind::Path,
        table: DocTable::MqttTls,
        help: "PEM file of the CA certificates the broker's certificate must chain to. Without it \
               the system's are used (`rustls-native-certs`: `SSL_CERT_FILE`/`SSL_CERT_DIR`, \
               else the distribution's bundle); changes to those are not watched",
    },
    Setting {
        path: "mqtt.tls.cert_file",
        flag: flag("mqtt-tls-cert-file", "FILE"),
        default: D::Unset("none"),
        kind: Kind::Path,
        table: DocTable::MqttTls,
        help: "PEM client certificate chain (the node's own certificate first) for brokers that \
               require one; needs `mqtt.tls.key_file`. Mosquitto: `require_certificate true`, \
               with `use_identity_as_username true` its CN becomes the user name",
    },
    Setting {
        path: "mqtt.tls.key_file",
        flag: flag("mqtt-tls-key-file", "FILE"),
        default: D::Unset("none"),
        kind: Kind::Path,
        table: DocTable::MqttTls,
        help: "the client certificate's unencrypted PEM private key (PKCS#8, PKCS#1 or SEC1); \
               `cert_file` and `key_file` go together",
    },
    Setting {
        path: "mqtt.tls.server_name",
        flag: flag("mqtt-tls-server-name", "NAME"),
        default: D::Unset("the broker host"),
        kind: Kind::Text,
        table: DocTable::MqttTls,
        help: "the DNS name or IP address the broker's certificate must be valid for; a DNS name \
               is also sent as SNI. For a broker reached by an address its certificate does not \
               name",
    },
    Setting {
        path: "mqtt.tls.reload_interval_ms",
        flag: flag("mqtt-tls-reload-interval-ms", "MS"),
        default: D::Int(5_000),
        kind: Kind::at_least(0),
        table: DocTable::MqttTls,
        help: "how often the TLS files are checked for changes, ms; `0`: never",
    },
    // ---- Device-bound message queues (devicebound.md §5) ----
    // Where the contract gives no range: `max_message_bytes` is 1–262,144 (256 KiB, IoT Hub's
    // largest message): each SEND is one Raft entry, replicated and fsynced before `+OK`, and a
    // full queue of the largest messages (5,000 × 256 KiB) stays a bounded, if large, amount per
    // device. `max_dead_letters_per_device` is 1–1,000: dead letters keep their bodies, so the
    // cap bounds them like `max_queue_depth` bounds the queue (1,000 × the default 64 KiB is
    // 64 MiB per device at most). `max_devices` and `max_messages` are 1–10,000,000 and
    // 1–100,000,000: each node keeps an index entry per device (about 160 bytes) and per queued
    // message (about 150 bytes) in memory, so the largest values take about 1.6 and 15 GB.
    Setting {
        path: "devicebound.max_queue_depth",
        flag: flag("devicebound-max-queue-depth", "N"),
        default: D::Int(50),
        kind: Kind::between(1, 5_000),
        table: DocTable::Devicebound,
        help: "messages per device queue (Enqueued + Invisible); SEND beyond it: `device queue is \
               full`",
    },
    Setting {
        path: "devicebound.max_message_bytes",
        flag: flag("devicebound-max-message-bytes", "BYTES"),
        default: D::Int(65_536),
        kind: Kind::between(1, 262_144),
        table: DocTable::Devicebound,
        help: "largest SEND body, bytes (`message too large`); 256 KiB is IoT Hub's largest \
               message, and each SEND is one replicated, fsynced log entry",
    },
    Setting {
        path: "devicebound.default_ttl_ms",
        flag: flag("devicebound-default-ttl-ms", "MS"),
        default: D::Int(3_600_000),
        kind: Kind::between(60_000, MAX_TTL_MS),
        table: DocTable::Devicebound,
        help: "expiry of a message sent without TTL or EXPIRES, ms (any expiry is capped at 2 \
               days)",
    },
    Setting {
        path: "devicebound.max_delivery_count",
        flag: flag("devicebound-max-delivery-count", "N"),
        default: D::Int(10),
        kind: Kind::between(1, 100),
        table: DocTable::Devicebound,
        help: "deliveries of a message before it is dead-lettered (DeliveryCountExceeded)",
    },
    Setting {
        path: "devicebound.lock_duration_ms",
        flag: flag("devicebound-lock-duration-ms", "MS"),
        default: D::Int(60_000),
        kind: Kind::between(5_000, 300_000),
        table: DocTable::Devicebound,
        help: "lock of a delivered message (Invisible), ms",
    },
    Setting {
        path: "devicebound.device_window",
        flag: flag("devicebound-device-window", "N"),
        default: D::Int(1),
        kind: Kind::between(1, 32),
        table: DocTable::Devicebound,
        help: "messages of one device locked at a time (1: strict FIFO)",
    },
    Setting {
        path: "devicebound.feedback_ttl_ms",
        flag: flag("devicebound-feedback-ttl-ms", "MS"),
        default: D::Int(3_600_000),
        kind: Kind::between(60_000, MAX_TTL_MS),
        table: DocTable::Devicebound,
        help: "expiry of a feedback batch, ms",
    },
    Setting {
        path: "devicebound.feedback_max_delivery_count",
        flag: flag("devicebound-feedback-max-delivery-count", "N"),
        default: D::Int(10),
        kind: Kind::between(1, 100),
        table: DocTable::Devicebound,
        help: "deliveries of a feedback batch before it is dropped",
    },
    Setting {
        path: "devicebound.feedback_lock_duration_ms",
        flag: flag("devicebound-feedback-lock-duration-ms", "MS"),
        default: D::Int(60_000),
        kind: Kind::between(5_000, 300_000),
        table: DocTable::Devicebound,
        help: "lock of a published feedback batch, ms",
    },
    Setting {
        path: "devicebound.max_dead_letters_per_device",
        flag: flag("devicebound-max-dead-letters-per-device", "N"),
        default: D::Int(100),
        kind: Kind::between(1, 1_000),
        table: DocTable::Devicebound,
        help: "dead letters kept per device (they keep their bodies; the oldest go first): the cap \
               bounds them like `max_queue_depth` bounds the queue",
    },
    Setting {
        path: "devicebound.max_devices",
        flag: flag("devicebound-max-devices", "N"),
        default: D::Int(1_000_000),
        kind: Kind::between(1, 10_000_000),
        table: DocTable::Devicebound,
        help: "devices with state (a queued message or a dead letter), all together; a SEND to \
               one more: `the quota has been exceeded`. Each node keeps about 160 bytes per \
               device in memory",
    },
    Setting {
        path: "devicebound.max_messages",
        flag: flag("devicebound-max-messages", "N"),
        default: D::Int(1_000_000),
        kind: Kind::between(1, 100_000_000),
        table: DocTable::Devicebound,
        help: "messages queued in all queues together; a SEND beyond it: `the quota has been \
               exceeded`. Each node keeps about 150 bytes per queued message in memory, the \
               queues' index: `statestore_devicebound_index_bytes`",
    },
    // ---- Security: peer TLS, HTTPS, the admin token ----
    Setting {
        path: "cluster.tls",
        flag: Flag::HandWritten(
            "`--peer-tls-ca FILE` `--peer-tls-cert FILE` `--peer-tls-key FILE`",
        ),
        default: D::Unset("off"),
        kind: Kind::Table,
        table: DocTable::Security,
        help: "mutual TLS between peers: `ca_file`, `cert_file`, `key_file` (all three together)",
    },
    Setting {
        path: "admin.tls",
        flag: Flag::HandWritten("`--http-tls-cert FILE` `--http-tls-key FILE`"),
        default: D::Unset("off"),
        kind: Kind::Table,
        table: DocTable::Security,
        help: "HTTPS on the HTTP listener (`/metrics`, health, admin API): `cert_file`, `key_file`",
    },
    Setting {
        path: "admin.token_file",
        flag: flag("admin-token-file", "FILE"),
        default: D::Unset("none"),
        kind: Kind::Path,
        table: DocTable::Security,
        help: "file whose first line is the bearer token `POST /admin/members` and `GET \
               /admin/digest` require (`Authorization: Bearer <first line of FILE>`, 16 \
               characters at least)",
    },
    Setting {
        path: "admin.allow_insecure_http",
        flag: Flag::Switch("allow-insecure-http"),
        default: D::Bool(false),
        kind: Kind::Bool,
        table: DocTable::Security,
        help: "start with the HTTP listener off loopback and no token (the WARN about the open \
               endpoints stays)",
    },
    // ---- Who asks and what they may do (README "Authorization", issue 29) ----
    Setting {
        path: "auth.identity",
        flag: flag("auth-identity", "SOURCE"),
        default: D::Text("claimed"),
        kind: Kind::Choice(&["claimed", "broker"]),
        table: DocTable::Security,
        help: "where a state store request's identity comes from: `claimed`, what the client \
               says (`__srcId`, else its `clients/<id>/` response topic), which any client can \
               forge; `broker`, the user property `auth.vouched_property` the broker's statestore \
               plugin writes (a request without it gets no reply). The identity routes KEYNOTIFY \
               notifications, keys the reply memory and per-client caps, and is what the policy's \
               principals match",
    },
    Setting {
        path: "auth.vouched_property",
        flag: flag("auth-vouched-property", "NAME"),
        default: D::Text("__ssVouchedId"),
        kind: Kind::Text,
        table: DocTable::Security,
        help: "the user property holding the broker-vouched identity (the plugin's \
               `plugin_opt_property`)",
    },
    Setting {
        path: "auth.policy_file",
        flag: flag("auth-policy-file", "FILE"),
        default: D::Unset("none: everything allowed"),
        kind: Kind::Path,
        table: DocTable::Security,
        help: "the authorization rules (TOML, [format](#authorization-who-may-do-what)): once \
               it holds a rule, what no rule allows is refused (`-ERR not authorized`) and SCAN \
               lists only keys the requester may read. Without rules every requester may do \
               everything (a WARN at start says so)",
    },
    Setting {
        path: "auth.policy_reload_interval_ms",
        flag: flag("auth-policy-reload-interval-ms", "MS"),
        default: D::Int(2_000),
        kind: Kind::at_least(0),
        table: DocTable::Security,
        help: "how often the policy file is checked for changes, ms; a valid change applies to \
               the next request, an invalid one is refused (WARN) and the last good rules stay; \
               `0`: never",
    },
];

#[cfg(test)]
mod tests;
