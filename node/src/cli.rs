//! The `statestore` command line: `run` starts a node (TOML file plus flags), `cluster`
//! talks to a running node's admin API.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::{Config, DeviceboundConfig, HttpTlsConfig, MqttTlsConfig, PeerTlsConfig};
use crate::error::NodeError;

/// statestore: a replicated, persistent key-value store served over MQTT 5 request/response
/// (the Azure IoT Operations state store protocol).
#[derive(Debug, Parser)]
#[command(name = "statestore", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: CliCommand,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum CliCommand {
    /// Run a node until SIGTERM or Ctrl-C.
    Run(Box<RunArgs>),
    /// Inspect or change cluster membership through a node's admin API.
    Cluster(ClusterArgs),
    /// A client of the state store over MQTT 5: get, set, del, vdel, watch.
    Kv(Box<crate::kv::KvArgs>),
}

/// `statestore run`: every flag overrides the same setting of the config file.
#[derive(Debug, Default, Args)]
pub struct RunArgs {
    /// TOML config file (see README "Configuration").
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Raft node id (unique in the cluster, >= 1).
    #[arg(long, value_name = "U64")]
    pub id: Option<u64>,
    /// Node name used in versions (default statestore-<id>).
    #[arg(long)]
    pub name: Option<String>,
    /// Data directory (database and snapshots).
    #[arg(long, value_name = "PATH")]
    pub data_dir: Option<PathBuf>,
    /// MQTT broker: host:port, mqtt://host[:port] or mqtts://host[:port] (TLS).
    #[arg(long, value_name = "HOST:PORT")]
    pub broker: Option<String>,
    /// MQTT client id of this node (default statestore-node-<id>).
    #[arg(long)]
    pub mqtt_client_id: Option<String>,
    /// MQTT username.
    #[arg(long)]
    pub mqtt_username: Option<String>,
    /// File whose first line is the MQTT password (or set STATESTORE_MQTT_PASSWORD).
    #[arg(long, value_name = "FILE")]
    pub mqtt_password_file: Option<PathBuf>,
    /// Reply topic prefix: requests are answered only under these (repeat for each; default
    /// clients/). The store's own topics stay refused whatever they say.
    #[arg(long = "reply-topic-prefix", value_name = "PREFIX")]
    pub reply_topic_prefixes: Vec<String>,
    /// HTTP listener: /metrics, /livez, /readyz and the admin API.
    #[arg(long, value_name = "ADDR:PORT")]
    pub http: Option<SocketAddr>,
    /// Raft peer listener.
    #[arg(long, value_name = "ADDR:PORT")]
    pub raft: Option<SocketAddr>,
    /// Raft address peers use for this node (default: --raft).
    #[arg(long, value_name = "HOST:PORT")]
    pub advertise: Option<String>,
    /// Initial cluster member `id=host:port` (repeat for each member, this node included).
    /// With --join: the existing members, whose peer certificates this node then accepts
    /// before the cluster has reached it.
    #[arg(long = "peer", value_name = "ID=HOST:PORT")]
    pub peers: Vec<String>,
    /// Do not bootstrap: wait to be added to an existing cluster (`statestore cluster add-node`).
    #[arg(long)]
    pub join: bool,
    /// Leader heartbeat interval, ms.
    #[arg(long, value_name = "MS")]
    pub heartbeat_ms: Option<u64>,
    /// Election timeout lower bound, ms.
    #[arg(long, value_name = "MS")]
    pub election_timeout_min_ms: Option<u64>,
    /// Election timeout upper bound, ms.
    #[arg(long, value_name = "MS")]
    pub election_timeout_max_ms: Option<u64>,
    /// Build a snapshot once this many proposals were applied since the last one.
    #[arg(long, value_name = "N")]
    pub snapshot_after_proposals: Option<u64>,
    /// ... or once this many log entries were (an entry is a batch of writes).
    #[arg(long, value_name = "N")]
    pub snapshot_after_entries: Option<u64>,
    /// How long the leader waits for a follower's replication acknowledgement, ms.
    #[arg(long, value_name = "MS")]
    pub replication_timeout_ms: Option<u64>,
    /// Log entries kept behind a snapshot (for followers only slightly behind).
    #[arg(long, value_name = "N")]
    pub entries_kept_after_snapshot: Option<u64>,
    /// Longest key in bytes (§9, default 1024).
    #[arg(long, value_name = "BYTES")]
    pub max_key_bytes: Option<usize>,
    /// Longest value in bytes (§9, default 4 MiB).
    #[arg(long, value_name = "BYTES")]
    pub max_value_bytes: Option<usize>,
    /// Most elements in a request array (§9, default 8).
    #[arg(long, value_name = "N")]
    pub max_array_len: Option<usize>,
    /// Keys stored (§9, default 1,000,000).
    #[arg(long, value_name = "N")]
    pub max_keys: Option<u64>,
    /// Key+value bytes stored (§9, default 1 GiB).
    #[arg(long, value_name = "BYTES")]
    pub max_bytes: Option<u64>,
    /// KEYNOTIFY registrations per client (§9, default 1000).
    #[arg(long, value_name = "N")]
    pub max_registrations_per_client: Option<u32>,
    /// KEYNOTIFY registrations of all clients together (default 1,000,000).
    #[arg(long, value_name = "N")]
    pub max_registrations: Option<u64>,
    /// KEYNOTIFY registrations of one key, all clients together (default 1000, 1–1,000,000).
    #[arg(long, value_name = "N")]
    pub max_observers_per_key: Option<u32>,
    /// Pace of the bulk lane (notifications, device deliveries, feedback, replies over 16 KiB),
    /// MiB a second of payload and topic (default 8).
    #[arg(long, value_name = "MIB")]
    pub bulk_egress_mb_per_sec: Option<u64>,
    /// Pace of the bulk lane, messages a second (default 20,000).
    #[arg(long, value_name = "N")]
    pub bulk_egress_messages_per_sec: Option<u64>,
    /// Replies remembered for retries (§6, default 1,000,000); over it the earliest-expiring
    /// are evicted.
    #[arg(long, value_name = "N")]
    pub max_remembered_replies: Option<u64>,
    /// Bytes of remembered replies (default 256 MiB); over it the earliest-expiring are evicted.
    #[arg(long, value_name = "BYTES")]
    pub max_remembered_reply_bytes: Option<u64>,
    /// Expiry sweep interval, ms.
    #[arg(long, value_name = "MS")]
    pub sweep_interval_ms: Option<u64>,
    /// sled cache size, MiB.
    #[arg(long, value_name = "MIB")]
    pub cache_capacity_mb: Option<u64>,
    /// Log filter, e.g. `info` or `statestore_node=debug`.
    #[arg(long, value_name = "FILTER")]
    pub log: Option<String>,
    /// Log lines as text (default) or one JSON object per line.
    #[arg(long, value_name = "FORMAT")]
    pub log_format: Option<crate::config::LogFormat>,
    /// OTLP/gRPC endpoint for traces, e.g. http://127.0.0.1:4317.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// Fraction of requests traced when an OTLP endpoint is set, 0.0–1.0 (default 0.01).
    #[arg(long, value_name = "RATIO")]
    pub trace_sample_ratio: Option<f64>,
    /// TLS to the broker (`[mqtt.tls]`).
    #[command(flatten)]
    pub mqtt_tls: MqttTlsArgs,
    /// Device-bound message queues (`[devicebound]`).
    #[command(flatten)]
    pub devicebound: DeviceboundArgs,
    /// Peer TLS, HTTPS and the admin token (`[cluster.tls]`, `[admin]`).
    #[command(flatten)]
    pub security: SecurityArgs,
}

/// The `[mqtt.tls]` settings as flags; checked with the file's values.
#[derive(Debug, Default, Args)]
pub struct MqttTlsArgs {
    /// Connect to the broker with TLS (also on with an mqtts:// --broker or any --mqtt-tls-* file or name).
    #[arg(long = "mqtt-tls")]
    pub enabled: bool,
    /// CA certificates (PEM) the broker's certificate must chain to (default: the system's).
    #[arg(long = "mqtt-tls-ca-file", value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// Client certificate chain (PEM) for X.509 authentication; needs --mqtt-tls-key-file.
    #[arg(long = "mqtt-tls-cert-file", value_name = "FILE")]
    pub cert_file: Option<PathBuf>,
    /// Private key (PEM) of --mqtt-tls-cert-file.
    #[arg(long = "mqtt-tls-key-file", value_name = "FILE")]
    pub key_file: Option<PathBuf>,
    /// Name the broker's certificate must be valid for, also sent as SNI (default: the broker host).
    #[arg(long = "mqtt-tls-server-name", value_name = "NAME")]
    pub server_name: Option<String>,
    /// How often the TLS files are checked for changes, ms (0: never; default 5000).
    #[arg(long = "mqtt-tls-reload-interval-ms", value_name = "MS")]
    pub reload_interval_ms: Option<u64>,
}

impl MqttTlsArgs {
    /// Overrides the settings given as flags.
    fn apply(self, config: &mut MqttTlsConfig) {
        if self.enabled {
            config.enabled = true;
        }
        for (setting, flag) in [
            (&mut config.ca_file, self.ca_file),
            (&mut config.cert_file, self.cert_file),
            (&mut config.key_file, self.key_file),
        ] {
            if flag.is_some() {
                *setting = flag;
            }
        }
        if self.server_name.is_some() {
            config.server_name = self.server_name;
        }
        if let Some(interval) = self.reload_interval_ms {
            config.reload_interval_ms = interval;
        }
    }
}

/// The `[devicebound]` settings as flags (devicebound.md §5); ranges are
/// checked with the file's values.
#[derive(Debug, Default, Args)]
pub struct DeviceboundArgs {
    /// Messages a device's queue holds (1-5000, default 50).
    #[arg(long = "devicebound-max-queue-depth", value_name = "N")]
    pub max_queue_depth: Option<u64>,
    /// Largest SEND body in bytes (1-262144, default 65536).
    #[arg(long = "devicebound-max-message-bytes", value_name = "BYTES")]
    pub max_message_bytes: Option<u64>,
    /// Expiry of a message sent without TTL or EXPIRES, ms (60000-172800000, default 1 h).
    #[arg(long = "devicebound-default-ttl-ms", value_name = "MS")]
    pub default_ttl_ms: Option<u64>,
    /// Deliveries before a message is dead-lettered (1-100, default 10).
    #[arg(long = "devicebound-max-delivery-count", value_name = "N")]
    pub max_delivery_count: Option<u64>,
    /// Lock of a delivered message, ms (5000-300000, default 60000).
    #[arg(long = "devicebound-lock-duration-ms", value_name = "MS")]
    pub lock_duration_ms: Option<u64>,
    /// Messages of one device locked at a time (1-32, default 1: strict FIFO).
    #[arg(long = "devicebound-device-window", value_name = "N")]
    pub device_window: Option<u64>,
    /// Expiry of a feedback batch, ms (60000-172800000, default 1 h).
    #[arg(long = "devicebound-feedback-ttl-ms", value_name = "MS")]
    pub feedback_ttl_ms: Option<u64>,
    /// Deliveries of a feedback batch before it is dropped (1-100, default 10).
    #[arg(long = "devicebound-feedback-max-delivery-count", value_name = "N")]
    pub feedback_max_delivery_count: Option<u64>,
    /// Lock of a published feedback batch, ms (5000-300000, default 60000).
    #[arg(long = "devicebound-feedback-lock-duration-ms", value_name = "MS")]
    pub feedback_lock_duration_ms: Option<u64>,
    /// Dead letters kept per device (1-1000, default 100).
    #[arg(long = "devicebound-max-dead-letters-per-device", value_name = "N")]
    pub max_dead_letters_per_device: Option<u64>,
    /// Devices with state, all together (1-10000000, default 1000000).
    #[arg(long = "devicebound-max-devices", value_name = "N")]
    pub max_devices: Option<u64>,
    /// Messages queued, all devices together (1-100000000, default 1000000).
    #[arg(long = "devicebound-max-messages", value_name = "N")]
    pub max_messages: Option<u64>,
}

impl DeviceboundArgs {
    /// Overrides the settings given as flags.
    fn apply(self, config: &mut DeviceboundConfig) {
        let flags = [
            (&mut config.max_queue_depth, self.max_queue_depth),
            (&mut config.max_message_bytes, self.max_message_bytes),
            (&mut config.default_ttl_ms, self.default_ttl_ms),
            (&mut config.max_delivery_count, self.max_delivery_count),
            (&mut config.lock_duration_ms, self.lock_duration_ms),
            (&mut config.device_window, self.device_window),
            (&mut config.feedback_ttl_ms, self.feedback_ttl_ms),
            (
                &mut config.feedback_max_delivery_count,
                self.feedback_max_delivery_count,
            ),
            (
                &mut config.feedback_lock_duration_ms,
                self.feedback_lock_duration_ms,
            ),
            (
                &mut config.max_dead_letters_per_device,
                self.max_dead_letters_per_device,
            ),
            (&mut config.max_devices, self.max_devices),
            (&mut config.max_messages, self.max_messages),
        ];
        for (setting, flag) in flags {
            if let Some(value) = flag {
                *setting = value;
            }
        }
    }
}

/// The `[cluster.tls]` and `[admin]` settings as flags (README "Security"). The three
/// `--peer-tls-*` flags go together, as do the two `--http-tls-*`; a flag replaces the file's
/// whole section.
#[derive(Debug, Default, Args)]
pub struct SecurityArgs {
    /// CA certificates (PEM) every peer's certificate must chain to; turns on mutual TLS
    /// between peers (with --peer-tls-cert and --peer-tls-key).
    #[arg(long, value_name = "FILE")]
    pub peer_tls_ca: Option<PathBuf>,
    /// This node's peer certificate (PEM), valid for the host of its advertised Raft address.
    #[arg(long, value_name = "FILE")]
    pub peer_tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --peer-tls-cert.
    #[arg(long, value_name = "FILE")]
    pub peer_tls_key: Option<PathBuf>,
    /// Certificate (PEM) of the HTTP listener: serve /metrics, health and the admin API over
    /// HTTPS (with --http-tls-key).
    #[arg(long, value_name = "FILE")]
    pub http_tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --http-tls-cert.
    #[arg(long, value_name = "FILE")]
    pub http_tls_key: Option<PathBuf>,
    /// File whose first line is the bearer token POST /admin/members and GET /admin/digest
    /// require.
    #[arg(long, value_name = "FILE")]
    pub admin_token_file: Option<PathBuf>,
    /// Start even though --http is not on loopback and there is no --admin-token-file (the
    /// membership endpoint is then open to whoever reaches it).
    #[arg(long)]
    pub allow_insecure_http: bool,
}

impl SecurityArgs {
    /// Overrides the sections given as flags; a partial set of TLS flags is an error.
    fn apply(self, config: &mut Config) -> Result<(), NodeError> {
        match (self.peer_tls_ca, self.peer_tls_cert, self.peer_tls_key) {
            (None, None, None) => {}
            (Some(ca_file), Some(cert_file), Some(key_file)) => {
                config.cluster.tls = Some(PeerTlsConfig {
                    ca_file,
                    cert_file,
                    key_file,
                });
            }
            _ => {
                return Err(NodeError::Config(
                    "--peer-tls-ca, --peer-tls-cert and --peer-tls-key go together".into(),
                ));
            }
        }
        match (self.http_tls_cert, self.http_tls_key) {
            (None, None) => {}
            (Some(cert_file), Some(key_file)) => {
                config.admin.tls = Some(HttpTlsConfig {
                    cert_file,
                    key_file,
                });
            }
            _ => {
                return Err(NodeError::Config(
                    "--http-tls-cert and --http-tls-key go together".into(),
                ));
            }
        }
        if self.admin_token_file.is_some() {
            config.admin.token_file = self.admin_token_file;
        }
        if self.allow_insecure_http {
            config.admin.allow_insecure_http = true;
        }
        Ok(())
    }
}

/// `statestore cluster ...`
#[derive(Debug, Args)]
pub struct ClusterArgs {
    /// Admin endpoint of any node (its --http address; https://... when it serves HTTPS).
    #[arg(long, default_value = "http://127.0.0.1:7480", global = true)]
    pub endpoint: String,
    /// CA certificates (PEM) an https:// endpoint's certificate must chain to (default: the
    /// system's CA bundle).
    #[arg(long, value_name = "FILE", global = true)]
    pub ca: Option<PathBuf>,
    /// File whose first line is the admin bearer token (nodes with admin.token_file require it
    /// for add-node and remove-node).
    #[arg(
        long,
        value_name = "FILE",
        env = "STATESTORE_ADMIN_TOKEN_FILE",
        global = true
    )]
    pub token_file: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub action: ClusterAction,
}

/// Cluster actions.
#[derive(Debug, Subcommand)]
pub enum ClusterAction {
    /// Members, leader, term, log indexes.
    Status,
    /// Add a node (started with --id, --raft and an empty data dir) as a voter.
    AddNode {
        /// New node id.
        #[arg(long)]
        id: u64,
        /// Its Raft address.
        #[arg(long)]
        raft: String,
    },
    /// Remove a node from the cluster.
    RemoveNode {
        /// Node id to remove.
        #[arg(long)]
        id: u64,
    },
}

impl RunArgs {
    /// Defaults, then the file, then the flags.
    pub fn into_config(self) -> Result<Config, NodeError> {
        let mut config = match &self.config {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        fn set<T>(target: &mut T, value: Option<T>) {
            if let Some(value) = value {
                *target = value;
            }
        }
        set(&mut config.id, self.id);
        if self.name.is_some() {
            config.name = self.name;
        }
        set(&mut config.data_dir, self.data_dir);
        set(&mut config.mqtt.broker, self.broker);
        if self.mqtt_client_id.is_some() {
            config.mqtt.client_id = self.mqtt_client_id;
        }
        if self.mqtt_username.is_some() {
            config.mqtt.username = self.mqtt_username;
        }
        if self.mqtt_password_file.is_some() {
            config.mqtt.password_file = self.mqtt_password_file;
        }
        if !self.reply_topic_prefixes.is_empty() {
            config.mqtt.reply_topic_prefixes = self.reply_topic_prefixes;
        }
        set(&mut config.listen.http, self.http);
        set(&mut config.listen.raft, self.raft);
        if self.advertise.is_some() {
            config.cluster.advertise = self.advertise;
        }
        if !self.peers.is_empty() {
            config.cluster.peers.clear();
            for peer in &self.peers {
                let (id, addr) = peer.split_once('=').ok_or_else(|| {
                    NodeError::Config(format!("--peer {peer:?}: expected ID=HOST:PORT"))
                })?;
                config
                    .cluster
                    .peers
                    .insert(id.trim().to_owned(), addr.trim().to_owned());
            }
        }
        if self.join {
            config.cluster.join = true;
        }
        set(&mut config.cluster.heartbeat_ms, self.heartbeat_ms);
        set(
            &mut config.cluster.election_timeout_min_ms,
            self.election_timeout_min_ms,
        );
        set(
            &mut config.cluster.election_timeout_max_ms,
            self.election_timeout_max_ms,
        );
        set(
            &mut config.cluster.snapshot_after_proposals,
            self.snapshot_after_proposals,
        );
        set(
            &mut config.cluster.snapshot_after_entries,
            self.snapshot_after_entries,
        );
        set(
            &mut config.cluster.replication_timeout_ms,
            self.replication_timeout_ms,
        );
        set(
            &mut config.cluster.entries_kept_after_snapshot,
            self.entries_kept_after_snapshot,
        );
        set(&mut config.limits.max_key_bytes, self.max_key_bytes);
        set(&mut config.limits.max_value_bytes, self.max_value_bytes);
        set(&mut config.limits.max_array_len, self.max_array_len);
        set(&mut config.limits.max_keys, self.max_keys);
        set(&mut config.limits.max_bytes, self.max_bytes);
        set(
            &mut config.limits.max_registrations_per_client,
            self.max_registrations_per_client,
        );
        set(&mut config.limits.max_registrations, self.max_registrations);
        set(
            &mut config.limits.max_observers_per_key,
            self.max_observers_per_key,
        );
        set(
            &mut config.limits.bulk_egress_mb_per_sec,
            self.bulk_egress_mb_per_sec,
        );
        set(
            &mut config.limits.bulk_egress_messages_per_sec,
            self.bulk_egress_messages_per_sec,
        );
        set(
            &mut config.limits.max_remembered_replies,
            self.max_remembered_replies,
        );
        set(
            &mut config.limits.max_remembered_reply_bytes,
            self.max_remembered_reply_bytes,
        );
        set(&mut config.expiry.sweep_interval_ms, self.sweep_interval_ms);
        set(
            &mut config.storage.cache_capacity_mb,
            self.cache_capacity_mb,
        );
        set(&mut config.telemetry.log, self.log);
        set(&mut config.telemetry.log_format, self.log_format);
        set(
            &mut config.telemetry.trace_sample_ratio,
            self.trace_sample_ratio,
        );
        if self.otlp_endpoint.is_some() {
            config.telemetry.otlp_endpoint = self.otlp_endpoint;
        }
        self.mqtt_tls.apply(&mut config.mqtt.tls);
        self.devicebound.apply(&mut config.devicebound);
        self.security.apply(&mut config)?;
        config.validate()?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("node.toml");
        std::fs::write(
            &path,
            "id = 3\n[mqtt]\nbroker = \"a:1\"\n[limits]\nmax_keys = 5\n",
        )
        .expect("write");
        let cli = Cli::try_parse_from([
            "statestore",
            "run",
            "--config",
            path.to_str().expect("utf8"),
            "--broker",
            "b:2",
            "--peer",
            "3=127.0.0.1:1",
            "--peer",
            "4=127.0.0.1:2",
            "--max-registrations",
            "7",
            "--max-observers-per-key",
            "6",
            "--max-remembered-replies",
            "8",
            "--max-remembered-reply-bytes",
            "9",
        ])
        .expect("parses");
        let CliCommand::Run(args) = cli.command else {
            panic!("run expected")
        };
        let config = args.into_config().expect("valid");
        assert_eq!(config.id, 3, "from the file");
        assert_eq!(config.mqtt.broker, "b:2", "flag wins");
        assert_eq!(config.limits.max_keys, 5);
        let quota = config.quota();
        assert_eq!(
            (
                quota.max_registrations,
                u64::from(quota.max_observers_per_key),
                quota.max_remembered_replies,
                quota.max_remembered_reply_bytes
            ),
            (7, 6, 8, 9)
        );
        assert_eq!(config.initial_members().expect("members").len(), 2);
    }

    #[test]
    fn security_flags_set_their_sections_and_go_in_sets() {
        let dir = tempfile::tempdir().expect("tempdir");
        let token = dir.path().join("token");
        std::fs::write(&token, "0123456789abcdef0123\n").expect("write");
        let parse = |flags: &[&str]| {
            let mut argv = vec!["statestore", "run"];
            argv.extend(flags);
            let CliCommand::Run(args) = Cli::try_parse_from(argv).expect("parses").command else {
                panic!("run expected")
            };
            args.into_config()
        };
        let config = parse(&["--admin-token-file", token.to_str().expect("utf8")]).expect("valid");
        assert_eq!(config.admin.token_file.as_deref(), Some(token.as_path()));
        // Off loopback without a token: refused unless said explicitly.
        let open = parse(&["--http", "0.0.0.0:7480"]).expect_err("no token off loopback");
        assert!(
            open.to_string().contains("admin.token_file")
                && open.to_string().contains("--allow-insecure-http"),
            "{open}"
        );
        let config = parse(&["--http", "0.0.0.0:7480", "--allow-insecure-http"]).expect("allowed");
        assert!(config.admin.allow_insecure_http);
        parse(&[
            "--http",
            "0.0.0.0:7480",
            "--admin-token-file",
            token.to_str().expect("utf8"),
        ])
        .expect("a token is enough");
        assert_eq!(config.cluster.tls, None, "peer TLS stays off");
        let partial = parse(&["--peer-tls-ca", "/ca.pem", "--peer-tls-cert", "/node.pem"])
            .expect_err("no key");
        assert!(partial.to_string().contains("go together"), "{partial}");
        let partial = parse(&["--http-tls-key", "/http.key"]).expect_err("no cert");
        assert!(partial.to_string().contains("go together"), "{partial}");
        // A whole set is taken, and then its files must load.
        let missing = parse(&[
            "--peer-tls-ca",
            "/nonexistent/ca.pem",
            "--peer-tls-cert",
            "/nonexistent/node.pem",
            "--peer-tls-key",
            "/nonexistent/node.key",
        ])
        .expect_err("files missing");
        assert!(missing.to_string().contains("cluster.tls"), "{missing}");
    }

    #[test]
    fn reply_topic_prefix_flags_replace_the_default_and_are_validated() {
        let parse = |flags: &[&str]| {
            let mut argv = vec!["statestore", "run"];
            argv.extend(flags);
            let CliCommand::Run(args) = Cli::try_parse_from(argv).expect("parses").command else {
                panic!("run expected")
            };
            args.into_config()
        };
        assert_eq!(
            parse(&[]).expect("valid").mqtt.reply_topic_prefixes,
            vec!["clients/".to_owned()]
        );
        let config = parse(&[
            "--reply-topic-prefix",
            "clients/",
            "--reply-topic-prefix",
            "replies/",
        ])
        .expect("valid");
        assert_eq!(
            config.mqtt.reply_topic_prefixes,
            vec!["clients/".to_owned(), "replies/".to_owned()]
        );
        assert!(config.service().reply_topics.allows("replies/a"));
        for bad in ["", "clients/#", "+/x"] {
            let err = parse(&["--reply-topic-prefix", bad]).expect_err("refused");
            assert!(
                err.to_string().contains("mqtt.reply_topic_prefixes"),
                "{bad:?}: {err}"
            );
        }
    }

    #[test]
    fn bad_peer_flag_is_an_error() {
        let args = RunArgs {
            peers: vec!["nonsense".into()],
            ..RunArgs::default()
        };
        assert!(args.into_config().is_err());
    }
}
