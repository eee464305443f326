//! The `statestore` command line: `run` starts a node (TOML file plus flags), `cluster`
//! talks to a running node's admin API. The flags of `run` that set one setting each are
//! generated from the settings table ([`SettingFlags`]); this file holds the rest.

use std::io::{Read, Write};
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::flags::SettingFlags;
use crate::config::{Config, HttpTlsConfig, PeerTlsConfig, docs, setting, table};
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
    /// Check a policy file (`auth.policy_file`) as a node would load it.
    Policy(PolicyArgs),
    /// The documentation generated from the settings table (`scripts/check-settings`).
    #[command(hide = true)]
    Settings(SettingsArgs),
}

/// `statestore run`: every flag overrides the same setting of the config file.
#[derive(Debug, Default, Args)]
pub struct RunArgs {
    /// TOML config file (see README "Configuration").
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Reply topic prefix: requests are answered only under these (repeat for each; default
    /// clients/). The store's own topics stay refused whatever they say.
    #[arg(long = "reply-topic-prefix", value_name = "PREFIX")]
    pub reply_topic_prefixes: Vec<String>,
    /// Initial cluster member `id=host:port` (repeat for each member, this node included).
    /// With --join: the existing members, whose peer certificates this node then accepts
    /// before the cluster has reached it.
    #[arg(long = "peer", value_name = "ID=HOST:PORT")]
    pub peers: Vec<String>,
    /// One flag per setting of the settings table.
    #[command(flatten)]
    pub settings: SettingFlags,
    /// Peer TLS and HTTPS (`[cluster.tls]`, `[admin.tls]`).
    #[command(flatten)]
    pub security: SecurityArgs,
}

/// The `[cluster.tls]` and `[admin.tls]` file sets as flags (README "Security"). The three
/// `--peer-tls-*` flags go together, as do the two `--http-tls-*`; a set replaces the file's
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

/// `statestore policy check FILE`.
#[derive(Debug, Args)]
pub struct PolicyArgs {
    /// What to do.
    #[command(subcommand)]
    pub action: PolicyAction,
}

/// Policy file commands.
#[derive(Debug, Subcommand)]
pub enum PolicyAction {
    /// Parse FILE as a node would at start or on a reload: exit 0 and the rule count, or exit 1
    /// and what is wrong (the rule, its line and the field).
    Check {
        /// The policy file (TOML).
        file: PathBuf,
    },
}

impl PolicyArgs {
    /// Runs the action; the line it prints on success.
    pub fn run(&self) -> Result<String, NodeError> {
        match &self.action {
            PolicyAction::Check { file } => {
                let (policy, _) = crate::authz::policy_file::load(file)?;
                Ok(if policy.is_open() {
                    format!(
                        "{}: valid, no rules: every requester may do everything",
                        file.display()
                    )
                } else {
                    format!("{}: valid, {} rules", file.display(), policy.rule_count())
                })
            }
        }
    }
}

/// `statestore settings ...` (hidden): what `scripts/check-settings` compares.
#[derive(Debug, Args)]
pub struct SettingsArgs {
    /// What to print.
    #[command(subcommand)]
    pub action: SettingsAction,
}

/// Generated documentation.
#[derive(Debug, Subcommand)]
pub enum SettingsAction {
    /// Reads a README on stdin and prints it with its settings tables regenerated.
    Readme,
    /// Prints the JSON schema of the chart's `config` settings, by TOML path.
    Schema,
}

impl SettingsArgs {
    /// Prints the requested document.
    pub fn run(&self) -> Result<(), NodeError> {
        let text = match self.action {
            SettingsAction::Readme => {
                let mut readme = String::new();
                std::io::stdin().read_to_string(&mut readme)?;
                docs::render_readme(&readme)?
            }
            SettingsAction::Schema => format!("{:#}\n", docs::chart_schema()),
        };
        std::io::stdout().write_all(text.as_bytes())?;
        Ok(())
    }
}

impl RunArgs {
    /// Defaults, then the file, then the flags; then every check.
    pub fn into_config(self) -> Result<Config, NodeError> {
        let mut tree = match &self.config {
            Some(path) => Config::tree_from_file(path)?,
            None => Config::defaults_tree(),
        };
        self.settings.apply(&mut tree)?;
        setting::check_ranges(table::SETTINGS, &tree)?;
        let mut config = Config::from_tree(tree)?;
        if !self.reply_topic_prefixes.is_empty() {
            config.mqtt.reply_topic_prefixes = self.reply_topic_prefixes;
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
        self.security.apply(&mut config)?;
        config.validate()?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests;
