//! The device-bound service RPC (devicebound.md §2): one RESP3 array of bulk
//! strings on `devicebound/v1/command/invoke` parsed into a typed
//! [`DeviceRequest`], with the exact errors of the state store parser
//! (protocol.md §5) and the device-bound ones; the inverse encoder; and the
//! application properties a SEND takes from its MQTT 5 user properties.
//!
//! Check order, as in the state store: framing (`syntax error`), verb
//! (`unknown command`), arity (`wrong number of arguments`), device id, message
//! id, body size, then options (`syntax error` for an unknown, duplicated or
//! value-less option and for a bad option value).

use super::DeviceboundLimits;
use super::ids::{as_mqtt_text, is_valid_lock_token, validate_device_id, validate_message_id};
use super::time::MAX_FORMATTED_UNIX_MS;
use crate::command::set_once;
use crate::resp3::{encode_bulk, parse_decimal, parse_request, sniff_first_element};
use crate::{ProtocolError, ProtocolLimits};

/// The request topic of the device-bound service (devicebound.md §2).
pub const REQUEST_TOPIC: &str = statestore_vocab::spec::DEVICEBOUND_REQUEST_TOPIC;

/// Longest `GENERATION`, `CONTENTTYPE` or `CONTENTENCODING` value, in bytes
/// (the id limit of IoT Hub; these travel as user properties and in the
/// delivery topic, so they are bounded like ids).
pub const MAX_PROPERTY_TEXT_BYTES: usize = 128;

/// `DEADLETTERS` without `COUNT` returns at most this many (devicebound.md §2).
pub const DEFAULT_DEAD_LETTER_COUNT: u32 = 10;

/// The longest possible expiry, whatever TTL or EXPIRES says: 2 days after
/// enqueue (devicebound.md §1).
pub const MAX_TTL_MS: u64 = statestore_vocab::spec::MAX_MESSAGE_LIFETIME_MS;

/// Most elements a device-bound request array may have; more is `syntax error`
/// at the framing layer (as the state store's 8 for its 6-element SET, this
/// leaves room above the longest command, so 15 or 16 elements are still read
/// and answered `wrong number of arguments`).
pub const MAX_REQUEST_ELEMENTS: usize = 16;

/// `SEND` takes at most five options of two elements each.
const MAX_SEND_OPTION_ELEMENTS: usize = 10;

/// `DEADLETTERS` takes at most `COUNT n`.
const MAX_DEAD_LETTERS_OPTION_ELEMENTS: usize = 2;

/// One application property: an MQTT 5 user property of the SEND request,
/// `(name, value)`.
pub type ApplicationProperty = (String, String);

/// The `ACK` option of a SEND (devicebound.md §4; IoT Hub's `iothub-ack`).
pub use statestore_vocab::devicebound::Ack;

/// The mode named by `keyword`, matched case-insensitively.
fn ack_mode(keyword: &[u8]) -> Option<Ack> {
    Ack::ALL
        .into_iter()
        .find(|mode| keyword.eq_ignore_ascii_case(mode.keyword().as_bytes()))
}

pub use statestore_vocab::devicebound::{Expiry, FeedbackSettlement};

/// `SEND deviceId messageId body [TTL ms | EXPIRES unix-ms] [ACK mode]
/// [GENERATION id] [CONTENTTYPE t] [CONTENTENCODING e]`. Borrows from the payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendRequest<'a> {
    /// A valid device id (see [`super::ids::validate_device_id`]).
    pub device_id: &'a str,
    /// A valid message id (see [`super::ids::validate_message_id`]).
    pub message_id: &'a str,
    /// The body, at most `max_message_bytes`.
    pub body: &'a [u8],
    /// `TTL` or `EXPIRES`; [`Expiry::Default`] (the configured default TTL) when absent.
    pub expiry: Expiry,
    /// `ACK`; [`Ack::None`] when absent.
    pub ack: Ack,
    /// `GENERATION`: the device generation id feedback reports.
    pub generation: Option<&'a str>,
    /// `CONTENTTYPE`, delivered as `$.ct`.
    pub content_type: Option<&'a str>,
    /// `CONTENTENCODING`, delivered as `$.ce`.
    pub content_encoding: Option<&'a str>,
}

impl SendRequest<'_> {
    /// The absolute expiry of a message enqueued at `enqueued_at_ms`: its `TTL`
    /// or `EXPIRES`, else `default_ttl_ms`, capped at [`MAX_TTL_MS`] after
    /// enqueue (devicebound.md §1). Never overflows.
    pub fn expires_at_ms(&self, enqueued_at_ms: u64, default_ttl_ms: u64) -> u64 {
        let latest = enqueued_at_ms.saturating_add(MAX_TTL_MS);
        let requested = match self.expiry {
            Expiry::Ttl(ttl_ms) => enqueued_at_ms.saturating_add(ttl_ms),
            Expiry::At(unix_ms) => unix_ms,
            Expiry::Default => enqueued_at_ms.saturating_add(default_ttl_ms),
        };
        requested.min(latest)
    }
}

/// One parsed device-bound request (devicebound.md §2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceRequest<'a> {
    /// `SEND ...`: enqueue a message.
    Send(SendRequest<'a>),
    /// `PURGE deviceId`: remove every queued message of the device.
    Purge {
        /// A valid device id.
        device_id: &'a str,
    },
    /// `FORGET deviceId`: remove the queue, its dead letters and its pending feedback.
    Forget {
        /// A valid device id.
        device_id: &'a str,
    },
    /// `QUEUE deviceId`: counts and the oldest enqueued time.
    Queue {
        /// A valid device id.
        device_id: &'a str,
    },
    /// `DEADLETTERS deviceId [COUNT n]`: the oldest dead letters.
    DeadLetters {
        /// A valid device id.
        device_id: &'a str,
        /// `COUNT`, or [`DEFAULT_DEAD_LETTER_COUNT`]; at least 1.
        count: u32,
    },
    /// `FEEDBACK COMPLETE|ABANDON lockToken`: settle a feedback batch.
    Feedback {
        /// What to do with the batch.
        settlement: FeedbackSettlement,
        /// A well-formed lock token (see [`super::ids::is_valid_lock_token`]).
        lock_token: &'a str,
    },
}

impl DeviceRequest<'_> {
    /// The verb, as a metric label source.
    pub fn verb(&self) -> DeviceVerb {
        match self {
            DeviceRequest::Send(_) => DeviceVerb::Send,
            DeviceRequest::Purge { .. } => DeviceVerb::Purge,
            DeviceRequest::Forget { .. } => DeviceVerb::Forget,
            DeviceRequest::Queue { .. } => DeviceVerb::Queue,
            DeviceRequest::DeadLetters { .. } => DeviceVerb::DeadLetters,
            DeviceRequest::Feedback { .. } => DeviceVerb::Feedback,
        }
    }

    /// The device the request is about; `None` for `FEEDBACK`.
    pub fn device_id(&self) -> Option<&str> {
        match self {
            DeviceRequest::Send(send) => Some(send.device_id),
            DeviceRequest::Purge { device_id }
            | DeviceRequest::Forget { device_id }
            | DeviceRequest::Queue { device_id }
            | DeviceRequest::DeadLetters { device_id, .. } => Some(device_id),
            DeviceRequest::Feedback { .. } => None,
        }
    }

    /// Whether the request changes replicated state, and so is de-duplicated
    /// (protocol.md §6): everything but `QUEUE` and `DEADLETTERS`.
    pub fn is_mutation(&self) -> bool {
        !matches!(
            self,
            DeviceRequest::Queue { .. } | DeviceRequest::DeadLetters { .. }
        )
    }
}

/// The closed set of device-bound verbs, used as a metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceVerb {
    /// `SEND`.
    Send,
    /// `PURGE`.
    Purge,
    /// `FORGET`.
    Forget,
    /// `QUEUE`.
    Queue,
    /// `DEADLETTERS`.
    DeadLetters,
    /// `FEEDBACK`.
    Feedback,
    /// Anything else, or nothing readable.
    Unknown,
}

// `DeviceVerb::NAMED` is `ALL` without its last verb, which must be `Unknown`.
const _: () = assert!(matches!(
    DeviceVerb::ALL[DeviceVerb::ALL.len() - 1],
    DeviceVerb::Unknown
));

impl DeviceVerb {
    /// Every verb, for registering metric label values up front.
    pub const ALL: [DeviceVerb; 7] = [
        DeviceVerb::Send,
        DeviceVerb::Purge,
        DeviceVerb::Forget,
        DeviceVerb::Queue,
        DeviceVerb::DeadLetters,
        DeviceVerb::Feedback,
        DeviceVerb::Unknown,
    ];

    /// The verbs a request can name: [`DeviceVerb::ALL`] but its last, [`DeviceVerb::Unknown`].
    const NAMED: &[DeviceVerb] = match DeviceVerb::ALL.split_last() {
        Some((_, named)) => named,
        None => &[],
    };

    /// The longest verb name (`DEADLETTERS`).
    const LONGEST_NAME_BYTES: usize = 11;

    /// The wire name, upper case: `SEND`, `PURGE`, ... (`UNKNOWN` for `Unknown`).
    pub fn name(self) -> &'static str {
        match self {
            DeviceVerb::Send => "SEND",
            DeviceVerb::Purge => "PURGE",
            DeviceVerb::Forget => "FORGET",
            DeviceVerb::Queue => "QUEUE",
            DeviceVerb::DeadLetters => "DEADLETTERS",
            DeviceVerb::Feedback => "FEEDBACK",
            DeviceVerb::Unknown => "UNKNOWN",
        }
    }

    /// Lower-case metric label: `send`, `purge`, ..., `unknown`.
    pub fn label(self) -> &'static str {
        match self {
            DeviceVerb::Send => "send",
            DeviceVerb::Purge => "purge",
            DeviceVerb::Forget => "forget",
            DeviceVerb::Queue => "queue",
            DeviceVerb::DeadLetters => "deadletters",
            DeviceVerb::Feedback => "feedback",
            DeviceVerb::Unknown => "unknown",
        }
    }

    /// The verb named by `name`, matched case-insensitively.
    fn from_name(name: &[u8]) -> DeviceVerb {
        DeviceVerb::NAMED
            .iter()
            .copied()
            .find(|verb| name.eq_ignore_ascii_case(verb.name().as_bytes()))
            .unwrap_or(DeviceVerb::Unknown)
    }
}

/// Parse one device-bound request payload (devicebound.md §2, protocol.md §2,
/// §5). Bulk strings are bounded only by the payload itself at the framing
/// layer, so that an over-long device id or body gets its own error rather than
/// `syntax error`; the array holds at most [`MAX_REQUEST_ELEMENTS`].
pub fn parse_device_request<'a>(
    payload: &'a [u8],
    limits: &DeviceboundLimits,
) -> Result<DeviceRequest<'a>, ProtocolError> {
    let framing = ProtocolLimits {
        max_key_bytes: payload.len(),
        max_value_bytes: payload.len(),
        max_array_len: MAX_REQUEST_ELEMENTS,
        max_px_ms: 0,
    };
    let elements = parse_request(payload, &framing)?;
    let Some((&verb_name, arguments)) = elements.split_first() else {
        return Err(ProtocolError::Syntax);
    };
    match DeviceVerb::from_name(verb_name) {
        DeviceVerb::Send => parse_send(arguments, limits).map(DeviceRequest::Send),
        DeviceVerb::Purge => Ok(DeviceRequest::Purge {
            device_id: only_device_id(arguments)?,
        }),
        DeviceVerb::Forget => Ok(DeviceRequest::Forget {
            device_id: only_device_id(arguments)?,
        }),
        DeviceVerb::Queue => Ok(DeviceRequest::Queue {
            device_id: only_device_id(arguments)?,
        }),
        DeviceVerb::DeadLetters => parse_dead_letters(arguments),
        DeviceVerb::Feedback => parse_feedback(arguments),
        DeviceVerb::Unknown => Err(ProtocolError::UnknownCommand),
    }
}

/// Best-effort verb of a payload that may not parse, for metric labels.
pub fn sniff_device_verb(payload: &[u8]) -> DeviceVerb {
    sniff_first_element(payload, DeviceVerb::LONGEST_NAME_BYTES)
        .map_or(DeviceVerb::Unknown, DeviceVerb::from_name)
}

/// The prefix of the names a delivery gives its own properties (`$.mid`,
/// `$.lt`, `$.exp`, `$.ct`, `$.ce`; IoT Hub reserves every `$.` name for its
/// system properties).
pub const SYSTEM_PROPERTY_PREFIX: &str = "$.";

/// The application properties of a SEND: its MQTT 5 user properties whose
/// names do not start with `__` (the envelope's `__srcId`, `__ts`, ...), in
/// order, duplicates kept (devicebound.md §1); or
/// [`ProtocolError::InvalidPropertyName`] if a name starts with `$.`. Such a
/// property would stand in the delivery's property bag and user properties next
/// to the delivery's own `$.lt`, `$.mid`, ... (a second lock token or message
/// id, which a device may read first). Any other name, the empty one included,
/// is carried as it is: the bag percent-encodes every byte that is not
/// unreserved, so no name can break it.
pub fn application_properties<'p>(
    user_properties: impl IntoIterator<Item = (&'p str, &'p str)>,
) -> Result<Vec<ApplicationProperty>, ProtocolError> {
    user_properties
        .into_iter()
        .filter(|(name, _)| !name.starts_with("__"))
        .map(|(name, value)| {
            if name.starts_with(SYSTEM_PROPERTY_PREFIX) {
                return Err(ProtocolError::InvalidPropertyName);
            }
            Ok((name.to_owned(), value.to_owned()))
        })
        .collect()
}

/// The payload that [`parse_device_request`] turns back into `request`: verbs
/// and options upper case, `ACK` values lower case, options in the order of
/// the §2 table, `DEADLETTERS` always with its `COUNT`.
pub fn encode_device_request(request: &DeviceRequest<'_>) -> Vec<u8> {
    let verb = request.verb().name().as_bytes();
    let elements: Vec<Vec<u8>> = match request {
        DeviceRequest::Send(send) => send_elements(send),
        DeviceRequest::Purge { device_id }
        | DeviceRequest::Forget { device_id }
        | DeviceRequest::Queue { device_id } => vec![verb.to_vec(), device_id.as_bytes().to_vec()],
        DeviceRequest::DeadLetters { device_id, count } => vec![
            verb.to_vec(),
            device_id.as_bytes().to_vec(),
            b"COUNT".to_vec(),
            count.to_string().into_bytes(),
        ],
        DeviceRequest::Feedback {
            settlement,
            lock_token,
        } => vec![
            verb.to_vec(),
            settlement.keyword().as_bytes().to_vec(),
            lock_token.as_bytes().to_vec(),
        ],
    };
    let mut payload = format!("*{}\r\n", elements.len()).into_bytes();
    for element in &elements {
        encode_bulk(&mut payload, element);
    }
    payload
}

fn send_elements(send: &SendRequest<'_>) -> Vec<Vec<u8>> {
    let mut elements = vec![
        DeviceVerb::Send.name().as_bytes().to_vec(),
        send.device_id.as_bytes().to_vec(),
        send.message_id.as_bytes().to_vec(),
        send.body.to_vec(),
    ];
    let mut option = |name: &str, value: &[u8]| {
        elements.push(name.as_bytes().to_vec());
        elements.push(value.to_vec());
    };
    match send.expiry {
        Expiry::Ttl(ttl_ms) => option("TTL", ttl_ms.to_string().as_bytes()),
        Expiry::At(unix_ms) => option("EXPIRES", unix_ms.to_string().as_bytes()),
        Expiry::Default => {}
    }
    if send.ack != Ack::None {
        option("ACK", send.ack.keyword().as_bytes());
    }
    let text_options = [
        ("GENERATION", send.generation),
        ("CONTENTTYPE", send.content_type),
        ("CONTENTENCODING", send.content_encoding),
    ];
    for (name, value) in text_options {
        if let Some(value) = value {
            option(name, value.as_bytes());
        }
    }
    elements
}

/// `SEND deviceId messageId body [options]`.
fn parse_send<'a>(
    arguments: &[&'a [u8]],
    limits: &DeviceboundLimits,
) -> Result<SendRequest<'a>, ProtocolError> {
    let [device_id, message_id, body, ref options @ ..] = *arguments else {
        return Err(ProtocolError::WrongArity);
    };
    if options.len() > MAX_SEND_OPTION_ELEMENTS {
        return Err(ProtocolError::WrongArity);
    }
    let device_id = validate_device_id(device_id)?;
    let message_id = validate_message_id(message_id)?;
    if body.len() > limits.max_message_bytes {
        return Err(ProtocolError::MessageTooLarge);
    }

    let mut expiry = None;
    let mut ack = None;
    let mut generation = None;
    let mut content_type = None;
    let mut content_encoding = None;
    for (name, value) in option_pairs(options)? {
        if name.eq_ignore_ascii_case(b"TTL") {
            set_once(&mut expiry, Expiry::Ttl(parse_ttl(value)?))?;
        } else if name.eq_ignore_ascii_case(b"EXPIRES") {
            set_once(&mut expiry, Expiry::At(parse_expires(value)?))?;
        } else if name.eq_ignore_ascii_case(b"ACK") {
            let mode = ack_mode(value).ok_or(ProtocolError::Syntax)?;
            set_once(&mut ack, mode)?;
        } else if name.eq_ignore_ascii_case(b"GENERATION") {
            set_once(&mut generation, property_text(value)?)?;
        } else if name.eq_ignore_ascii_case(b"CONTENTTYPE") {
            set_once(&mut content_type, property_text(value)?)?;
        } else if name.eq_ignore_ascii_case(b"CONTENTENCODING") {
            set_once(&mut content_encoding, property_text(value)?)?;
        } else {
            return Err(ProtocolError::Syntax);
        }
    }
    Ok(SendRequest {
        device_id,
        message_id,
        body,
        expiry: expiry.unwrap_or(Expiry::Default),
        ack: ack.unwrap_or_default(),
        generation,
        content_type,
        content_encoding,
    })
}

/// `PURGE`, `FORGET`, `QUEUE`: exactly one argument, the device id.
fn only_device_id<'a>(arguments: &[&'a [u8]]) -> Result<&'a str, ProtocolError> {
    match *arguments {
        [device_id] => validate_device_id(device_id),
        _ => Err(ProtocolError::WrongArity),
    }
}

/// `DEADLETTERS deviceId [COUNT n]`.
fn parse_dead_letters<'a>(arguments: &[&'a [u8]]) -> Result<DeviceRequest<'a>, ProtocolError> {
    let [device_id, ref options @ ..] = *arguments else {
        return Err(ProtocolError::WrongArity);
    };
    if options.len() > MAX_DEAD_LETTERS_OPTION_ELEMENTS {
        return Err(ProtocolError::WrongArity);
    }
    let device_id = validate_device_id(device_id)?;
    let mut count = None;
    for (name, value) in option_pairs(options)? {
        if !name.eq_ignore_ascii_case(b"COUNT") {
            return Err(ProtocolError::Syntax);
        }
        set_once(&mut count, parse_count(value)?)?;
    }
    Ok(DeviceRequest::DeadLetters {
        device_id,
        count: count.unwrap_or(DEFAULT_DEAD_LETTER_COUNT),
    })
}

/// `FEEDBACK COMPLETE|ABANDON lockToken`.
fn parse_feedback<'a>(arguments: &[&'a [u8]]) -> Result<DeviceRequest<'a>, ProtocolError> {
    let [settlement, lock_token] = *arguments else {
        return Err(ProtocolError::WrongArity);
    };
    let settlement = if settlement.eq_ignore_ascii_case(b"COMPLETE") {
        FeedbackSettlement::Complete
    } else if settlement.eq_ignore_ascii_case(b"ABANDON") {
        FeedbackSettlement::Abandon
    } else {
        return Err(ProtocolError::Syntax);
    };
    let lock_token = std::str::from_utf8(lock_token)
        .ok()
        .filter(|token| is_valid_lock_token(token))
        .ok_or(ProtocolError::Syntax)?;
    Ok(DeviceRequest::Feedback {
        settlement,
        lock_token,
    })
}

/// Options as `(name, value)` pairs; an odd count means the last option has no
/// value, which is `syntax error` (protocol.md §5: as `PX` without its argument).
fn option_pairs<'o, 'a>(
    options: &'o [&'a [u8]],
) -> Result<impl Iterator<Item = (&'a [u8], &'a [u8])> + 'o, ProtocolError> {
    if !options.len().is_multiple_of(2) {
        return Err(ProtocolError::Syntax);
    }
    Ok(options.chunks_exact(2).filter_map(|pair| match *pair {
        [name, value] => Some((name, value)),
        _ => None,
    }))
}

/// `TTL` value: ASCII digits, 1 up to [`MAX_FORMATTED_UNIX_MS`] (any TTL is
/// capped at 2 days on enqueue; the bound only keeps arithmetic in range).
fn parse_ttl(value: &[u8]) -> Result<u64, ProtocolError> {
    match parse_decimal(value, MAX_FORMATTED_UNIX_MS) {
        Some(0) | None => Err(ProtocolError::Syntax),
        Some(ttl_ms) => Ok(ttl_ms),
    }
}

/// `EXPIRES` value: ASCII digits, 0 up to 9999-12-31T23:59:59.999Z, so that
/// every expiry has an ISO 8601 form with a four-digit year.
fn parse_expires(value: &[u8]) -> Result<u64, ProtocolError> {
    parse_decimal(value, MAX_FORMATTED_UNIX_MS).ok_or(ProtocolError::Syntax)
}

/// `COUNT` value: ASCII digits, 1 up to `u32::MAX`.
fn parse_count(value: &[u8]) -> Result<u32, ProtocolError> {
    match parse_decimal(value, u64::from(u32::MAX)).map(u32::try_from) {
        Some(Ok(count)) if count > 0 => Ok(count),
        _ => Err(ProtocolError::Syntax),
    }
}

/// `GENERATION`, `CONTENTTYPE`, `CONTENTENCODING` values: 1 to
/// [`MAX_PROPERTY_TEXT_BYTES`] bytes of MQTT 5 text.
fn property_text(value: &[u8]) -> Result<&str, ProtocolError> {
    if value.is_empty() || value.len() > MAX_PROPERTY_TEXT_BYTES {
        return Err(ProtocolError::Syntax);
    }
    as_mqtt_text(value).ok_or(ProtocolError::Syntax)
}
