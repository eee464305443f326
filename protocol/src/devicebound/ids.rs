//! The identifiers of device-bound messaging (devicebound.md §1–§3): device ids
//! (IoT Hub's alphabet), message ids, lock tokens, and the rule for text that
//! must travel as an MQTT 5 string (user property names and values).

use crate::ProtocolError;

/// Longest device id, in bytes (IoT Hub: 128).
pub const MAX_DEVICE_ID_BYTES: usize = 128;

/// Longest message id, in bytes (IoT Hub: 128).
pub const MAX_MESSAGE_ID_BYTES: usize = 128;

/// Longest lock token, in bytes (devicebound.md §1).
pub const MAX_LOCK_TOKEN_BYTES: usize = 64;

/// The punctuation IoT Hub allows in a device id besides ASCII letters and
/// digits: `-.%_*?!(),:=@$'`. None of them is an MQTT topic separator or
/// wildcard, so a valid device id is always one topic level.
const DEVICE_ID_PUNCTUATION: &[u8] = b"-.%_*?!(),:=@$'";

/// Whether `byte` may appear in a device id.
fn is_device_id_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || DEVICE_ID_PUNCTUATION.contains(&byte)
}

/// The device id as text: 1–128 bytes of `[A-Za-z0-9-.%_*?!(),:=@$']`
/// (devicebound.md §1); anything else is [`ProtocolError::InvalidDeviceId`].
pub fn validate_device_id(bytes: &[u8]) -> Result<&str, ProtocolError> {
    let well_formed = !bytes.is_empty()
        && bytes.len() <= MAX_DEVICE_ID_BYTES
        && bytes.iter().all(|&byte| is_device_id_byte(byte));
    if !well_formed {
        return Err(ProtocolError::InvalidDeviceId);
    }
    std::str::from_utf8(bytes).map_err(|_| ProtocolError::InvalidDeviceId)
}

/// The message id as text: 1–128 bytes (devicebound.md §2) that an MQTT 5 user
/// property can carry ([`as_mqtt_text`]), because it is delivered as `$.mid`;
/// anything else is [`ProtocolError::InvalidMessageId`].
pub fn validate_message_id(bytes: &[u8]) -> Result<&str, ProtocolError> {
    if bytes.is_empty() || bytes.len() > MAX_MESSAGE_ID_BYTES {
        return Err(ProtocolError::InvalidMessageId);
    }
    as_mqtt_text(bytes).ok_or(ProtocolError::InvalidMessageId)
}

/// A lock token: 1–64 bytes of printable ASCII other than space, `/`, `+` and
/// `#` (devicebound.md §1, §3), so that it is always exactly one topic level of
/// a settle topic. Space is left out too, although printable: tokens are made
/// by the node, and one without spaces survives logs and shells unquoted.
pub fn is_valid_lock_token(token: &str) -> bool {
    !token.is_empty()
        && token.len() <= MAX_LOCK_TOKEN_BYTES
        && token
            .bytes()
            .all(|byte| byte.is_ascii_graphic() && !matches!(byte, b'/' | b'+' | b'#'))
}

/// `bytes` as a string an MQTT 5 broker accepts in a user property or topic
/// (MQTT 5 §1.5.4): well-formed UTF-8 without U+0000, without the control
/// characters U+0001–U+001F and U+007F–U+009F, and without Unicode
/// non-characters. The spec only forbids U+0000 outright, but lets a receiver
/// close the connection on the others (Mosquitto does), and a message the broker
/// refuses would stall its device's queue; so such text is refused at the door.
pub fn as_mqtt_text(bytes: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(bytes).ok()?;
    text.chars().all(is_mqtt_char).then_some(text)
}

/// Whether an MQTT 5 receiver must or may refuse `character` (see [`as_mqtt_text`]).
fn is_mqtt_char(character: char) -> bool {
    let code = u32::from(character);
    let control = code <= 0x1F || (0x7F..=0x9F).contains(&code);
    let non_character = (0xFDD0..=0xFDEF).contains(&code) || code & 0xFFFE == 0xFFFE;
    !control && !non_character
}
