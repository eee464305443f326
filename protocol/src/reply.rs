//! Replies to state store requests (spec §2) and THE single error table
//! (spec §5.1, and devicebound.md §2 for the device-bound service): every `-ERR`
//! wire message and its metric label come from one `match`, so the text clients
//! match byte for byte and the label dashboards count cannot drift apart.

use super::ProtocolError;
use super::resp3::encode_bulk;
use super::scan::Page;

/// Every state store error reply of spec §5.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorReply {
    /// `__ts` more than 60 s ahead of the leader's clock (§3).
    TimestampSkew,
    /// A fenced key was written without `__ft` (§4).
    FencingTokenRequired,
    /// `__ft` more than 60 s ahead of the leader's clock (§4).
    FencingTokenSkew,
    /// `__ft` lower than the key's stored token (§4).
    FencingTokenLower,
    /// A key count, byte or registration quota is exhausted (§9).
    QuotaExceeded,
    /// Malformed RESP, bad option, bad PX, bad length (§2, §9).
    Syntax,
    /// Key-level authorization denied the request.
    NotAuthorized,
    /// Verb not supported.
    UnknownCommand,
    /// Right verb, wrong number of elements.
    WrongArity,
    /// SET without `__ts` (§1.1).
    MissingTimestamp,
    /// `__ts` or `__ft` is not an HLC (§3).
    MalformedTimestamp,
    /// Empty key.
    EmptyKey,
    /// Device-bound SEND: the device's queue holds `max_queue_depth` messages
    /// (devicebound.md §1, §2).
    DeviceQueueFull,
    /// Device-bound: empty, too long, or a character outside the device id
    /// alphabet (devicebound.md §2).
    InvalidDeviceId,
    /// Device-bound SEND: message id empty or longer than 128 bytes
    /// (devicebound.md §2).
    InvalidMessageId,
    /// Device-bound SEND: body over `max_message_bytes` (devicebound.md §2).
    MessageTooLarge,
    /// Device-bound SEND: an application property name that is empty or starts
    /// with `$.` (statestore's addition to devicebound.md §2: such a name would
    /// stand next to, or for, the delivery's own `$.mid`, `$.lt`, `$.exp`, ...).
    InvalidPropertyName,
}

/// One row of the error table: the wire message and the metric label.
struct ErrorText {
    message: &'static str,
    result_label: &'static str,
    services: Services,
}

/// Which services answer an error: the state store's, the device-bound one's, or both.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Services {
    StateStoreOnly,
    DeviceboundOnly,
    Both,
}
const SS: Services = Services::StateStoreOnly;
const DB: Services = Services::DeviceboundOnly;
const BOTH: Services = Services::Both;

/// A service on the request topics, whose errors [`ErrorReply::of`] lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorService {
    /// The state store (spec §5.1).
    StateStore,
    /// The device-bound queues (devicebound.md §2).
    Devicebound,
}

impl ErrorReply {
    /// Every error reply of both services.
    pub const ALL: [ErrorReply; 17] = [
        ErrorReply::TimestampSkew,
        ErrorReply::FencingTokenRequired,
        ErrorReply::FencingTokenSkew,
        ErrorReply::FencingTokenLower,
        ErrorReply::QuotaExceeded,
        ErrorReply::Syntax,
        ErrorReply::NotAuthorized,
        ErrorReply::UnknownCommand,
        ErrorReply::WrongArity,
        ErrorReply::MissingTimestamp,
        ErrorReply::MalformedTimestamp,
        ErrorReply::EmptyKey,
        ErrorReply::DeviceQueueFull,
        ErrorReply::InvalidDeviceId,
        ErrorReply::InvalidMessageId,
        ErrorReply::MessageTooLarge,
        ErrorReply::InvalidPropertyName,
    ];

    /// The errors `service` can answer (spec §5.1, devicebound.md §2), in [`ErrorReply::ALL`]
    /// order, for registering its metric label values up front.
    pub fn of(service: ErrorService) -> Vec<ErrorReply> {
        ErrorReply::ALL
            .into_iter()
            .filter(|error| error.answered_by(service))
            .collect()
    }

    /// Whether `service` can answer this error.
    pub fn answered_by(self, service: ErrorService) -> bool {
        let services = self.text().services;
        match service {
            ErrorService::StateStore => services != DB,
            ErrorService::Devicebound => services != SS,
        }
    }

    /// THE error table (spec §5.1): the only place wire messages and metric
    /// labels are written down.
    const fn text(self) -> ErrorText {
        let (message, result_label, services) = match self {
            ErrorReply::TimestampSkew => (
                "the request timestamp is too far in the future; ensure that the client and broker system clocks are synchronized",
                "timestamp_skew",
                SS,
            ),
            ErrorReply::FencingTokenRequired => (
                "a fencing token is required for this request",
                "missing_fencing_token",
                SS,
            ),
            ErrorReply::FencingTokenSkew => (
                "the request fencing token timestamp is too far in the future; ensure that the client and broker system clocks are synchronized",
                "fencing_token_skew",
                SS,
            ),
            ErrorReply::FencingTokenLower => (
                "the request fencing token is a lower version than the fencing token protecting the resource",
                "fencing_token_lower_version",
                SS,
            ),
            ErrorReply::QuotaExceeded => ("the quota has been exceeded", "quota_exceeded", BOTH),
            ErrorReply::Syntax => ("syntax error", "syntax_error", BOTH),
            ErrorReply::NotAuthorized => ("not authorized", "not_authorized", BOTH),
            ErrorReply::UnknownCommand => ("unknown command", "unknown_command", BOTH),
            ErrorReply::WrongArity => (
                "wrong number of arguments",
                "wrong_number_of_arguments",
                BOTH,
            ),
            ErrorReply::MissingTimestamp => ("missing timestamp", "timestamp_missing", SS),
            ErrorReply::MalformedTimestamp => ("malformed timestamp", "timestamp_malformed", SS),
            ErrorReply::EmptyKey => ("the key length is zero", "key_length_zero", SS),
            ErrorReply::DeviceQueueFull => ("device queue is full", "device_queue_full", DB),
            ErrorReply::InvalidDeviceId => ("invalid device id", "invalid_device_id", DB),
            ErrorReply::InvalidMessageId => ("invalid message id", "invalid_message_id", DB),
            ErrorReply::MessageTooLarge => ("message too large", "message_too_large", DB),
            ErrorReply::InvalidPropertyName => {
                ("invalid property name", "invalid_property_name", DB)
            }
        };
        ErrorText {
            message,
            result_label,
            services,
        }
    }

    /// The exact message of spec §5.1, without the `-ERR ` prefix or CRLF.
    pub fn message(self) -> &'static str {
        self.text().message
    }

    /// The snake_case metric label of this error, e.g. `syntax_error`.
    pub fn result_label(self) -> &'static str {
        self.text().result_label
    }
}

impl From<ProtocolError> for ErrorReply {
    fn from(error: ProtocolError) -> Self {
        match error {
            ProtocolError::Syntax => ErrorReply::Syntax,
            ProtocolError::WrongArity => ErrorReply::WrongArity,
            ProtocolError::UnknownCommand => ErrorReply::UnknownCommand,
            ProtocolError::EmptyKey => ErrorReply::EmptyKey,
            ProtocolError::InvalidDeviceId => ErrorReply::InvalidDeviceId,
            ProtocolError::InvalidMessageId => ErrorReply::InvalidMessageId,
            ProtocolError::MessageTooLarge => ErrorReply::MessageTooLarge,
            ProtocolError::InvalidPropertyName => ErrorReply::InvalidPropertyName,
        }
    }
}

/// A reply payload (spec §2, §5.1). Encoded byte-exact by [`Reply::encode`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK\r\n`: SET applied, KEYNOTIFY registered or stopped.
    Ok,
    /// `:-1\r\n`: SET condition failed or VDEL value differs (never `-1\r\n`
    /// nor `$-1\r\n`).
    NotApplied,
    /// `:<n>\r\n`: DEL/VDEL counts, KEYNOTIFY STOP on an unobserved key (`:0`).
    Integer(i64),
    /// `$<n>\r\n<bytes>\r\n`: GET hit (empty value: `$0\r\n\r\n`).
    Bulk(Vec<u8>),
    /// `$-1\r\n`: GET miss.
    Nil,
    /// `*1\r\n*<k>\r\n<keys>` or `*2\r\n*<k>\r\n<keys>$<t>\r\n<token>\r\n`: a SCAN page.
    Keys(Page),
    /// `-ERR <message>\r\n` with exactly one space after `ERR`.
    Error(ErrorReply),
}

impl Reply {
    /// The byte-exact payload; never empty, nothing after the final CRLF.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Reply::Ok => b"+OK\r\n".to_vec(),
            Reply::NotApplied => b":-1\r\n".to_vec(),
            Reply::Integer(number) => format!(":{number}\r\n").into_bytes(),
            Reply::Bulk(bytes) => {
                let mut out = Vec::with_capacity(bytes.len() + 16);
                encode_bulk(&mut out, bytes);
                out
            }
            Reply::Nil => b"$-1\r\n".to_vec(),
            Reply::Keys(page) => page.encode(),
            Reply::Error(error) => format!("-ERR {}\r\n", error.message()).into_bytes(),
        }
    }

    /// The labels [`Reply::result_label`] gives every reply but an error.
    pub const SUCCESS_LABELS: [&'static str; 3] = ["ok", "not_found", "not_applied"];

    /// Metric label of the outcome: `ok` for [`Reply::Ok`], a positive
    /// [`Reply::Integer`] and [`Reply::Bulk`]; `not_found` for [`Reply::Nil`] and
    /// `Integer(0)`; `not_applied` for [`Reply::NotApplied`] and a negative
    /// `Integer`; the error's own label for [`Reply::Error`].
    pub fn result_label(&self) -> &'static str {
        match self {
            Reply::Error(error) => error.result_label(),
            Reply::Ok | Reply::Bulk(_) | Reply::Keys(_) => "ok",
            Reply::Integer(number) if *number >= 1 => "ok",
            Reply::Nil | Reply::Integer(0) => "not_found",
            Reply::NotApplied | Reply::Integer(_) => "not_applied",
        }
    }
}

impl From<ErrorReply> for Reply {
    fn from(error: ErrorReply) -> Self {
        Reply::Error(error)
    }
}

#[cfg(test)]
mod tests;
