//! Node configuration: one [`Config`] from the settings table's defaults, an optional TOML
//! file and command-line flags (flags win over the file, the file over defaults), checked
//! against the table's ranges and the rules between settings.
//!
//! Every scalar setting is one row of [`table::SETTINGS`]: its default, flag, range and help
//! live there only. This module knows the settings' shape and meaning; it imports nothing of
//! the subsystems that use them (`runtime_config` turns a `Config` into their settings).

pub mod docs;
pub mod flags;
mod load;
pub mod setting;
pub mod table;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use statestore_raft::{InboundLimits, PeerTimeouts, RaftConfig};
use statestore_storage::keyspace::Limits;
use statestore_vocab::hlc::Hlc;

use crate::error::NodeError;
use table::SETTINGS;

/// Everything a node needs to start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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
    /// Who asks (the broker-vouched identity) and what they may do (the policy file).
    pub auth: AuthConfig,
    /// How long shutdown waits for in-flight requests, ms.
    pub shutdown_grace_ms: u64,
}

/// Listener addresses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenConfig {
    /// HTTP: `/metrics`, `/livez`, `/readyz`, admin API.
    pub http: SocketAddr,
    /// Raft peer listener.
    pub raft: SocketAddr,
}

/// Membership and consensus timing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// Address peers use to reach this node's Raft listener; default: `listen.raft`.
    pub advertise: Option<String>,
    /// Initial members `id -> raft address` (this node included) for a new cluster. Empty:
    /// a single-node cluster of this node.
    #[serde(default)]
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
    /// ... and not before the log since the last one holds this percentage of the state's
    /// bytes (0: no such condition).
    pub snapshot_after_state_percent: u64,
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
#[serde(deny_unknown_fields)]
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
#[serde(deny_unknown_fields)]
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
    pub fn asked(&self) -> bool {
        self.enabled
            || self.ca_file.is_some()
            || self.cert_file.is_some()
            || self.key_file.is_some()
            || self.server_name.is_some()
    }
}

/// Limits of protocol §9.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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
#[serde(deny_unknown_fields)]
pub struct ExpiryConfig {
    /// Time between sweeps, ms.
    pub sweep_interval_ms: u64,
    /// Keys removed per proposal.
    pub batch_size: usize,
}

/// Reply memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DedupConfig {
    /// Window when a request has no Message Expiry, ms.
    pub default_window_ms: u64,
    /// Longest window whatever the Message Expiry says, ms.
    pub max_window_ms: u64,
}

/// Storage engine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageConfig {
    /// State database (fjall) block cache, MiB.
    pub cache_capacity_mb: u64,
}

/// Logs and traces.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One line of text per event (coloured only on a terminal).
    #[default]
    Text,
    /// One JSON object per line (timestamp, level, target, fields, the current span and its
    /// parents), for log pipelines such as Loki or Elasticsearch.
    Json,
}

/// Device-bound message queues (devicebound.md §5). Every setting has a range (the settings
/// table); a value outside it stops the node at start with a message naming the setting and
/// the range.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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

/// The longest `auth.vouched_property`: the plugin's limit on `plugin_opt_property`.
pub const MAX_VOUCHED_PROPERTY_BYTES: usize = 256;

/// Requesters' identity and key-level authorization (README "Authorization").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// Where a state store request's identity comes from.
    pub identity: IdentitySource,
    /// The user property the broker plugin writes the identity into.
    pub vouched_property: String,
    /// The policy file (TOML rules); absent: every identity may do everything.
    pub policy_file: Option<PathBuf>,
    /// How often the policy file is checked for changes, ms; 0: never.
    pub policy_reload_interval_ms: u64,
}

/// Where a state store request's identity comes from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IdentitySource {
    /// What the client claims: `__srcId`, else its `clients/<id>/` response topic.
    #[default]
    Claimed,
    /// What the broker vouches for in `auth.vouched_property` (the statestore Mosquitto
    /// plugin); a request without it gets no reply.
    Broker,
}

pub(crate) fn invalid(message: impl Into<String>) -> NodeError {
    NodeError::Config(message.into())
}

/// True for an address reachable from other hosts.
pub(crate) fn exposed(addr: &SocketAddr) -> bool {
    !addr.ip().is_loopback()
}

impl Config {
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

    /// Checks every setting that needs nothing but the configuration: each row's range and
    /// the rules between settings. `Config::validate` (`runtime_config`) adds what needs the
    /// subsystems (reply topics, the broker address, TLS files, the admin token).
    pub fn check_settings(&self) -> Result<(), NodeError> {
        let tree = toml::Table::try_from(self)
            .map_err(|e| invalid(format!("settings cannot be written as TOML: {e}")))?;
        setting::check_ranges(SETTINGS, &tree)?;
        if !Hlc::valid_node_id(&self.node_name()) {
            return Err(invalid("name must be non-empty and must not contain ':'"));
        }
        if self.mqtt_client_id().is_empty() {
            return Err(invalid("mqtt.client_id must not be empty"));
        }
        let property = &self.auth.vouched_property;
        if property.is_empty() || property.len() > MAX_VOUCHED_PROPERTY_BYTES {
            return Err(invalid(format!(
                "auth.vouched_property must be 1 to {MAX_VOUCHED_PROPERTY_BYTES} bytes (the \
                 plugin's plugin_opt_property)"
            )));
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
        if c.replication_timeout_ms < c.heartbeat_ms {
            return Err(invalid(
                "cluster.replication_timeout_ms must be at least heartbeat_ms",
            ));
        }
        if self.dedup.default_window_ms > self.dedup.max_window_ms {
            return Err(invalid(
                "dedup.default_window_ms must not exceed dedup.max_window_ms",
            ));
        }
        if self.mqtt.reply_topic_prefixes.is_empty() {
            return Err(invalid(
                "mqtt.reply_topic_prefixes must name at least one prefix (no request could be answered)",
            ));
        }
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
            snapshot_after_state_percent: c.snapshot_after_state_percent,
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

    /// Bytes of requests a node holds at once.
    pub fn request_budget_bytes(&self) -> usize {
        usize::try_from(self.limits.request_budget_mb.saturating_mul(1 << 20)).unwrap_or(usize::MAX)
    }

    /// Bytes of publishes a node holds until the broker acknowledges them.
    pub fn outbound_budget_bytes(&self) -> usize {
        usize::try_from(self.limits.outbound_budget_mb.saturating_mul(1 << 20))
            .unwrap_or(usize::MAX)
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
mod tests;
