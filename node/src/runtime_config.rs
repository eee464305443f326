//! From a [`Config`] to each subsystem's runtime settings: the MQTT session
//! ([`SessionConfig`]), the request service ([`ServiceConfig`]), the protocol's and the
//! device-bound service's door limits, leadership timing, and the TLS and token files. Also
//! [`Config::validate`]: the settings' own checks plus those that need the subsystems (reply
//! topic prefixes, the broker address, TLS files that must load, the admin token).
//!
//! `config` describes settings and imports none of the subsystems; this module sits above
//! both and is what `node.rs` and `cli.rs` use.

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;

use crate::config::{Config, IdentitySource, MqttConfig, exposed, invalid};
use crate::error::NodeError;
use crate::mqtt::{BrokerAddress, BrokerTls, SessionConfig};
use crate::service::ServiceConfig;
use crate::service::envelope::RequesterIdentity;
use crate::service::leader::LeaderTiming;
use crate::tls::{ClientIdentity, Reloading, TlsFiles};
use statestore_protocol::ProtocolLimits;
use statestore_protocol::devicebound::DeviceboundLimits;

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

impl Config {
    /// Checks every setting; the node refuses to start with a message naming the bad one.
    pub fn validate(&self) -> Result<(), NodeError> {
        self.check_settings()?;
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
        self.validate_security()
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
            identity: match self.auth.identity {
                IdentitySource::Claimed => RequesterIdentity::Claimed,
                IdentitySource::Broker => RequesterIdentity::Vouched {
                    property: self.auth.vouched_property.clone(),
                },
            },
        }
    }

    /// How often the policy file is checked for changes; `None`: never.
    pub fn policy_reload_interval(&self) -> Option<Duration> {
        (self.auth.policy_reload_interval_ms > 0)
            .then(|| Duration::from_millis(self.auth.policy_reload_interval_ms))
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

    // ---- Security: peer TLS, HTTPS on the HTTP listener, the admin token (README "Security") ----

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
    pub fn admin_token(&self) -> Result<Option<crate::admin_token::AdminToken>, NodeError> {
        self.admin
            .token_file
            .as_deref()
            .map(|path| crate::admin_token::AdminToken::from_file("admin.token_file", path))
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
}

#[cfg(test)]
mod tests;
