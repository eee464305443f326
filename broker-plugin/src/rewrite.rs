//! The property list of a store request, as owned values: read from Mosquitto's list by the
//! FFI, rewritten here (every client-supplied copy of the vouched property removed, the
//! broker's one appended), and written back as a new list.

/// MQTT 5 property identifiers (mqtt_protocol.h, `enum mqtt5_property`) this module names.
pub mod id {
    /// Payload format indicator (byte).
    pub const PAYLOAD_FORMAT_INDICATOR: i32 = 1;
    /// Content type (string).
    pub const CONTENT_TYPE: i32 = 3;
    /// Response topic (string).
    pub const RESPONSE_TOPIC: i32 = 8;
    /// Correlation data (binary).
    pub const CORRELATION_DATA: i32 = 9;
    /// User property (string pair).
    pub const USER_PROPERTY: i32 = 38;
}

/// At most this many properties on one request; more are refused as an error (Mosquitto's
/// own limit is the packet size).
pub const MAX_PROPERTIES: usize = 4_096;

/// The value type of a property identifier (mqtt_protocol.h, `enum mqtt5_property` comments).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// One byte.
    Byte,
    /// Two-byte integer.
    Int16,
    /// Four-byte integer.
    Int32,
    /// Variable byte integer.
    Varint,
    /// Binary data.
    Binary,
    /// UTF-8 string.
    String,
    /// UTF-8 string pair.
    StringPair,
}

/// The kind of property `identifier`, `None` for an identifier MQTT 5 does not define.
pub fn kind(identifier: i32) -> Option<Kind> {
    Some(match identifier {
        1 | 23 | 25 | 36 | 37 | 40 | 41 | 42 => Kind::Byte,
        19 | 33 | 34 | 35 => Kind::Int16,
        2 | 17 | 24 | 39 => Kind::Int32,
        11 => Kind::Varint,
        9 | 22 => Kind::Binary,
        3 | 8 | 18 | 21 | 26 | 28 | 31 => Kind::String,
        38 => Kind::StringPair,
        _ => return None,
    })
}

/// One property, owned. Strings are bytes as Mosquitto holds them (it has checked them as
/// UTF-8 without NUL).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Prop {
    /// A byte property.
    Byte(i32, u8),
    /// A two-byte integer property.
    Int16(i32, u16),
    /// A four-byte integer property.
    Int32(i32, u32),
    /// A variable byte integer property.
    Varint(i32, u32),
    /// A binary property.
    Binary(i32, Vec<u8>),
    /// A string property.
    String(i32, Vec<u8>),
    /// A string pair (user property): name, value.
    Pair(i32, Vec<u8>, Vec<u8>),
}

impl Prop {
    /// Its identifier.
    pub fn identifier(&self) -> i32 {
        match self {
            Prop::Byte(i, _)
            | Prop::Int16(i, _)
            | Prop::Int32(i, _)
            | Prop::Varint(i, _)
            | Prop::Binary(i, _)
            | Prop::String(i, _)
            | Prop::Pair(i, _, _) => *i,
        }
    }
}

/// The response topic property's value, if any (the first: MQTT allows one).
pub fn response_topic(props: &[Prop]) -> Option<&[u8]> {
    props.iter().find_map(|p| match p {
        Prop::String(id::RESPONSE_TOPIC, v) => Some(v.as_slice()),
        _ => None,
    })
}

/// The rewritten list: `props` in order without any user property named `name`, then
/// `name = identity`; and how many copies were removed.
pub fn vouch(props: Vec<Prop>, name: &str, identity: &str) -> (Vec<Prop>, usize) {
    let before = props.len();
    let mut kept: Vec<Prop> = props
        .into_iter()
        .filter(|p| !matches!(p, Prop::Pair(id::USER_PROPERTY, n, _) if n == name.as_bytes()))
        .collect();
    let removed = before - kept.len();
    kept.push(Prop::Pair(
        id::USER_PROPERTY,
        name.as_bytes().to_vec(),
        identity.as_bytes().to_vec(),
    ));
    (kept, removed)
}

#[cfg(test)]
mod tests;
