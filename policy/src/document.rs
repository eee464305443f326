//! The policy text read into checked values: the TOML parsed, then every rule's fields checked
//! and converted one by one, so that an error names the rule, the field and the bad value.

use std::collections::{BTreeMap, HashMap};

use base64::Engine as _;
use serde::Deserialize;
use statestore_protocol::glob::{
    Glob, GlobError, MAX_CLASS_RANGES, MAX_PATTERN_ELEMENTS, MAX_PATTERN_RANGES,
};
use toml::{Spanned, Value};

use crate::error::{PolicyError, cut_message, quote};
use crate::grants::{DeviceAction, KeyAccess};
use crate::{MAX_ENTRIES, MAX_GROUPS, MAX_ITEM_BYTES, MAX_POLICY_BYTES, MAX_RULES};

/// A principal, group member or device id: exact text, or a SCAN glob over it.
#[derive(Debug)]
pub(crate) enum Matcher {
    Exact(String),
    Glob(String, Glob),
}

/// A state store key: exact bytes (an exact pattern, a `string` or a `binary` key), or a glob.
#[derive(Debug)]
pub(crate) enum Key {
    Exact(Vec<u8>),
    Glob(String, Glob),
}

/// Whom a rule applies to.
#[derive(Debug)]
pub(crate) struct Subjects {
    pub(crate) principals: Vec<Matcher>,
    /// Indices into [`Document::groups`].
    pub(crate) groups: Vec<usize>,
}

#[derive(Debug)]
pub(crate) struct Group {
    pub(crate) members: Vec<Matcher>,
}

#[derive(Debug)]
pub(crate) struct StateStoreRule {
    pub(crate) subjects: Subjects,
    pub(crate) keys: Vec<Key>,
    /// [`KeyAccess::bit`]s.
    pub(crate) access: u8,
}

#[derive(Debug)]
pub(crate) struct DeviceboundRule {
    pub(crate) subjects: Subjects,
    pub(crate) devices: Vec<Matcher>,
    /// [`DeviceAction::bit`]s.
    pub(crate) actions: u8,
}

/// A policy whose every part was checked.
#[derive(Debug)]
pub(crate) struct Document {
    /// In name order.
    pub(crate) groups: Vec<Group>,
    pub(crate) state_store: Vec<StateStoreRule>,
    pub(crate) devicebound: Vec<DeviceboundRule>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDocument {
    #[serde(default)]
    groups: BTreeMap<String, Spanned<Value>>,
    #[serde(default)]
    state_store: Vec<Spanned<toml::Table>>,
    #[serde(default)]
    devicebound: Vec<Spanned<toml::Table>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStateStore {
    principals: Option<Value>,
    groups: Option<Value>,
    key_type: Option<Value>,
    encoding: Option<Value>,
    keys: Option<Value>,
    method: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDevicebound {
    principals: Option<Value>,
    groups: Option<Value>,
    devices: Option<Value>,
    actions: Option<Value>,
}

/// Where a value is, for messages: `state_store[3]`, `groups."operators"`, and the line.
struct Place {
    prefix: String,
    line: Option<usize>,
}

impl Place {
    /// The place itself: `state_store[3] (line 12)`.
    fn whole(&self) -> String {
        self.render(None, None)
    }

    /// One field: `state_store[3].keys (line 12)`.
    fn field(&self, field: &str) -> String {
        self.render(Some(field), None)
    }

    /// One entry of a list field (or, with `field` empty, of the place itself).
    fn entry(&self, field: &str, index: usize) -> String {
        self.render(Some(field), Some(index))
    }

    fn render(&self, field: Option<&str>, index: Option<usize>) -> String {
        let mut at = self.prefix.clone();
        if let Some(field) = field.filter(|field| !field.is_empty()) {
            at.push('.');
            at.push_str(field);
        }
        if let Some(index) = index {
            at.push_str(&format!("[{index}]"));
        }
        if let Some(line) = self.line {
            at.push_str(&format!(" (line {line})"));
        }
        at
    }
}

/// Line (from 1) and column (in characters, from 1) of byte `offset` of `text`.
pub(crate) fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = text.get(..offset).unwrap_or_default();
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |newline| newline + 1);
    let column = before.get(line_start..).unwrap_or_default().chars().count() + 1;
    (line, column)
}

/// Reads and checks a policy text.
pub(crate) fn read(text: &str) -> Result<Document, PolicyError> {
    if text.len() > MAX_POLICY_BYTES {
        return Err(PolicyError::TooLarge { bytes: text.len() });
    }
    let raw: RawDocument = toml::from_str(text).map_err(|error| {
        let (line, column) = error
            .span()
            .map_or((0, 0), |span| line_and_column(text, span.start));
        PolicyError::Toml {
            line,
            column,
            message: cut_message(error.message()),
        }
    })?;
    let rules = raw.state_store.len() + raw.devicebound.len();
    if rules > MAX_RULES {
        return Err(PolicyError::invalid(
            "policy",
            format!("has {rules} rules (state_store and devicebound), more than {MAX_RULES}"),
        ));
    }
    if raw.groups.len() > MAX_GROUPS {
        return Err(PolicyError::invalid(
            "groups",
            format!("has {} groups, more than {MAX_GROUPS}", raw.groups.len()),
        ));
    }
    let mut groups = Vec::with_capacity(raw.groups.len());
    let mut group_index = HashMap::with_capacity(raw.groups.len());
    for (name, value) in raw.groups {
        let place = Place {
            prefix: format!("groups.{}", quote(&name)),
            line: Some(line_and_column(text, value.span().start).0),
        };
        if name.is_empty() {
            return Err(PolicyError::invalid(place.whole(), "empty group name"));
        }
        if name.len() > MAX_ITEM_BYTES {
            return Err(PolicyError::invalid(place.whole(), too_long(name.len())));
        }
        let members = strings(value.into_inner(), &place, "")?
            .into_iter()
            .enumerate()
            .map(|(index, member)| matcher(member, || place.entry("", index)))
            .collect::<Result<Vec<_>, _>>()?;
        group_index.insert(name, groups.len());
        groups.push(Group { members });
    }
    let mut state_store = Vec::with_capacity(raw.state_store.len());
    for (index, table) in raw.state_store.into_iter().enumerate() {
        let place = Place {
            prefix: format!("state_store[{index}]"),
            line: Some(line_and_column(text, table.span().start).0),
        };
        state_store.push(state_store_rule(table.into_inner(), &place, &group_index)?);
    }
    let mut devicebound = Vec::with_capacity(raw.devicebound.len());
    for (index, table) in raw.devicebound.into_iter().enumerate() {
        let place = Place {
            prefix: format!("devicebound[{index}]"),
            line: Some(line_and_column(text, table.span().start).0),
        };
        devicebound.push(devicebound_rule(table.into_inner(), &place, &group_index)?);
    }
    Ok(Document {
        groups,
        state_store,
        devicebound,
    })
}

fn state_store_rule(
    table: toml::Table,
    place: &Place,
    group_index: &HashMap<String, usize>,
) -> Result<StateStoreRule, PolicyError> {
    let raw: RawStateStore = Value::Table(table)
        .try_into()
        .map_err(|error: toml::de::Error| {
            PolicyError::invalid(place.whole(), cut_message(error.message()))
        })?;
    let subjects = subjects(raw.principals, raw.groups, place, group_index)?;
    let key_type = match raw.key_type {
        None => KeyType::Pattern,
        Some(value) => match string(value, || place.field("key_type"))?.as_str() {
            "pattern" => KeyType::Pattern,
            "string" => KeyType::String,
            "binary" => KeyType::Binary,
            other => {
                return Err(PolicyError::invalid(
                    place.field("key_type"),
                    format!(
                        "invalid key_type {}: expected \"pattern\", \"string\" or \"binary\"",
                        quote(other)
                    ),
                ));
            }
        },
    };
    let encoding = match raw.encoding {
        None => Encoding::Base64,
        Some(_) if key_type != KeyType::Binary => {
            return Err(PolicyError::invalid(
                place.field("encoding"),
                "only allowed with key_type = \"binary\"",
            ));
        }
        Some(value) => match string(value, || place.field("encoding"))?.as_str() {
            "base64" => Encoding::Base64,
            "hex" => Encoding::Hex,
            other => {
                return Err(PolicyError::invalid(
                    place.field("encoding"),
                    format!(
                        "invalid encoding {}: expected \"base64\" or \"hex\"",
                        quote(other)
                    ),
                ));
            }
        },
    };
    let keys = required(raw.keys, place, "keys")?;
    let keys = non_empty(strings(keys, place, "keys")?, place, "keys")?
        .into_iter()
        .enumerate()
        .map(|(index, text)| key(text, key_type, encoding, || place.entry("keys", index)))
        .collect::<Result<Vec<_>, _>>()?;
    let method = required(raw.method, place, "method")?;
    let access = match string(method, || place.field("method"))?.as_str() {
        "Read" => KeyAccess::Read.bit(),
        "Write" => KeyAccess::Write.bit(),
        "ReadWrite" => KeyAccess::Read.bit() | KeyAccess::Write.bit(),
        other => {
            return Err(PolicyError::invalid(
                place.field("method"),
                format!(
                    "invalid method {}: expected \"Read\", \"Write\" or \"ReadWrite\"",
                    quote(other)
                ),
            ));
        }
    };
    Ok(StateStoreRule {
        subjects,
        keys,
        access,
    })
}

fn devicebound_rule(
    table: toml::Table,
    place: &Place,
    group_index: &HashMap<String, usize>,
) -> Result<DeviceboundRule, PolicyError> {
    let raw: RawDevicebound =
        Value::Table(table)
            .try_into()
            .map_err(|error: toml::de::Error| {
                PolicyError::invalid(place.whole(), cut_message(error.message()))
            })?;
    let subjects = subjects(raw.principals, raw.groups, place, group_index)?;
    let devices = required(raw.devices, place, "devices")?;
    let devices = non_empty(strings(devices, place, "devices")?, place, "devices")?
        .into_iter()
        .enumerate()
        .map(|(index, device)| matcher(device, || place.entry("devices", index)))
        .collect::<Result<Vec<_>, _>>()?;
    let actions = required(raw.actions, place, "actions")?;
    let mut bits = 0;
    for (index, action) in non_empty(strings(actions, place, "actions")?, place, "actions")?
        .into_iter()
        .enumerate()
    {
        bits |= match action.as_str() {
            "send" => DeviceAction::Send.bit(),
            "purge" => DeviceAction::Purge.bit(),
            "forget" => DeviceAction::Forget.bit(),
            "read" => DeviceAction::Read.bit(),
            "feedback" => DeviceAction::Feedback.bit(),
            other => {
                return Err(PolicyError::invalid(
                    place.entry("actions", index),
                    format!(
                        "invalid action {}: expected \"send\", \"purge\", \"forget\", \"read\" \
                         or \"feedback\"",
                        quote(other)
                    ),
                ));
            }
        };
    }
    Ok(DeviceboundRule {
        subjects,
        devices,
        actions: bits,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyType {
    Pattern,
    String,
    Binary,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Base64,
    Hex,
}

/// Standard alphabet; padding optional; trailing bits must be zero.
const BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

fn subjects(
    principals: Option<Value>,
    groups: Option<Value>,
    place: &Place,
    group_index: &HashMap<String, usize>,
) -> Result<Subjects, PolicyError> {
    let principals = match principals {
        None => Vec::new(),
        Some(value) => strings(value, place, "principals")?
            .into_iter()
            .enumerate()
            .map(|(index, principal)| matcher(principal, || place.entry("principals", index)))
            .collect::<Result<Vec<_>, _>>()?,
    };
    let groups = match groups {
        None => Vec::new(),
        Some(value) => strings(value, place, "groups")?
            .into_iter()
            .enumerate()
            .map(|(index, name)| {
                group_index.get(&name).copied().ok_or_else(|| {
                    PolicyError::invalid(
                        place.entry("groups", index),
                        format!("unknown group {}", quote(&name)),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?,
    };
    if principals.is_empty() && groups.is_empty() {
        return Err(PolicyError::invalid(
            place.whole(),
            "needs principals or groups (neither is given or both are empty)",
        ));
    }
    Ok(Subjects { principals, groups })
}

fn required(value: Option<Value>, place: &Place, field: &str) -> Result<Value, PolicyError> {
    value.ok_or_else(|| PolicyError::invalid(place.whole(), format!("missing field `{field}`")))
}

fn non_empty(list: Vec<String>, place: &Place, field: &str) -> Result<Vec<String>, PolicyError> {
    if list.is_empty() {
        return Err(PolicyError::invalid(
            place.field(field),
            "must not be empty",
        ));
    }
    Ok(list)
}

/// `value` as an array of at most [`MAX_ENTRIES`] strings.
fn strings(value: Value, place: &Place, field: &str) -> Result<Vec<String>, PolicyError> {
    let Value::Array(array) = value else {
        return Err(PolicyError::invalid(
            place.field(field),
            format!("expected an array of strings, found {}", value.type_str()),
        ));
    };
    if array.len() > MAX_ENTRIES {
        return Err(PolicyError::invalid(
            place.field(field),
            format!("has {} entries, more than {MAX_ENTRIES}", array.len()),
        ));
    }
    array
        .into_iter()
        .enumerate()
        .map(|(index, value)| string(value, || place.entry(field, index)))
        .collect()
}

fn string(value: Value, at: impl FnOnce() -> String) -> Result<String, PolicyError> {
    match value {
        Value::String(text) => Ok(text),
        other => Err(PolicyError::invalid(
            at(),
            format!("expected a string, found {}", other.type_str()),
        )),
    }
}

fn too_long(bytes: usize) -> String {
    format!("is {bytes} bytes, more than {MAX_ITEM_BYTES}")
}

/// True if `text` is a glob rather than exact text: it has a `*`, `?` or `[`.
pub(crate) fn is_glob(text: &str) -> bool {
    text.contains(['*', '?', '['])
}

fn compile(text: &str, at: impl FnOnce() -> String) -> Result<Glob, PolicyError> {
    Glob::compile(text.as_bytes()).map_err(|error| {
        let why = match error {
            GlobError::TooComplex => {
                format!("more than {MAX_PATTERN_ELEMENTS} elements (a run of `*` counts as one)")
            }
            GlobError::ClassTooLarge => {
                format!("a bracket expression lists more than {MAX_CLASS_RANGES} members")
            }
            GlobError::TooManyRanges => format!(
                "the bracket expressions list more than {MAX_PATTERN_RANGES} members in all"
            ),
        };
        PolicyError::invalid(at(), format!("invalid glob {}: {why}", quote(text)))
    })
}

/// A principal, group member or device id.
fn matcher(text: String, at: impl Fn() -> String) -> Result<Matcher, PolicyError> {
    if text.is_empty() {
        return Err(PolicyError::invalid(at(), "must not be empty"));
    }
    if text.len() > MAX_ITEM_BYTES {
        return Err(PolicyError::invalid(at(), too_long(text.len())));
    }
    if is_glob(&text) {
        let glob = compile(&text, at)?;
        return Ok(Matcher::Glob(text, glob));
    }
    Ok(Matcher::Exact(text))
}

fn key(
    text: String,
    key_type: KeyType,
    encoding: Encoding,
    at: impl Fn() -> String,
) -> Result<Key, PolicyError> {
    if text.is_empty() {
        return Err(PolicyError::invalid(at(), "must not be empty"));
    }
    let bytes = match key_type {
        KeyType::Pattern if is_glob(&text) => {
            if text.len() > MAX_ITEM_BYTES {
                return Err(PolicyError::invalid(at(), too_long(text.len())));
            }
            let glob = compile(&text, at)?;
            return Ok(Key::Glob(text, glob));
        }
        KeyType::Pattern | KeyType::String => text.into_bytes(),
        KeyType::Binary => match encoding {
            Encoding::Base64 => BASE64.decode(&text).map_err(|error| {
                PolicyError::invalid(at(), format!("invalid base64 {}: {error}", quote(&text)))
            })?,
            Encoding::Hex => hex::decode(&text).map_err(|error| {
                PolicyError::invalid(at(), format!("invalid hex {}: {error}", quote(&text)))
            })?,
        },
    };
    if bytes.is_empty() {
        return Err(PolicyError::invalid(at(), "must not be empty"));
    }
    if bytes.len() > MAX_ITEM_BYTES {
        return Err(PolicyError::invalid(at(), too_long(bytes.len())));
    }
    Ok(Key::Exact(bytes))
}

#[cfg(test)]
mod tests;
