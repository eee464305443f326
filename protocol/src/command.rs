//! Typed state store commands (spec §2) and their semantic parser: verb,
//! arity, key, value and option rules on top of the RESP3 framing of `resp3`,
//! with the size limits of spec §9. Also the closed set of verbs used as a
//! metric label.

use super::glob::Glob;
use super::resp3::{parse_decimal, parse_request, sniff_first_element};
use super::scan::resume_after;
use super::{ProtocolError, ProtocolLimits};

pub use statestore_vocab::keyspace::SetCondition;

/// One parsed request (spec §2). Keys and values borrow from the payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command<'a> {
    /// `SET key value [NX | NEX] [PX ms]`.
    Set {
        /// Non-empty key, at most `max_key_bytes`.
        key: &'a [u8],
        /// Value, possibly empty, at most `max_value_bytes`.
        value: &'a [u8],
        /// `NX`, `NEX` or neither.
        condition: SetCondition,
        /// `PX ms`: expire this many milliseconds after the write.
        expire_after_ms: Option<u64>,
    },
    /// `GET key`.
    Get {
        /// Non-empty key, at most `max_key_bytes`.
        key: &'a [u8],
    },
    /// `DEL key`.
    Del {
        /// Non-empty key, at most `max_key_bytes`.
        key: &'a [u8],
    },
    /// `VDEL key value`: delete only if the current value equals `value`.
    VDel {
        /// Non-empty key, at most `max_key_bytes`.
        key: &'a [u8],
        /// Value the stored one must equal, at most `max_value_bytes`.
        value: &'a [u8],
    },
    /// `KEYNOTIFY key [STOP]`.
    KeyNotify {
        /// Non-empty key, at most `max_key_bytes`.
        key: &'a [u8],
        /// `true` for `STOP` (unregister), `false` to register.
        stop: bool,
    },
    /// `SCAN pattern [token]`: one page of the keys matching a glob pattern.
    Scan {
        /// The compiled pattern (at most `max_key_bytes` long).
        pattern: Glob,
        /// Where the page starts: after this key (from the token), or at the first key.
        after: Option<&'a [u8]>,
    },
}

impl Command<'_> {
    /// The verb of this command, as a metric label source.
    pub fn verb(&self) -> CommandVerb {
        match self {
            Command::Set { .. } => CommandVerb::Set,
            Command::Get { .. } => CommandVerb::Get,
            Command::Del { .. } => CommandVerb::Del,
            Command::VDel { .. } => CommandVerb::VDel,
            Command::KeyNotify { .. } => CommandVerb::KeyNotify,
            Command::Scan { .. } => CommandVerb::Scan,
        }
    }

    /// The key the command acts on (`None` for SCAN, which reads many).
    pub fn key(&self) -> Option<&[u8]> {
        match self {
            Command::Set { key, .. }
            | Command::Get { key }
            | Command::Del { key }
            | Command::VDel { key, .. }
            | Command::KeyNotify { key, .. } => Some(key),
            Command::Scan { .. } => None,
        }
    }

    /// Whether the command changes replicated state (every command but GET and SCAN;
    /// KEYNOTIFY changes the registrations). Mutations are de-duplicated (§6).
    pub fn is_mutation(&self) -> bool {
        !matches!(self, Command::Get { .. } | Command::Scan { .. })
    }
}

/// The closed set of verbs, used as a metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CommandVerb {
    /// `SET`.
    Set,
    /// `GET`.
    Get,
    /// `DEL`.
    Del,
    /// `VDEL`.
    VDel,
    /// `KEYNOTIFY`.
    KeyNotify,
    /// `SCAN`.
    Scan,
    /// Anything that is not one of the verbs above, or could not be read.
    Unknown,
}

impl CommandVerb {
    /// Every verb, for registering metric label values up front.
    pub const ALL: [CommandVerb; 7] = [
        CommandVerb::Set,
        CommandVerb::Get,
        CommandVerb::Del,
        CommandVerb::VDel,
        CommandVerb::KeyNotify,
        CommandVerb::Scan,
        CommandVerb::Unknown,
    ];

    /// Lower-case metric label: `set`, `get`, `del`, `vdel`, `keynotify`, `scan`, `unknown`.
    pub fn label(&self) -> &'static str {
        match self {
            CommandVerb::Set => "set",
            CommandVerb::Get => "get",
            CommandVerb::Del => "del",
            CommandVerb::VDel => "vdel",
            CommandVerb::KeyNotify => "keynotify",
            CommandVerb::Scan => "scan",
            CommandVerb::Unknown => "unknown",
        }
    }

    /// The verb named by `name`, matched case-insensitively (spec §2).
    fn from_name(name: &[u8]) -> CommandVerb {
        const NAMED: [(&[u8], CommandVerb); 6] = [
            (b"SET", CommandVerb::Set),
            (b"GET", CommandVerb::Get),
            (b"DEL", CommandVerb::Del),
            (b"VDEL", CommandVerb::VDel),
            (b"KEYNOTIFY", CommandVerb::KeyNotify),
            (b"SCAN", CommandVerb::Scan),
        ];
        NAMED
            .iter()
            .find(|(verb_name, _)| name.eq_ignore_ascii_case(verb_name))
            .map_or(CommandVerb::Unknown, |&(_, verb)| verb)
    }
}

/// The longest verb name (`KEYNOTIFY`); longer first elements cannot be a verb.
const LONGEST_VERB_BYTES: usize = 9;

/// Parse framing (spec §2, §9), then semantics: verb (`unknown command`), then
/// arity (`wrong number of arguments`), then key (`the key length is zero`, or
/// `syntax error` over the limit), then value length, then options (`syntax
/// error`).
pub fn parse_command<'a>(
    payload: &'a [u8],
    limits: &ProtocolLimits,
) -> Result<Command<'a>, ProtocolError> {
    let elements = parse_request(payload, limits)?;
    let Some((&verb_name, arguments)) = elements.split_first() else {
        return Err(ProtocolError::Syntax);
    };
    match CommandVerb::from_name(verb_name) {
        CommandVerb::Set => parse_set(arguments, limits),
        CommandVerb::Get => match *arguments {
            [key] => Ok(Command::Get {
                key: checked_key(key, limits)?,
            }),
            _ => Err(ProtocolError::WrongArity),
        },
        CommandVerb::Del => match *arguments {
            [key] => Ok(Command::Del {
                key: checked_key(key, limits)?,
            }),
            _ => Err(ProtocolError::WrongArity),
        },
        CommandVerb::VDel => match *arguments {
            [key, value] => Ok(Command::VDel {
                key: checked_key(key, limits)?,
                value: checked_value(value, limits)?,
            }),
            _ => Err(ProtocolError::WrongArity),
        },
        CommandVerb::KeyNotify => parse_key_notify(arguments, limits),
        CommandVerb::Scan => parse_scan(arguments, limits),
        CommandVerb::Unknown => Err(ProtocolError::UnknownCommand),
    }
}

/// Cheap best-effort verb sniff for metrics when parsing failed: the first
/// element of something that starts like a request array, matched
/// case-insensitively; [`CommandVerb::Unknown`] otherwise.
pub fn sniff_verb(payload: &[u8]) -> CommandVerb {
    sniff_first_element(payload, LONGEST_VERB_BYTES)
        .map_or(CommandVerb::Unknown, CommandVerb::from_name)
}

/// `SET key value [NX | NEX] [PX ms]`, options in any order (spec §2).
fn parse_set<'a>(
    arguments: &[&'a [u8]],
    limits: &ProtocolLimits,
) -> Result<Command<'a>, ProtocolError> {
    const MAX_OPTION_ELEMENTS: usize = 3;
    let [key, value, ref options @ ..] = *arguments else {
        return Err(ProtocolError::WrongArity);
    };
    if options.len() > MAX_OPTION_ELEMENTS {
        return Err(ProtocolError::WrongArity);
    }
    let key = checked_key(key, limits)?;
    let value = checked_value(value, limits)?;

    let mut condition = None;
    let mut expire_after_ms = None;
    let mut unread_options = options;
    while let [option, after_option @ ..] = unread_options {
        unread_options = after_option;
        if option.eq_ignore_ascii_case(b"NX") {
            set_once(&mut condition, SetCondition::IfAbsent)?;
        } else if option.eq_ignore_ascii_case(b"NEX") {
            set_once(&mut condition, SetCondition::IfAbsentOrEqual)?;
        } else if option.eq_ignore_ascii_case(b"PX") {
            let [milliseconds, after_milliseconds @ ..] = after_option else {
                return Err(ProtocolError::Syntax);
            };
            unread_options = after_milliseconds;
            set_once(&mut expire_after_ms, parse_px(milliseconds, limits)?)?;
        } else {
            return Err(ProtocolError::Syntax);
        }
    }
    Ok(Command::Set {
        key,
        value,
        condition: condition.unwrap_or(SetCondition::Always),
        expire_after_ms,
    })
}

/// `KEYNOTIFY key [STOP]` (spec §2).
fn parse_key_notify<'a>(
    arguments: &[&'a [u8]],
    limits: &ProtocolLimits,
) -> Result<Command<'a>, ProtocolError> {
    let (key, option) = match *arguments {
        [key] => (key, None),
        [key, option] => (key, Some(option)),
        _ => return Err(ProtocolError::WrongArity),
    };
    let key = checked_key(key, limits)?;
    let stop = match option {
        None => false,
        Some(option) if option.eq_ignore_ascii_case(b"STOP") => true,
        Some(_) => return Err(ProtocolError::Syntax),
    };
    Ok(Command::KeyNotify { key, stop })
}

/// `SCAN pattern [token]` (spec §2, issue 12): the pattern is at most `max_key_bytes` long,
/// at most [`super::glob::MAX_PATTERN_ELEMENTS`] elements and within the range caps
/// ([`super::glob::MAX_CLASS_RANGES`], [`super::glob::MAX_PATTERN_RANGES`]); the token is one
/// this store issued. Anything else is `syntax error`.
fn parse_scan<'a>(
    arguments: &[&'a [u8]],
    limits: &ProtocolLimits,
) -> Result<Command<'a>, ProtocolError> {
    let (pattern, token) = match *arguments {
        [pattern] => (pattern, None),
        [pattern, token] => (pattern, Some(token)),
        _ => return Err(ProtocolError::WrongArity),
    };
    if pattern.len() > limits.max_key_bytes {
        return Err(ProtocolError::Syntax);
    }
    let pattern = Glob::compile(pattern).map_err(|_| ProtocolError::Syntax)?;
    let after = resume_after(token)?;
    if after.is_some_and(|key| key.len() > limits.max_key_bytes) {
        return Err(ProtocolError::Syntax);
    }
    Ok(Command::Scan { pattern, after })
}

/// Stores `value` in an empty slot; a second occurrence of the same kind of
/// option is `syntax error` (this also refuses `NX` together with `NEX`, and
/// `TTL` together with `EXPIRES` in device-bound SEND).
pub(crate) fn set_once<T>(slot: &mut Option<T>, value: T) -> Result<(), ProtocolError> {
    if slot.is_some() {
        return Err(ProtocolError::Syntax);
    }
    *slot = Some(value);
    Ok(())
}

/// `PX` argument: ASCII digits only, value in `1..=max_px_ms` (spec §2, §9).
fn parse_px(milliseconds: &[u8], limits: &ProtocolLimits) -> Result<u64, ProtocolError> {
    match parse_decimal(milliseconds, limits.max_px_ms) {
        Some(0) | None => Err(ProtocolError::Syntax),
        Some(milliseconds) => Ok(milliseconds),
    }
}

fn checked_key<'a>(key: &'a [u8], limits: &ProtocolLimits) -> Result<&'a [u8], ProtocolError> {
    if key.is_empty() {
        Err(ProtocolError::EmptyKey)
    } else if key.len() > limits.max_key_bytes {
        Err(ProtocolError::Syntax)
    } else {
        Ok(key)
    }
}

fn checked_value<'a>(value: &'a [u8], limits: &ProtocolLimits) -> Result<&'a [u8], ProtocolError> {
    if value.len() > limits.max_value_bytes {
        Err(ProtocolError::Syntax)
    } else {
        Ok(value)
    }
}

#[cfg(test)]
mod tests;
