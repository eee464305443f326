//! Node configuration: one validated [`Config`] from defaults, an optional TOML file and
//! command-line flags (flags win over the file, the file over defaults).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;

use serde::{Deserialize, Serialize};
use statestore_raft::{InboundLimits, PeerTimeouts, RaftConfig};
use statestore_storage::hlc::Hlc;
use statestore_storage::keyspace::Limits;

use crate::error::NodeError;
use crate::mqtt::{BrokerAddress, BrokerTls, SessionConfig};
use crate::service::ServiceConfig;
use crate::service::leader::LeaderTiming;
use crate::tls::{ClientIdentity, Reloading, TlsFiles};
use statestore_protocol::ProtocolLimits;
use statestore_protocol::devicebound::DeviceboundLimits;

/// Everything a node needs to start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Raft node id: unique in the cluster, never reused for another data directory.
    pub id: u64,
    /// Node name written into versions (HLC node id); default `statestore-<id>`.
    pub name: Option<String>,
    /// Where the database and snapshots live.
    pub data_dir: PathBuf,
    /// Listeners.
    pub listen: ListenConfig,
    /// Cluster membership and Raft timing.
    pub cluster: ClusterConfig,
    /// Broker connection.
    pub mqtt: MqttConfig,
    /// Protocol limits and quotas (§9).
    pub limits: LimitsConfig,
    /// Expiry sweeper.
    pub expiry: ExpiryConfig,
    /// Reply memory (§6).
    pub dedup: DedupConfig,
    /// Storage engine.
    pub storage: StorageConfig,
    /// Logs and traces.
    pub telemetry: TelemetryConfig,
    /// Device-bound message queues (devicebound.md §5).
    pub devicebound: DeviceboundConfig,
    /// The HTTP listener's TLS and the admin API's bearer token (README "Security").
    pub admin: AdminConfig,
    /// How long shutdown waits for in-flight requests, ms.
    pub shutdown_grace_ms: u64,
}

/// Listener addresses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ListenConfig {
    /// HTTP: `/metrics`, `/livez`, `/readyz`, admin API.
    pub http: SocketAddr,
    /// Raft peer listener.
    pub raft: SocketAddr,
}

/// Membership and consensus timing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// Address peers use to reach this node's Raft listener; default: `listen.raft`.
    pub advertise: Option<String>,
    /// Initial members `id -> raft address` (this node included) for a new cluster. Empty:
    /// a single-node cluster of this node.
    pub peers: BTreeMap<String, String>,
    /// Start without bootstrapping and wait to be added to an existing cluster
    /// (`statestore cluster add-node`).
    pub join: bool,
    /// Leader heartbeat interval, ms.
    pub heartbeat_ms: u64,
    /// Election timeout lower bound, ms.
    pub election_timeout_min_ms: u64,
    /// Election timeout upper bound, ms.
    pub election_timeout_max_ms: u64,
    /// Build a snapshot once this many proposals (client writes, sweeps) were applied since
    /// the last one.
    pub snapshot_after_proposals: u64,
    /// ... or once this many log entries were (an entry is a batch of concurrent writes).
    pub snapshot_after_entries: u64,
    /// Log entries kept behind a snapshot.
    pub entries_kept_after_snapshot: u64,
    /// How long the leader waits for a follower to acknowledge replicated entries before it
    /// reconnects, ms (a loaded follower's fsync and CPU, not the heartbeat interval).
    pub replication_timeout_ms: u64,
    /// Raft log payload kept in memory for replication and apply, MiB.
    pub log_cache_mb: u64,
    /// Largest snapshot this node receives from a leader, MiB; a larger transfer is refused
    /// and its partial file removed. Absent: [`Config::derived_max_snapshot_bytes`].
    pub max_snapshot_mb: Option<u64>,
    /// Mutual TLS between peers (`[cluster.tls]`); absent: plain TCP.
    pub tls: Option<PeerTlsConfig>,
}

/// Broker connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MqttConfig {
    /// Broker `host:port`, `mqtt://host[:port]` or `mqtts://host[:port]` (TLS); IPv6 in
    /// brackets. Without a port: 1883, or 8883 with TLS.
    pub broker: String,
    /// This node's MQTT client id; default `statestore-node-<id>`.
    pub client_id: Option<String>,
    /// Username.
    pub username: Option<String>,
    /// Password (prefer `password_file` or the `STATESTORE_MQTT_PASSWORD` variable).
    pub password: Option<String>,
    /// File holding the password (first line).
    pub password_file: Option<PathBuf>,
    /// Keep-alive, seconds.
    pub keep_alive_secs: u64,
    /// QoS 1 requests the broker may have in flight to this node.
    pub receive_maximum: u16,
    /// The broker must acknowledge a publish or (un)subscribe within this, ms, or the
    /// connection is presumed dead and re-established; a late PUBACK counts only while nothing
    /// else arrives from the broker either (when idle, a probe is published every second to
    /// find out).
    pub ack_timeout_ms: u64,
    /// Where replies may be published: a request whose Response Topic starts with none of
    /// these gets no reply (protocol §1). Topics the store publishes or serves stay refused
    /// whatever these say.
    pub reply_topic_prefixes: Vec<String>,
    /// TLS to the broker.
    pub tls: MqttTlsConfig,
}

/// TLS to the broker (`[mqtt.tls]`). TLS is on with `enabled`, with an `mqtts://` broker, or
/// when any of the files or `server_name` is set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MqttTlsConfig {
    /// Connect with TLS.
    pub enabled: bool,
    /// PEM CA certificates the broker's certificate must chain to; default: the system's.
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate chain (X.509 client authentication); needs `key_file`.
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file`.
    pub key_file: Option<PathBuf>,
    /// The name the broker's certificate must be valid for (also sent as SNI); default: the
    /// broker host.
    pub server_name: Option<String>,
    /// How often the files are checked for changes, ms (0: never). Changed files are used for
    /// the next connection; the current one is kept.
    pub reload_interval_ms: u64,
}

impl MqttTlsConfig {
    /// True if any setting asks for TLS.
    fn asked(&self) -> bool {
        self.enabled
            || self.ca_file.is_some()
            || self.cert_file.is_some()
            || self.key_file.is_some()
            || self.server_name.is_some()
    }
}

/// Where and how the node connects to the broker (from `mqtt.broker` and `mqtt.tls`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerEndpoint {
    /// Host and port.
    pub address: BrokerAddress,
    /// Connect with TLS.
    pub tls: bool,
}

/// Default MQTT port.
const MQTT_PORT: u16 = 1883;
/// Default MQTT-over-TLS port.
const MQTTS_PORT: u16 = 8883;

/// Splits `mqtt.broker` into an optional scheme (`Some(true)`: `mqtts://`), host and port.
fn parse_broker(text: &str) -> Result<(Option<bool>, String, Option<u16>), NodeError> {
    let bad = |why: &str| invalid(format!("mqtt.broker {text:?}: {why}"));
    let (scheme, rest) = match text.split_once("://") {
        Some(("mqtts", rest)) => (Some(true), rest),
        Some(("mqtt", rest)) => (Some(false), rest),
        Some(_) => return Err(bad("the scheme must be mqtt:// or mqtts://")),
        None => (None, text),
    };
    let (host, port) = if let Some(bracketed) = rest.strip_prefix('[') {
        let (host, after) = bracketed
            .split_once(']')
            .ok_or_else(|| bad("unclosed '['"))?;
        match after {
            "" => (host, None),
            _ => match after.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => return Err(bad("expected :PORT after the bracketed address")),
            },
        }
    } else {
        match rest.split_once(':') {
            Some((_, port)) if port.contains(':') => {
                return Err(bad("put an IPv6 address in brackets: [::1]:1883"));
            }
            Some((host, port)) => (host, Some(port)),
            None => (rest, None),
        }
    };
    if host.is_empty() || host.contains(['/', ' ', '[', ']']) {
        return Err(bad("expected HOST:PORT"));
    }
    let port = port
        .map(|port| port.parse::<u16>().ok().filter(|p| *p != 0))
        .map(|port| port.ok_or_else(|| bad("the port must be a number from 1 to 65535")))
        .transpose()?;
    Ok((scheme, host.to_owned(), port))
}

impl MqttConfig {
    /// The broker's address and whether to use TLS; an error for an unparsable address or
    /// `mqtt://` with TLS settings.
    pub fn endpoint(&self) -> Result<BrokerEndpoint, NodeError> {
        let (scheme, host, port) = parse_broker(&self.broker)?;
        let tls = match scheme {
            Some(false) if self.tls.asked() => {
                return Err(invalid(format!(
                    "mqtt.broker {:?} says mqtt:// (no TLS) but [mqtt.tls] settings are given: use mqtts://",
                    self.broker
                )));
            }
            Some(tls) => tls || self.tls.asked(),
            None => self.tls.asked(),
        };
        let port = port.unwrap_or(if tls { MQTTS_PORT } else { MQTT_PORT });
        Ok(BrokerEndpoint {
            address: BrokerAddress { host, port },
            tls,
        })
    }

    /// The TLS files; an error if a client certificate comes without its key or a key without
    /// its certificate.
    pub fn tls_files(&self) -> Result<TlsFiles, NodeError> {
        let client = match (&self.tls.cert_file, &self.tls.key_file) {
            (Some(cert), Some(key)) => Some(ClientIdentity {
                cert: cert.clone(),
                key: key.clone(),
            }),
            (None, None) => None,
            (Some(_), None) => {
                return Err(invalid(
                    "mqtt.tls.cert_file needs mqtt.tls.key_file (the client certificate's private key)",
                ));
            }
            (None, Some(_)) => {
                return Err(invalid(
                    "mqtt.tls.key_file needs mqtt.tls.cert_file (the client certificate it belongs to)",
                ));
            }
        };
        Ok(TlsFiles {
            ca: self.tls.ca_file.clone(),
            client,
        })
    }

    /// The name the broker's certificate is checked against: `server_name`, else the host.
    pub fn tls_server_name(&self, host: &str) -> Result<ServerName<'static>, NodeError> {
        let (name, setting) = match &self.tls.server_name {
            Some(name) => (name.as_str(), "mqtt.tls.server_name"),
            None => (host, "the broker host"),
        };
        ServerName::try_from(name.to_owned()).map_err(|_| {
            invalid(format!(
                "{setting} {name:?} is neither a DNS name nor an IP address (set mqtt.tls.server_name)"
            ))
        })
    }
}

/// Limits of protocol §9.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Longest key, bytes.
    pub max_key_bytes: usize,
    /// Longest value, bytes.
    pub max_value_bytes: usize,
    /// Most elements in a request array.
    pub max_array_len: usize,
    /// Longest PX, ms.
    pub max_px_ms: u64,
    /// Keys stored.
    pub max_keys: u64,
    /// Key+value bytes stored.
    pub max_bytes: u64,
    /// KEYNOTIFY registrations per client.
    pub max_registrations_per_client: u32,
    /// KEYNOTIFY registrations of all clients together.
    pub max_registrations: u64,
    /// KEYNOTIFY registrations of one key, all clients together (what one change fans out to).
    pub max_observers_per_key: u32,
    /// Replies remembered for retried requests (§6); over it the earliest-expiring are evicted.
    pub max_remembered_replies: u64,
    /// Bytes of remembered replies (reply key plus encoded reply, each); over it the
    /// earliest-expiring are evicted.
    pub max_remembered_reply_bytes: u64,
    /// Bytes of requests held at once (each request whole, properties included, plus 1 KiB),
    /// MiB. When it is spent, PUBACKs wait and the broker holds further requests.
    pub request_budget_mb: u64,
    /// Bytes of messages the node publishes held from when they are queued until the broker
    /// acknowledges them, MiB: half for replies up to 16 KiB, half for the bulk lane
    /// (notifications, device deliveries, feedback, larger replies). When a half is spent,
    /// publishers of that kind wait.
    pub outbound_budget_mb: u64,
    /// The bulk lane's byte rate, MiB a second: what watched keys, device queues and large
    /// reads make the node publish cannot saturate the broker and CPU it shares.
    pub bulk_egress_mb_per_sec: u64,
    /// The bulk lane's message rate, messages a second.
    pub bulk_egress_messages_per_sec: u64,
    /// Longest a request may take before it is given up without a reply, ms (less when its
    /// Message Expiry is sooner).
    pub request_timeout_ms: u64,
}

/// Expiry sweeper.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExpiryConfig {
    /// Time between sweeps, ms.
    pub sweep_interval_ms: u64,
    /// Keys removed per proposal.
    pub batch_size: usize,
}

/// Reply memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DedupConfig {
    /// Window when a request has no Message Expiry, ms.
    pub default_window_ms: u64,
    /// Longest window whatever the Message Expiry says, ms.
    pub max_window_ms: u64,
}

/// Storage engine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    /// sled page cache, MiB.
    pub cache_capacity_mb: u64,
}

/// Logs and traces.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// Log filter (`RUST_LOG` syntax); `RUST_LOG` overrides it.
    pub log: String,
    /// OTLP/gRPC endpoint for traces; `OTEL_EXPORTER_OTLP_ENDPOINT` also enables it.
    pub otlp_endpoint: Option<String>,
    /// Fraction of requests traced when an endpoint is set (0.0–1.0). A request whose
    /// `traceparent` is sampled is always traced, one whose `traceparent` is not never is.
    pub trace_sample_ratio: f64,
    /// How log lines are written.
    pub log_format: LogFormat,
}

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One line of text per event (coloured only on a terminal).
    #[default]
    Text,
    /// One JSON object per line (timestamp, level, target, fields, the current span and its
    /// parents), for log pipelines such as Loki or Elasticsearch.
    Json,
}

/// Device-bound message queues (devicebound.md §5). Every setting has a range
/// ([`DeviceboundConfig::ranged_settings`]); a value outside it stops the node at
/// start with a message naming the setting and the range.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeviceboundConfig {
    /// Messages a device's queue holds (Enqueued and Invisible); SEND beyond it fails.
    pub max_queue_depth: u64,
    /// Largest SEND body, bytes.
    pub max_message_bytes: u64,
    /// Expiry of a message sent without TTL or EXPIRES, ms.
    pub default_ttl_ms: u64,
    /// Deliveries of a message before it is dead-lettered (DeliveryCountExceeded).
    pub max_delivery_count: u64,
    /// How long a delivered message stays locked (Invisible), ms.
    pub lock_duration_ms: u64,
    /// Messages of one device Invisible at a time (1: strict FIFO).
    pub device_window: u64,
    /// Expiry of a feedback batch, ms.
    pub feedback_ttl_ms: u64,
    /// Deliveries of a feedback batch before it is dropped.
    pub feedback_max_delivery_count: u64,
    /// How long a published feedback batch stays locked, ms.
    pub feedback_lock_duration_ms: u64,
    /// Dead letters kept per device; over it the oldest are dropped.
    pub max_dead_letters_per_device: u64,
    /// Devices with state (a queued message or a dead letter), all together; a SEND to a new
    /// device beyond it fails (`the quota has been exceeded`).
    pub max_devices: u64,
    /// Messages queued in all queues together; a SEND beyond it fails (`the quota has been
    /// exceeded`). Every queued message takes about 150 bytes of each node's memory (the
    /// queues' index) besides its row on disk.
    pub max_messages: u64,
}

impl Default for DeviceboundConfig {
    fn default() -> Self {
        DeviceboundConfig {
            max_queue_depth: 50,
            max_message_bytes: DeviceboundLimits::DEFAULT_MAX_MESSAGE_BYTES as u64,
            default_ttl_ms: 3_600_000,
            max_delivery_count: 10,
            lock_duration_ms: 60_000,
            device_window: 1,
            feedback_ttl_ms: 3_600_000,
            feedback_max_delivery_count: 10,
            feedback_lock_duration_ms: 60_000,
            max_dead_letters_per_device: 100,
            max_devices: 1_000_000,
            max_messages: 1_000_000,
        }
    }
}

/// One minute, the shortest default TTL (devicebound.md §1, §4).
const MIN_TTL_MS: u64 = 60_000;
/// Two days, the longest TTL (devicebound.md §1, §4).
const MAX_TTL_MS: u64 = statestore_protocol::devicebound::request::MAX_TTL_MS;

impl DeviceboundConfig {
    /// THE range table of devicebound.md §5: every setting's name, value and
    /// allowed range.
    ///
    /// Where the contract gives no range: `max_message_bytes` is 1–262,144
    /// (256 KiB, IoT Hub's largest message): each SEND is one Raft entry,
    /// replicated and fsynced before `+OK`, and a full queue of the largest
    /// messages (5,000 × 256 KiB) stays a bounded, if large, amount per device.
    /// `max_dead_letters_per_device` is 1–1,000: dead letters keep their bodies,
    /// so the cap bounds them like `max_queue_depth` bounds the queue (1,000 ×
    /// the default 64 KiB is 64 MiB per device at most). `max_devices` and
    /// `max_messages` are 1–10,000,000 and 1–100,000,000: each node keeps an index
    /// entry per device (about 160 bytes) and per queued message (about 150 bytes)
    /// in memory, so the largest values take about 1.6 and 15 GB.
    pub fn ranged_settings(&self) -> [(&'static str, u64, RangeInclusive<u64>); 12] {
        [
            ("max_queue_depth", self.max_queue_depth, 1..=5_000),
            ("max_message_bytes", self.max_message_bytes, 1..=262_144),
            (
                "default_ttl_ms",
                self.default_ttl_ms,
                MIN_TTL_MS..=MAX_TTL_MS,
            ),
            ("max_delivery_count", self.max_delivery_count, 1..=100),
            ("lock_duration_ms", self.lock_duration_ms, 5_000..=300_000),
            ("device_window", self.device_window, 1..=32),
            (
                "feedback_ttl_ms",
                self.feedback_ttl_ms,
                MIN_TTL_MS..=MAX_TTL_MS,
            ),
            (
                "feedback_max_delivery_count",
                self.feedback_max_delivery_count,
                1..=100,
            ),
            (
                "feedback_lock_duration_ms",
                self.feedback_lock_duration_ms,
                5_000..=300_000,
            ),
            (
                "max_dead_letters_per_device",
                self.max_dead_letters_per_device,
                1..=1_000,
            ),
            ("max_devices", self.max_devices, 1..=10_000_000),
            ("max_messages", self.max_messages, 1..=100_000_000),
        ]
    }

    /// Refuses the first setting outside its range, naming it and the range.
    pub fn validate(&self) -> Result<(), NodeError> {
        for (name, value, range) in self.ranged_settings() {
            if !range.contains(&value) {
                return Err(invalid(format!(
                    "devicebound.{name} must be between {} and {} (got {value})",
                    range.start(),
                    range.end()
                )));
            }
        }
        Ok(())
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            id: 1,
            name: None,
            data_dir: PathBuf::from("statestore-data"),
            listen: ListenConfig::default(),
            cluster: ClusterConfig::default(),
            mqtt: MqttConfig::default(),
            limits: LimitsConfig::default(),
            expiry: ExpiryConfig::default(),
            dedup: DedupConfig::default(),
            storage: StorageConfig::default(),
            telemetry: TelemetryConfig::default(),
            devicebound: DeviceboundConfig::default(),
            admin: AdminConfig::default(),
            shutdown_grace_ms: 10_000,
        }
    }
}

impl Default for ListenConfig {
    fn default() -> Self {
        ListenConfig {
            http: SocketAddr::from(([127, 0, 0, 1], 7480)),
            raft: SocketAddr::from(([127, 0, 0, 1], 7481)),
        }
    }
}

impl Default for ClusterConfig {
    fn default() -> Self {
        let raft = RaftConfig::default();
        ClusterConfig {
            advertise: None,
            peers: BTreeMap::new(),
            join: false,
            heartbeat_ms: as_ms(raft.heartbeat_interval),
            election_timeout_min_ms: as_ms(raft.election_timeout_min),
            election_timeout_max_ms: as_ms(raft.election_timeout_max),
            snapshot_after_proposals: raft.snapshot_after_proposals,
            snapshot_after_entries: raft.snapshot_after_entries,
            entries_kept_after_snapshot: raft.entries_kept_after_snapshot,
            replication_timeout_ms: as_ms(raft.peer_timeouts.replication),
            log_cache_mb: (raft.log_cache_bytes >> 20) as u64,
            max_snapshot_mb: None,
            tls: None,
        }
    }
}

impl Default for MqttConfig {
    fn default() -> Self {
        MqttConfig {
            broker: "127.0.0.1:1883".to_owned(),
            client_id: None,
            username: None,
            password: None,
            password_file: None,
            keep_alive_secs: 10,
            receive_maximum: 1024,
            ack_timeout_ms: 5_000,
            reply_topic_prefixes: crate::service::reply_topic::DEFAULT_REPLY_TOPIC_PREFIXES
                .iter()
                .map(|p| (*p).to_owned())
                .collect(),
            tls: MqttTlsConfig::default(),
        }
    }
}

impl Default for MqttTlsConfig {
    fn default() -> Self {
        MqttTlsConfig {
            enabled: false,
            ca_file: None,
            cert_file: None,
            key_file: None,
            server_name: None,
            reload_interval_ms: 5_000,
        }
    }
}

impl Default for LimitsConfig {
    fn default() -> Self {
        let protocol = ProtocolLimits::default();
        let quota = Limits::default();
        LimitsConfig {
            max_key_bytes: protocol.max_key_bytes,
            max_value_bytes: protocol.max_value_bytes,
            max_array_len: protocol.max_array_len,
            max_px_ms: protocol.max_px_ms,
            max_keys: quota.max_keys,
            max_bytes: quota.max_bytes,
            max_registrations_per_client: quota.max_registrations_per_client,
            max_registrations: quota.max_registrations,
            max_observers_per_key: quota.max_observers_per_key,
            max_remembered_replies: quota.max_remembered_replies,
            max_remembered_reply_bytes: quota.max_remembered_reply_bytes,
            request_budget_mb: 64,
            outbound_budget_mb: 64,
            bulk_egress_mb_per_sec: DEFAULT_BULK_EGRESS_MB_PER_SEC,
            bulk_egress_messages_per_sec: DEFAULT_BULK_EGRESS_MESSAGES_PER_SEC,
            request_timeout_ms: 10_000,
        }
    }
}

impl Default for ExpiryConfig {
    fn default() -> Self {
        ExpiryConfig {
            sweep_interval_ms: 250,
            batch_size: 1_000,
        }
    }
}

impl Default for DedupConfig {
    fn default() -> Self {
        DedupConfig {
            default_window_ms: 10_000,
            max_window_ms: 600_000,
        }
    }
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            cache_capacity_mb: 256,
        }
    }
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            log: "info,openraft=warn,raft_log=warn,chunked_wal=warn".to_owned(),
            otlp_endpoint: None,
            trace_sample_ratio: 0.01,
            log_format: LogFormat::Text,
        }
    }
}

fn as_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The largest `cluster.max_snapshot_mb`: 16 TiB.
const MAX_SNAPSHOT_MB: u64 = 16 << 20;

/// Default pace of the bulk lane in bytes (payload and topic): 8 MiB a second is a 4 MiB value
/// twice a second, or about 6,000 notifications of 1 KiB values. A single-threaded broker
/// handles one large message at a time and every other client waits meanwhile (Mosquitto
/// alone: a round trip's p99 went from 0.42 to 12.8 ms with 4 MiB messages ten times a
/// second); at this pace a flood of GETs of a 4 MiB value keeps other clients' SET p99 within
/// 1.4x (`statestore-bench abuse --attacks getbig`).
const DEFAULT_BULK_EGRESS_MB_PER_SEC: u64 = 8;
/// Default pace of the bulk lane in messages: 20,000 notifications or deliveries a second.
const DEFAULT_BULK_EGRESS_MESSAGES_PER_SEC: u64 = 20_000;
/// Upper bounds of the bulk lane's pace settings.
const MAX_BULK_EGRESS_MB_PER_SEC: u64 = 1 << 20;
const MAX_BULK_EGRESS_MESSAGES_PER_SEC: u64 = 100_000_000;

fn invalid(message: impl Into<String>) -> NodeError {
    NodeError::Config(message.into())
}

impl Config {
    /// Reads a TOML file (unknown keys are errors).
    pub fn from_file(path: &Path) -> Result<Config, NodeError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| invalid(format!("cannot read {}: {e}", path.display())))?;
        toml::from_str(&text).map_err(|e| invalid(format!("{}: {e}", path.display())))
    }

    /// The HLC node id.
    pub fn node_name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("statestore-{}", self.id))
    }

    /// The MQTT client id.
    pub fn mqtt_client_id(&self) -> String {
        self.mqtt
            .client_id
            .clone()
            .unwrap_or_else(|| format!("statestore-node-{}", self.id))
    }

    /// The address peers reach this node at.
    pub fn advertise_addr(&self) -> String {
        self.cluster
            .advertise
            .clone()
            .unwrap_or_else(|| self.listen.raft.to_string())
    }

    /// The configured peers (`[cluster.peers]`, `--peer`) by id.
    fn peer_addrs(&self) -> Result<BTreeMap<u64, String>, NodeError> {
        let mut members = BTreeMap::new();
        for (id, addr) in &self.cluster.peers {
            let id: u64 = id
                .parse()
                .map_err(|_| invalid(format!("peer id {id:?} is not a number")))?;
            members.insert(id, addr.clone());
        }
        Ok(members)
    }

    /// Initial members: the configured peers, or this node alone.
    pub fn initial_members(&self) -> Result<BTreeMap<u64, String>, NodeError> {
        if self.cluster.peers.is_empty() {
            return Ok(BTreeMap::from([(self.id, self.advertise_addr())]));
        }
        let members = self.peer_addrs()?;
        if !members.contains_key(&self.id) {
            return Err(invalid(format!(
                "peers must include this node (id {})",
                self.id
            )));
        }
        Ok(members)
    }

    /// Checks every setting; the node refuses to start with a message naming the bad one.
    pub fn validate(&self) -> Result<(), NodeError> {
        if self.id == 0 {
            return Err(invalid("id must be at least 1"));
        }
        if !Hlc::valid_node_id(&self.node_name()) {
            return Err(invalid("name must be non-empty and must not contain ':'"));
        }
        if self.mqtt_client_id().is_empty() {
            return Err(invalid("mqtt.client_id must not be empty"));
        }
        let c = &self.cluster;
        if c.heartbeat_ms == 0
            || c.election_timeout_min_ms <= c.heartbeat_ms
            || c.election_timeout_max_ms <= c.election_timeout_min_ms
        {
            return Err(invalid(
                "cluster timing needs 0 < heartbeat_ms < election_timeout_min_ms < election_timeout_max_ms",
            ));
        }
        if c.snapshot_after_entries == 0 || c.snapshot_after_proposals == 0 {
            return Err(invalid(
                "cluster.snapshot_after_entries and snapshot_after_proposals must be positive",
            ));
        }
        if c.replication_timeout_ms < c.heartbeat_ms {
            return Err(invalid(
                "cluster.replication_timeout_ms must be at least heartbeat_ms",
            ));
        }
        if c.log_cache_mb == 0 || c.log_cache_mb > 64 << 10 {
            return Err(invalid("cluster.log_cache_mb must be between 1 and 65536"));
        }
        if let Some(mb) = c.max_snapshot_mb
            && !(1..=MAX_SNAPSHOT_MB).contains(&mb)
        {
            return Err(invalid(format!(
                "cluster.max_snapshot_mb must be between 1 and {MAX_SNAPSHOT_MB} (got {mb})"
            )));
        }
        let l = &self.limits;
        if l.max_key_bytes == 0
            || l.max_value_bytes == 0
            || l.max_keys == 0
            || l.max_bytes == 0
            || l.max_px_ms == 0
            || l.max_remembered_replies == 0
            || l.max_remembered_reply_bytes == 0
        {
            return Err(invalid("limits must be positive"));
        }
        if !(1..=1_000_000).contains(&l.max_observers_per_key) {
            return Err(invalid(
                "limits.max_observers_per_key must be between 1 and 1000000",
            ));
        }
        if l.request_budget_mb == 0 || l.request_timeout_ms == 0 {
            return Err(invalid(
                "limits.request_budget_mb and limits.request_timeout_ms must be positive",
            ));
        }
        if l.outbound_budget_mb == 0 || l.outbound_budget_mb > 64 << 10 {
            return Err(invalid(
                "limits.outbound_budget_mb must be between 1 and 65536",
            ));
        }
        if !(1..=MAX_BULK_EGRESS_MB_PER_SEC).contains(&l.bulk_egress_mb_per_sec) {
            return Err(invalid(format!(
                "limits.bulk_egress_mb_per_sec must be between 1 and {MAX_BULK_EGRESS_MB_PER_SEC}"
            )));
        }
        if !(1..=MAX_BULK_EGRESS_MESSAGES_PER_SEC).contains(&l.bulk_egress_messages_per_sec) {
            return Err(invalid(format!(
                "limits.bulk_egress_messages_per_sec must be between 1 and \
                 {MAX_BULK_EGRESS_MESSAGES_PER_SEC}"
            )));
        }
        if l.max_array_len < 6 {
            return Err(invalid(
                "limits.max_array_len must be at least 6 (SET key value NX PX ms)",
            ));
        }
        if l.max_value_bytes > 256 << 20 {
            return Err(invalid("limits.max_value_bytes must be at most 256 MiB"));
        }
        if self.expiry.sweep_interval_ms == 0 || self.expiry.batch_size == 0 {
            return Err(invalid("expiry settings must be positive"));
        }
        if self.dedup.default_window_ms > self.dedup.max_window_ms {
            return Err(invalid(
                "dedup.default_window_ms must not exceed dedup.max_window_ms",
            ));
        }
        if self.mqtt.receive_maximum == 0 {
            return Err(invalid("mqtt.receive_maximum must be positive"));
        }
        if self.mqtt.reply_topic_prefixes.is_empty() {
            return Err(invalid(
                "mqtt.reply_topic_prefixes must name at least one prefix (no request could be answered)",
            ));
        }
        for prefix in &self.mqtt.reply_topic_prefixes {
            if let Some(why) = crate::service::reply_topic::validate_prefix(prefix) {
                return Err(invalid(format!(
                    "mqtt.reply_topic_prefixes: {prefix:?} {why}"
                )));
            }
        }
        let endpoint = self.mqtt.endpoint()?;
        if endpoint.tls {
            self.mqtt.tls_files()?;
            self.mqtt.tls_server_name(&endpoint.address.host)?;
        }
        if !(0.0..=1.0).contains(&self.telemetry.trace_sample_ratio) {
            return Err(invalid(format!(
                "telemetry.trace_sample_ratio must be between 0 and 1 (got {})",
                self.telemetry.trace_sample_ratio
            )));
        }
        self.devicebound.validate()?;
        self.validate_security()?;
        if c.join {
            // A joining node is not bootstrapped: its --peer list (if any) only names the
            // members whose certificates it accepts before the cluster reaches it.
            self.peer_addrs()?;
        } else {
            self.initial_members()?;
        }
        Ok(())
    }

    /// The broker password from the file, the environment or the config, in that order.
    pub fn mqtt_password(&self) -> Result<Option<String>, NodeError> {
        if let Some(path) = &self.mqtt.password_file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| invalid(format!("mqtt.password_file {}: {e}", path.display())))?;
            return Ok(text.lines().next().map(str::to_owned));
        }
        if let Ok(password) = std::env::var("STATESTORE_MQTT_PASSWORD") {
            return Ok(Some(password));
        }
        Ok(self.mqtt.password.clone())
    }

    /// Consensus settings.
    pub fn raft(&self) -> RaftConfig {
        let c = &self.cluster;
        RaftConfig {
            id: self.id,
            heartbeat_interval: Duration::from_millis(c.heartbeat_ms),
            election_timeout_min: Duration::from_millis(c.election_timeout_min_ms),
            election_timeout_max: Duration::from_millis(c.election_timeout_max_ms),
            snapshot_after_proposals: c.snapshot_after_proposals,
            snapshot_after_entries: c.snapshot_after_entries,
            entries_kept_after_snapshot: c.entries_kept_after_snapshot,
            peer_timeouts: PeerTimeouts {
                replication: Duration::from_millis(c.replication_timeout_ms),
                ..PeerTimeouts::default()
            },
            log_cache_bytes: usize::try_from(c.log_cache_mb << 20).unwrap_or(usize::MAX),
            known_peers: self
                .cluster
                .peers
                .values()
                .cloned()
                .chain([self.advertise_addr()])
                .collect(),
            inbound: InboundLimits {
                max_snapshot_bytes: self.max_snapshot_bytes(),
                ..InboundLimits::default()
            },
            ..RaftConfig::default()
        }
    }

    /// The largest snapshot this node receives: `cluster.max_snapshot_mb`, or
    /// [`Config::derived_max_snapshot_bytes`].
    pub fn max_snapshot_bytes(&self) -> u64 {
        match self.cluster.max_snapshot_mb {
            Some(mb) => mb.saturating_mul(1 << 20),
            None => self.derived_max_snapshot_bytes(),
        }
    }

    /// What the store's caps let it hold, twice over, and at least 4 GiB: key and value bytes
    /// (`limits.max_bytes`), remembered replies (`limits.max_remembered_reply_bytes`) and
    /// queued message bodies (`devicebound.max_messages` × `max_message_bytes`); the factor
    /// covers what each record carries besides (versions, timestamps, properties, rows of
    /// registrations and devices) and dead letters. A snapshot of a store within its caps
    /// stays below it, so a follower is never refused a real one; an endless or bloated
    /// transfer stops there instead of at a full disk.
    pub fn derived_max_snapshot_bytes(&self) -> u64 {
        let d = &self.devicebound;
        let held = self
            .limits
            .max_bytes
            .saturating_add(self.limits.max_remembered_reply_bytes)
            .saturating_add(d.max_messages.saturating_mul(d.max_message_bytes));
        held.saturating_mul(2).max(4 << 30)
    }

    /// Door limits.
    pub fn protocol_limits(&self) -> ProtocolLimits {
        ProtocolLimits {
            max_key_bytes: self.limits.max_key_bytes,
            max_value_bytes: self.limits.max_value_bytes,
            max_array_len: self.limits.max_array_len,
            max_px_ms: self.limits.max_px_ms,
        }
    }

    /// Door limits of the device-bound service.
    pub fn devicebound_limits(&self) -> DeviceboundLimits {
        DeviceboundLimits {
            max_message_bytes: usize::try_from(self.devicebound.max_message_bytes)
                .unwrap_or(usize::MAX),
        }
    }

    /// The replicated device-bound settings this node's configuration asks for (the
    /// store-wide caps keep their defaults).
    pub fn devicebound_settings(&self) -> statestore_storage::devicebound::DeviceboundSettings {
        let d = &self.devicebound;
        let small = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        statestore_storage::devicebound::DeviceboundSettings {
            max_queue_depth: small(d.max_queue_depth),
            max_message_bytes: d.max_message_bytes,
            default_ttl_ms: d.default_ttl_ms,
            max_delivery_count: small(d.max_delivery_count),
            lock_duration_ms: d.lock_duration_ms,
            device_window: small(d.device_window),
            feedback_ttl_ms: d.feedback_ttl_ms,
            feedback_max_delivery_count: small(d.feedback_max_delivery_count),
            feedback_lock_duration_ms: d.feedback_lock_duration_ms,
            max_dead_letters_per_device: small(d.max_dead_letters_per_device),
            max_devices: d.max_devices,
            max_messages: d.max_messages,
            ..Default::default()
        }
    }

    /// Replicated quotas.
    pub fn quota(&self) -> Limits {
        Limits {
            max_keys: self.limits.max_keys,
            max_bytes: self.limits.max_bytes,
            max_registrations_per_client: self.limits.max_registrations_per_client,
            max_registrations: self.limits.max_registrations,
            max_observers_per_key: self.limits.max_observers_per_key,
            max_remembered_replies: self.limits.max_remembered_replies,
            max_remembered_reply_bytes: self.limits.max_remembered_reply_bytes,
        }
    }

    /// Service settings.
    pub fn service(&self) -> ServiceConfig {
        ServiceConfig {
            protocol: self.protocol_limits(),
            default_dedup_window: Duration::from_millis(self.dedup.default_window_ms),
            max_dedup_window: Duration::from_millis(self.dedup.max_window_ms),
            node_client_id: self.mqtt_client_id(),
            request_timeout: Duration::from_millis(self.limits.request_timeout_ms),
            devicebound: self.devicebound_limits(),
            scan_page: statestore_protocol::scan::PageLimits::default(),
            reply_topics: crate::service::reply_topic::ReplyTopics::new(
                self.mqtt.reply_topic_prefixes.iter().cloned(),
            ),
        }
    }

    /// Bytes of requests a node holds at once.
    pub fn request_budget_bytes(&self) -> usize {
        usize::try_from(self.limits.request_budget_mb.saturating_mul(1 << 20)).unwrap_or(usize::MAX)
    }

    /// Bytes of publishes a node holds until the broker acknowledges them.
    pub fn outbound_budget_bytes(&self) -> usize {
        usize::try_from(self.limits.outbound_budget_mb.saturating_mul(1 << 20))
            .unwrap_or(usize::MAX)
    }

    /// Leadership checks: a serving leader gives up after the longest election timeout
    /// without a quorum acknowledgement.
    pub fn leader_timing(&self) -> LeaderTiming {
        let election_max = Duration::from_millis(self.cluster.election_timeout_max_ms);
        LeaderTiming {
            quorum_timeout: election_max,
            check_interval: Duration::from_millis(self.cluster.heartbeat_ms / 2)
                .clamp(Duration::from_millis(10), Duration::from_millis(100)),
            take_over_timeout: election_max * 2,
            quorum_probe_timeout: Duration::from_millis(self.cluster.heartbeat_ms * 2),
            broker_loss_timeout: election_max * 2,
        }
    }

    /// MQTT session settings. With TLS this reads the certificate files: an unreadable or
    /// unusable one is an error naming it.
    pub fn session(&self) -> Result<SessionConfig, NodeError> {
        let endpoint = self.mqtt.endpoint()?;
        let tls = if endpoint.tls {
            Some(BrokerTls {
                server_name: self.mqtt.tls_server_name(&endpoint.address.host)?,
                config: Arc::new(Reloading::load(self.mqtt.tls_files()?)?),
                reload_interval: (self.mqtt.tls.reload_interval_ms > 0)
                    .then(|| Duration::from_millis(self.mqtt.tls.reload_interval_ms)),
            })
        } else {
            None
        };
        // The largest request is a SET value or a device-bound SEND body.
        let max_packet = self
            .limits
            .max_value_bytes
            .max(self.devicebound_limits().max_message_bytes)
            .saturating_add(self.limits.max_key_bytes)
            .saturating_add(64 << 10);
        Ok(SessionConfig {
            broker: endpoint.address,
            tls,
            client_id: self.mqtt_client_id(),
            username: self.mqtt.username.clone(),
            password: self.mqtt_password()?,
            keep_alive: Duration::from_secs(self.mqtt.keep_alive_secs),
            receive_maximum: self.mqtt.receive_maximum,
            max_packet_size: u32::try_from(max_packet).unwrap_or(u32::MAX),
            ack_timeout: Duration::from_millis(self.mqtt.ack_timeout_ms.max(1)),
            reconnect_min: Duration::from_millis(100),
            reconnect_max: Duration::from_secs(5),
            outbound_budget_bytes: self.outbound_budget_bytes(),
            bulk_pace: crate::outbound::pacer::PaceLimits {
                bytes_per_sec: self.limits.bulk_egress_mb_per_sec.saturating_mul(1 << 20),
                messages_per_sec: self.limits.bulk_egress_messages_per_sec,
            },
        })
    }
}

// ---- Security: peer TLS, HTTPS on the HTTP listener, the admin token (README "Security") ----

/// Mutual TLS between peers: every node holds a certificate of one CA (`[cluster.tls]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerTlsConfig {
    /// CA certificates (PEM) a peer's certificate must chain to, client and server alike.
    pub ca_file: PathBuf,
    /// This node's certificate (PEM, then intermediates), valid for the host of its
    /// advertised Raft address (a DNS name, or an IP address as an IP subjectAltName).
    pub cert_file: PathBuf,
    /// Its private key (PEM).
    pub key_file: PathBuf,
}

/// HTTPS on the HTTP listener (`[admin.tls]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpTlsConfig {
    /// The listener's certificate (PEM, then intermediates); may be the peer certificate.
    pub cert_file: PathBuf,
    /// Its private key (PEM).
    pub key_file: PathBuf,
}

/// The HTTP listener's security: `/metrics`, `/livez`, `/readyz` and the admin API.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminConfig {
    /// Serve HTTPS instead of HTTP.
    pub tls: Option<HttpTlsConfig>,
    /// File whose first line is the bearer token that `POST /admin/members` and
    /// `GET /admin/digest` require (at least 16 characters). Absent: the endpoints are open to
    /// whoever reaches them, which off loopback needs `allow_insecure_http`.
    pub token_file: Option<PathBuf>,
    /// Lets a node whose HTTP listener is not on loopback start without `token_file` (the
    /// membership endpoint then open to whoever reaches it; a WARN says so).
    pub allow_insecure_http: bool,
}

fn exposed(addr: &SocketAddr) -> bool {
    !addr.ip().is_loopback()
}

impl Config {
    /// The peer network's TLS, read from `[cluster.tls]`'s files.
    pub fn peer_tls(&self) -> Result<Option<statestore_raft::PeerTls>, NodeError> {
        let Some(tls) = &self.cluster.tls else {
            return Ok(None);
        };
        statestore_raft::PeerTls::from_files(&tls.ca_file, &tls.cert_file, &tls.key_file)
            .map(Some)
            .map_err(|e| invalid(format!("cluster.tls: {e}")))
    }

    /// The HTTP listener's TLS, read from `[admin.tls]`'s files.
    pub fn http_tls(&self) -> Result<Option<std::sync::Arc<rustls::ServerConfig>>, NodeError> {
        self.admin
            .tls
            .as_ref()
            .map(|tls| crate::https::server_config("admin.tls", &tls.cert_file, &tls.key_file))
            .transpose()
    }

    /// The admin bearer token, read from `admin.token_file`.
    pub fn admin_token(&self) -> Result<Option<crate::auth::AdminToken>, NodeError> {
        self.admin
            .token_file
            .as_deref()
            .map(|path| crate::auth::AdminToken::from_file("admin.token_file", path))
            .transpose()
    }

    /// Refuses TLS files that do not load, a token file that is unreadable or too short, and
    /// an HTTP listener off loopback without a token unless `admin.allow_insecure_http`.
    fn validate_security(&self) -> Result<(), NodeError> {
        self.peer_tls()?;
        self.http_tls()?;
        self.admin_token()?;
        let http = self.listen.http;
        if exposed(&http) && self.admin.token_file.is_none() && !self.admin.allow_insecure_http {
            return Err(invalid(format!(
                "listen.http {http} is not a loopback address and admin.token_file is not set: \
                 whoever reaches it could add and remove members. Set admin.token_file \
                 (--admin-token-file), or admin.allow_insecure_http = true \
                 (--allow-insecure-http) to serve it without a token anyway"
            )));
        }
        Ok(())
    }

    /// What this configuration exposes without protection on a non-loopback address (logged
    /// as warnings at start); empty on loopback or with TLS and a token.
    pub fn exposure_warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        let (raft, http) = (self.listen.raft, self.listen.http);
        if exposed(&raft) && self.cluster.tls.is_none() {
            warnings.push(format!(
                "the Raft listener {raft} is plain text and unauthenticated: whoever reaches it \
                 can read the replicated data, take part in elections and change membership \
                 (set [cluster.tls])"
            ));
        }
        if exposed(&http) && self.admin.tls.is_none() {
            warnings.push(format!(
                "the HTTP listener {http} is plain text: /metrics, /admin/status and \
                 /admin/digest, and any bearer token sent to it, cross the network unencrypted \
                 (set [admin.tls])"
            ));
        }
        if exposed(&http) && self.admin.token_file.is_none() {
            warnings.push(format!(
                "POST /admin/members and GET /admin/digest on {http} need no token \
                 (admin.allow_insecure_http): whoever reaches them can add and remove members \
                 and make the node hash its whole keyspace (set admin.token_file)"
            ));
        }
        warnings
    }
}

#[cfg(test)]
mod devicebound_tests;

#[cfg(test)]
mod mqtt_tls_tests;

#[cfg(test)]
mod security_tests;

#[cfg(test)]
mod peers_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_match_the_spec_limits() {
        let config = Config::default();
        config.validate().expect("defaults validate");
        assert_eq!(config.limits.max_key_bytes, 64 * 1024);
        assert_eq!(config.limits.max_value_bytes, 4 << 20);
        assert_eq!(config.limits.max_array_len, 8);
        assert_eq!(config.limits.max_keys, 1_000_000);
        assert_eq!(config.limits.max_bytes, 1 << 30);
        assert_eq!(config.limits.max_registrations_per_client, 1_000);
        assert_eq!(config.limits.max_registrations, 1_000_000);
        assert_eq!(config.limits.max_observers_per_key, 1_000);
        assert_eq!(config.limits.bulk_egress_mb_per_sec, 8);
        assert_eq!(config.limits.bulk_egress_messages_per_sec, 20_000);
        assert_eq!(config.limits.max_remembered_replies, 1_000_000);
        assert_eq!(config.limits.max_remembered_reply_bytes, 256 << 20);
        assert_eq!(
            config.quota(),
            Limits::default(),
            "the replicated caps are the storage defaults"
        );
        assert_eq!(config.limits.max_px_ms, 30 * 24 * 3600 * 1000);
        assert_eq!(
            config.initial_members().expect("members"),
            BTreeMap::from([(1, "127.0.0.1:7481".to_owned())])
        );
    }

    #[test]
    fn toml_file_overrides_defaults_and_rejects_unknown_keys() {
        let config: Config = toml::from_str(
            r#"
            id = 2
            data_dir = "/tmp/x"
            [mqtt]
            broker = "broker:1884"
            [cluster.peers]
            1 = "10.0.0.1:7481"
            2 = "10.0.0.2:7481"
            [limits]
            max_keys = 10
            max_registrations = 20
            max_observers_per_key = 25
            max_remembered_replies = 30
            max_remembered_reply_bytes = 40
            "#,
        )
        .expect("parses");
        assert_eq!(config.id, 2);
        assert_eq!(config.mqtt.broker, "broker:1884");
        assert_eq!(config.limits.max_keys, 10);
        let quota = config.quota();
        assert_eq!(
            (
                quota.max_registrations,
                u64::from(quota.max_observers_per_key),
                quota.max_remembered_replies,
                quota.max_remembered_reply_bytes
            ),
            (20, 25, 30, 40),
            "the caps reach the replicated limits"
        );
        assert_eq!(
            config.limits.max_key_bytes,
            64 * 1024,
            "unset keys keep defaults"
        );
        assert_eq!(config.initial_members().expect("members").len(), 2);
        assert!(toml::from_str::<Config>("idd = 2").is_err());
    }

    #[test]
    fn invalid_settings_are_refused_with_a_message() {
        let bad: Vec<(&str, Config)> = vec![
            (
                "id 0",
                Config {
                    id: 0,
                    ..Config::default()
                },
            ),
            (
                "name with ':'",
                Config {
                    name: Some("a:b".into()),
                    ..Config::default()
                },
            ),
            (
                "election below heartbeat",
                Config {
                    cluster: ClusterConfig {
                        heartbeat_ms: 500,
                        election_timeout_min_ms: 400,
                        ..ClusterConfig::default()
                    },
                    ..Config::default()
                },
            ),
            (
                "peers without this node",
                Config {
                    cluster: ClusterConfig {
                        peers: BTreeMap::from([("2".into(), "x:1".into())]),
                        ..ClusterConfig::default()
                    },
                    ..Config::default()
                },
            ),
            (
                "no reply memory",
                Config {
                    limits: LimitsConfig {
                        max_remembered_replies: 0,
                        ..LimitsConfig::default()
                    },
                    ..Config::default()
                },
            ),
            (
                "no bytes for the reply memory",
                Config {
                    limits: LimitsConfig {
                        max_remembered_reply_bytes: 0,
                        ..LimitsConfig::default()
                    },
                    ..Config::default()
                },
            ),
            (
                "no observers per key",
                Config {
                    limits: LimitsConfig {
                        max_observers_per_key: 0,
                        ..LimitsConfig::default()
                    },
                    ..Config::default()
                },
            ),
            (
                "observers per key above a million",
                Config {
                    limits: LimitsConfig {
                        max_observers_per_key: 1_000_001,
                        ..LimitsConfig::default()
                    },
                    ..Config::default()
                },
            ),
            (
                "a bulk lane paced at zero bytes",
                Config {
                    limits: LimitsConfig {
                        bulk_egress_mb_per_sec: 0,
                        ..LimitsConfig::default()
                    },
                    ..Config::default()
                },
            ),
            (
                "a bulk lane paced at zero messages",
                Config {
                    limits: LimitsConfig {
                        bulk_egress_messages_per_sec: 0,
                        ..LimitsConfig::default()
                    },
                    ..Config::default()
                },
            ),
            (
                "array too short for SET NX PX",
                Config {
                    limits: LimitsConfig {
                        max_array_len: 4,
                        ..LimitsConfig::default()
                    },
                    ..Config::default()
                },
            ),
            (
                "trace sample ratio above 1",
                Config {
                    telemetry: TelemetryConfig {
                        trace_sample_ratio: 1.5,
                        ..TelemetryConfig::default()
                    },
                    ..Config::default()
                },
            ),
            (
                "negative trace sample ratio",
                Config {
                    telemetry: TelemetryConfig {
                        trace_sample_ratio: -0.1,
                        ..TelemetryConfig::default()
                    },
                    ..Config::default()
                },
            ),
        ];
        for (name, config) in bad {
            assert!(config.validate().is_err(), "{name} must be refused");
        }
    }
}
