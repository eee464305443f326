//! The plugin's options: the `plugin_opt_<key> <value>` lines of mosquitto.conf, parsed and
//! checked once at load. An unknown key, a repeated key or a bad value fails the load (the broker
//! then refuses to start) rather than running with a setting the operator did not mean.

use std::fmt;

use crate::topics::TopicFilter;

/// The user property that carries the identity the broker vouches for. `__` marks it as a
/// protocol property, like the Azure IoT Operations protocol's own (`__srcId`, `__ts`,
/// `__protVer`: `ProtocolReservedUserProperty` in azure_iot_operations_protocol), so it does
/// not collide with an application's user data; `ss` scopes it to statestore, and
/// `VouchedId` says who set it. It is deliberately not `__srcId`, which every client sets
/// itself and the SDKs use for routing.
pub const DEFAULT_PROPERTY: &str = "__ssVouchedId";

/// The state store's request topic (`statestore_vocab::spec::STATE_STORE_REQUEST_TOPIC`).
pub const STATE_STORE_REQUEST_TOPIC: &str =
    "statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke";
/// The device-bound request topic (`statestore_vocab::spec::DEVICEBOUND_REQUEST_TOPIC`).
pub const DEVICEBOUND_REQUEST_TOPIC: &str = "devicebound/v1/command/invoke";

/// At most this many options (mosquitto.conf lines for this plugin).
pub const MAX_OPTIONS: usize = 32;
/// At most this many request topic filters.
pub const MAX_REQUEST_TOPICS: usize = 32;
/// A property name or topic filter longer than this is refused.
pub const MAX_NAME_BYTES: usize = 256;
/// The longest counter report interval: a day.
pub const MAX_REPORT_INTERVAL_S: u64 = 86_400;
/// Counters are logged this often by default.
pub const DEFAULT_REPORT_INTERVAL_S: u64 = 300;

/// Where the vouched identity comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdentitySource {
    /// The authenticated user name (the certificate's CN with `use_identity_as_username`),
    /// else the client id. The default.
    UsernameOrClientId,
    /// The user name only: a request from a client without one is refused.
    Username,
    /// The client id only.
    ClientId,
}

/// The parsed options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// `identity`: `username_or_client_id` (default), `username` or `client_id`.
    pub identity: IdentitySource,
    /// `property`: the user property name, default [`DEFAULT_PROPERTY`].
    pub property: String,
    /// `request_topics`: comma-separated MQTT topic filters, default the state store's and
    /// the device-bound request topics.
    pub request_topics: Vec<TopicFilter>,
    /// `check_response_topic`: `true` refuses a request whose response topic is outside
    /// `clients/<client id>/`; default `false`.
    pub check_response_topic: bool,
    /// `report_interval`: seconds between counter log lines (0: only at shutdown); default
    /// [`DEFAULT_REPORT_INTERVAL_S`].
    pub report_interval_s: u64,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            identity: IdentitySource::UsernameOrClientId,
            property: DEFAULT_PROPERTY.to_string(),
            request_topics: [STATE_STORE_REQUEST_TOPIC, DEVICEBOUND_REQUEST_TOPIC]
                .iter()
                .filter_map(|t| TopicFilter::parse(t).ok())
                .collect(),
            check_response_topic: false,
            report_interval_s: DEFAULT_REPORT_INTERVAL_S,
        }
    }
}

/// Why the options were refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OptionError {
    /// More than [`MAX_OPTIONS`] options.
    TooMany(usize),
    /// A key this plugin does not know.
    UnknownKey(String),
    /// A key given twice.
    Repeated(String),
    /// A value that does not parse for its key.
    BadValue {
        /// The option's key.
        key: String,
        /// Its value (shortened).
        value: String,
        /// What was expected.
        expected: &'static str,
    },
}

impl fmt::Display for OptionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OptionError::TooMany(n) => write!(f, "{n} options, at most {MAX_OPTIONS}"),
            OptionError::UnknownKey(k) => write!(
                f,
                "unknown option plugin_opt_{k} (known: identity, property, request_topics, \
                 check_response_topic, report_interval)"
            ),
            OptionError::Repeated(k) => write!(f, "plugin_opt_{k} given twice"),
            OptionError::BadValue {
                key,
                value,
                expected,
            } => write!(f, "plugin_opt_{key} '{value}': expected {expected}"),
        }
    }
}

impl std::error::Error for OptionError {}

impl Options {
    /// Parses `(key, value)` pairs as Mosquitto hands them over (key without `plugin_opt_`).
    pub fn parse<'a>(pairs: &[(&'a str, &'a str)]) -> Result<Options, OptionError> {
        if pairs.len() > MAX_OPTIONS {
            return Err(OptionError::TooMany(pairs.len()));
        }
        let mut options = Options::default();
        let mut seen: Vec<&str> = Vec::with_capacity(pairs.len());
        for &(key, value) in pairs {
            let key = key.trim();
            if seen.contains(&key) {
                return Err(OptionError::Repeated(crate::report::shorten(key, 64)));
            }
            seen.push(key);
            let value = value.trim();
            let bad = |expected: &'static str| OptionError::BadValue {
                key: key.to_string(),
                value: crate::report::shorten(value, 64),
                expected,
            };
            match key {
                "identity" => {
                    options.identity = match value {
                        "username_or_client_id" => IdentitySource::UsernameOrClientId,
                        "username" => IdentitySource::Username,
                        "client_id" => IdentitySource::ClientId,
                        _ => return Err(bad("username_or_client_id, username or client_id")),
                    }
                }
                "property" => {
                    if value.is_empty()
                        || value.len() > MAX_NAME_BYTES
                        || value.chars().any(char::is_control)
                    {
                        return Err(bad("a non-empty name of at most 256 bytes"));
                    }
                    options.property = value.to_string();
                }
                "request_topics" => {
                    let filters: Vec<&str> = value
                        .split(',')
                        .map(str::trim)
                        .filter(|t| !t.is_empty())
                        .collect();
                    if filters.is_empty() || filters.len() > MAX_REQUEST_TOPICS {
                        return Err(bad("1 to 32 comma-separated topic filters"));
                    }
                    options.request_topics = filters
                        .iter()
                        .map(|t| TopicFilter::parse(t))
                        .collect::<Result<_, _>>()
                        .map_err(|_| bad("valid MQTT topic filters of at most 256 bytes"))?;
                }
                "check_response_topic" => {
                    options.check_response_topic =
                        parse_bool(value).ok_or_else(|| bad("true or false"))?;
                }
                "report_interval" => {
                    options.report_interval_s = value
                        .parse::<u64>()
                        .ok()
                        .filter(|s| *s <= MAX_REPORT_INTERVAL_S)
                        .ok_or_else(|| bad("seconds, 0 to 86400"))?;
                }
                _ => return Err(OptionError::UnknownKey(crate::report::shorten(key, 64))),
            }
        }
        Ok(options)
    }

    /// One line for the broker's log at load.
    pub fn describe(&self) -> String {
        let identity = match self.identity {
            IdentitySource::UsernameOrClientId => "username_or_client_id",
            IdentitySource::Username => "username",
            IdentitySource::ClientId => "client_id",
        };
        let topics: Vec<&str> = self
            .request_topics
            .iter()
            .map(TopicFilter::as_str)
            .collect();
        format!(
            "identity={identity} property={} request_topics={} check_response_topic={} \
             report_interval={}s",
            self.property,
            topics.join(","),
            self.check_response_topic,
            self.report_interval_s
        )
    }
}

fn parse_bool(value: &str) -> Option<bool> {
    match value {
        "true" | "on" | "yes" | "1" => Some(true),
        "false" | "off" | "no" | "0" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
