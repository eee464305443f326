//! `statestore kv`: a command-line client of the state store protocol over MQTT 5, like any
//! other client (get, set, del, vdel, scan, watch).
//!
//! Exit status: 0 on success; 1 when the key is missing (get, del, vdel: like the official
//! statestore-cli) or a SET condition / VDEL value did not hold; 2 on a usage error, a
//! connection failure, an error reply or no reply. Values go to stdout raw (`--hex`: hex).

pub mod session;

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};

use crate::error::NodeError;
use crate::tls::{ClientIdentity, TlsFiles};
use crate::transport::NOTIFY_TOPIC_PREFIX;
use session::{Session, Target};
use statestore_protocol::client as wire;
use wire::{Notification, Reply};

/// Exit status: success.
pub const EXIT_OK: u8 = 0;
/// Exit status: the key is missing, or the condition did not hold.
pub const EXIT_MISSING: u8 = 1;
/// Exit status: usage, connection or protocol error.
pub const EXIT_ERROR: u8 = 2;

/// `statestore kv ...`
#[derive(Debug, Args)]
pub struct KvArgs {
    /// MQTT broker.
    #[arg(long, default_value = "127.0.0.1:1883", value_name = "HOST:PORT")]
    pub broker: String,
    /// MQTT username.
    #[arg(long)]
    pub username: Option<String>,
    /// File whose first line is the MQTT password (or set STATESTORE_MQTT_PASSWORD).
    #[arg(long, value_name = "FILE")]
    pub password_file: Option<PathBuf>,
    /// Connect with TLS (mqtts), checking the broker's certificate and host name against the
    /// system's CA certificates or --ca.
    #[arg(long)]
    pub tls: bool,
    /// CA certificates (PEM) the broker's certificate must chain to; implies --tls.
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// Client certificate (PEM) for X.509 authentication; needs --key; implies --tls.
    #[arg(long, value_name = "FILE", requires = "key")]
    pub cert: Option<PathBuf>,
    /// Private key (PEM) of --cert.
    #[arg(long, value_name = "FILE", requires = "cert")]
    pub key: Option<PathBuf>,
    /// MQTT client id (default: the --username, else statestore-kv-<pid>).
    #[arg(long)]
    pub client_id: Option<String>,
    /// How long to wait for the broker and for each reply (requests are resent meanwhile).
    #[arg(long, default_value = "10", value_name = "SECONDS")]
    pub timeout: u64,
    /// Print values (and watched keys) as hex instead of raw bytes.
    #[arg(long)]
    pub hex: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: KvCommand,
}

/// `statestore kv` commands.
#[derive(Debug, Subcommand)]
pub enum KvCommand {
    /// Print the value of KEY (exit 1 if it has none).
    Get {
        /// The key.
        key: String,
    },
    /// Set KEY to VALUE.
    Set {
        /// The key.
        key: String,
        /// The value.
        value: String,
        /// Only if KEY has no value (exit 1 if it has).
        #[arg(long, conflicts_with = "nex")]
        nx: bool,
        /// Only if KEY has no value or has this same value (exit 1 otherwise).
        #[arg(long)]
        nex: bool,
        /// Expire the key after MS milliseconds.
        #[arg(long, value_name = "MS")]
        px: Option<u64>,
        /// Fencing token (an HLC, e.g. from a lease).
        #[arg(long, value_name = "HLC")]
        fencing_token: Option<String>,
    },
    /// Delete KEY (exit 1 if it had no value).
    Del {
        /// The key.
        key: String,
    },
    /// Delete KEY if its value is VALUE (exit 1 if it has none or another).
    Vdel {
        /// The key.
        key: String,
        /// The value it must have.
        value: String,
    },
    /// Print every key matching PATTERN (`*`, `?`, `[a-z]`, `[!a]`), one per line in key
    /// order, page after page.
    Scan {
        /// The pattern, matched against the whole key.
        pattern: String,
    },
    /// Print every change of the KEYs until interrupted: `SET <key> <value>` or `DELETE <key>`.
    Watch {
        /// The keys.
        #[arg(required = true)]
        keys: Vec<String>,
    },
}

impl KvArgs {
    fn target(&self) -> Result<Target, NodeError> {
        let (host, port) = self
            .broker
            .rsplit_once(':')
            .and_then(|(host, port)| Some((host, port.parse::<u16>().ok()?)))
            .filter(|(host, _)| !host.is_empty())
            .ok_or_else(|| {
                NodeError::Config(format!("--broker {}: expected HOST:PORT", self.broker))
            })?;
        let password = match &self.password_file {
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .map_err(|e| NodeError::Config(format!("{}: {e}", path.display())))?
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .to_owned(),
            ),
            None => std::env::var("STATESTORE_MQTT_PASSWORD").ok(),
        };
        let credentials = match (&self.username, password) {
            (Some(user), password) => Some((user.clone(), password.unwrap_or_default())),
            (None, Some(_)) => {
                return Err(NodeError::Config("a password needs --username".into()));
            }
            (None, None) => None,
        };
        let tls = if self.tls || self.ca.is_some() || self.cert.is_some() {
            let files = TlsFiles {
                ca: self.ca.clone(),
                client: match (&self.cert, &self.key) {
                    (Some(cert), Some(key)) => Some(ClientIdentity {
                        cert: cert.clone(),
                        key: key.clone(),
                    }),
                    _ => None,
                },
            };
            Some(files.load()?.config)
        } else {
            None
        };
        Ok(Target {
            tls,
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port,
            credentials,
            // Brokers that bind a client to its user name (Mosquitto's
            // `use_username_as_clientid`, the chart's) allow replies only on topics under it.
            client_id: self
                .client_id
                .clone()
                .or_else(|| self.username.clone())
                .unwrap_or_else(|| format!("statestore-kv-{}", std::process::id())),
        })
    }
}

/// Runs `statestore kv` and returns its exit status (errors are printed to stderr).
pub async fn run(args: KvArgs) -> u8 {
    match execute(&args).await {
        Ok(status) => status,
        Err(err) => {
            eprintln!("statestore kv: {err}");
            EXIT_ERROR
        }
    }
}

async fn execute(args: &KvArgs) -> Result<u8, NodeError> {
    let target = args.target()?;
    let within = Duration::from_secs(args.timeout.max(1));
    let mut session = Session::connect(&target, within).await?;
    let print = |bytes: &[u8]| -> Result<(), NodeError> {
        let mut out = std::io::stdout().lock();
        if args.hex {
            writeln!(out, "{}", hex::encode(bytes))?;
        } else {
            out.write_all(bytes)?;
            writeln!(out)?;
        }
        Ok(out.flush()?)
    };
    let outcome = match &args.command {
        KvCommand::Get { key } => {
            match call(&mut session, &[b"GET", key.as_bytes()], within).await? {
                Reply::Value(value) => {
                    print(&value)?;
                    EXIT_OK
                }
                Reply::Nil => EXIT_MISSING,
                other => return Err(unexpected(&other)),
            }
        }
        KvCommand::Set {
            key,
            value,
            nx,
            nex,
            px,
            fencing_token,
        } => {
            let mut parts: Vec<Vec<u8>> =
                vec![b"SET".to_vec(), key.clone().into(), value.clone().into()];
            if *nx {
                parts.push(b"NX".to_vec());
            }
            if *nex {
                parts.push(b"NEX".to_vec());
            }
            if let Some(ms) = px {
                parts.push(b"PX".to_vec());
                parts.push(ms.to_string().into_bytes());
            }
            let parts: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
            match call_with(&mut session, &parts, within, fencing_token.as_deref()).await? {
                Reply::Ok => EXIT_OK,
                Reply::Integer(-1) => {
                    eprintln!("statestore kv: not set: the condition did not hold");
                    EXIT_MISSING
                }
                other => return Err(unexpected(&other)),
            }
        }
        KvCommand::Del { key } => {
            count(call(&mut session, &[b"DEL", key.as_bytes()], within).await?)?
        }
        KvCommand::Vdel { key, value } => count(
            call(
                &mut session,
                &[b"VDEL", key.as_bytes(), value.as_bytes()],
                within,
            )
            .await?,
        )?,
        KvCommand::Scan { pattern } => {
            scan(&mut session, pattern, within, &print).await?;
            EXIT_OK
        }
        KvCommand::Watch { keys } => return watch(&mut session, keys, within, args.hex).await,
    };
    Ok(outcome)
}

/// Sends a request and parses its reply.
async fn call(
    session: &mut Session,
    parts: &[&[u8]],
    within: Duration,
) -> Result<Reply, NodeError> {
    call_with(session, parts, within, None).await
}

/// Sends a request (with the fencing token `__ft` when given) and parses its reply.
async fn call_with(
    session: &mut Session,
    parts: &[&[u8]],
    within: Duration,
    fencing_token: Option<&str>,
) -> Result<Reply, NodeError> {
    let payload = wire::request(parts);
    let extra: Vec<(&str, &str)> = fencing_token.map(|t| ("__ft", t)).into_iter().collect();
    let reply = session.request(&payload, &extra, within).await?;
    match wire::parse_reply(&reply) {
        Some(Reply::Error(_)) | None => Err(refused(&reply)),
        Some(reply) => Ok(reply),
    }
}

/// The error for a reply that is not the expected answer: the store's error message, or the
/// unreadable payload.
fn refused(reply: &[u8]) -> NodeError {
    match wire::parse_reply(reply) {
        Some(Reply::Error(message)) => NodeError::Client(format!("the store replied: {message}")),
        _ => NodeError::Client(format!(
            "unreadable reply: {:?}",
            String::from_utf8_lossy(reply)
        )),
    }
}

/// SCAN page after page until the store says the scan is complete, printing each key. A page
/// that is resent after a failover is the same page (the token names where it starts).
async fn scan(
    session: &mut Session,
    pattern: &str,
    within: Duration,
    print: &dyn Fn(&[u8]) -> Result<(), NodeError>,
) -> Result<(), NodeError> {
    let mut token: Option<Vec<u8>> = None;
    loop {
        let mut parts: Vec<&[u8]> = vec![b"SCAN", pattern.as_bytes()];
        if let Some(token) = &token {
            parts.push(token);
        }
        let reply = session.request(&wire::request(&parts), &[], within).await?;
        let Some(page) = wire::parse_keys_page(&reply) else {
            return Err(refused(&reply));
        };
        for key in &page.keys {
            print(key)?;
        }
        match page.next {
            Some(next) => token = Some(next),
            None => return Ok(()),
        }
    }
}

/// DEL and VDEL: `:1` deleted, `:0` no such key, `:-1` another value.
fn count(reply: Reply) -> Result<u8, NodeError> {
    match reply {
        Reply::Integer(1) => Ok(EXIT_OK),
        Reply::Integer(0) => Ok(EXIT_MISSING),
        Reply::Integer(-1) => {
            eprintln!("statestore kv: not deleted: the key has another value");
            Ok(EXIT_MISSING)
        }
        other => Err(unexpected(&other)),
    }
}

fn unexpected(reply: &Reply) -> NodeError {
    NodeError::Client(format!("unexpected reply {reply:?}"))
}

/// Subscribes to the notification topics of `keys`, registers them with KEYNOTIFY, then
/// prints every notification until the connection is lost (or the process is interrupted).
async fn watch(
    session: &mut Session,
    keys: &[String],
    within: Duration,
    hex: bool,
) -> Result<u8, NodeError> {
    let filter = format!(
        "{NOTIFY_TOPIC_PREFIX}/{}/command/notify/+",
        hex::encode_upper(session.client_id())
    );
    session.subscribe(&filter, within).await?;
    for key in keys {
        match call(session, &[b"KEYNOTIFY", key.as_bytes()], within).await? {
            Reply::Ok => {}
            other => return Err(unexpected(&other)),
        }
    }
    eprintln!("watching {} key(s); Ctrl-C to stop", keys.len());
    loop {
        let (topic, payload) = tokio::select! {
            message = session.next_message() => message?,
            _ = tokio::signal::ctrl_c() => return Ok(EXIT_OK),
        };
        let (Some(key), Some(change)) = (
            wire::notified_key(&topic),
            wire::parse_notification(&payload),
        ) else {
            continue;
        };
        let show = |bytes: &[u8]| {
            if hex {
                hex::encode(bytes)
            } else {
                String::from_utf8_lossy(bytes).into_owned()
            }
        };
        let line = match change {
            Notification::Set(value) => format!("SET {} {}", show(&key), show(&value)),
            Notification::Delete => format!("DELETE {}", show(&key)),
        };
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}")?;
        out.flush()?;
    }
}
