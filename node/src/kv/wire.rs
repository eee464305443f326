//! The client side of the state store protocol, pure: request payloads (spec §2), replies
//! (§2, §3) and KEYNOTIFY notifications (§7) for `statestore kv`. No I/O.

use crate::protocol::{NOTIFY_DELETE_PAYLOAD, ProtocolLimits, encode_bulk, parse_request};

/// A request array of bulk strings.
pub fn request(parts: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(parts.iter().map(|p| p.len() + 16).sum::<usize>() + 8);
    out.push(b'*');
    out.extend_from_slice(parts.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    for part in parts {
        encode_bulk(&mut out, part);
    }
    out
}

/// A reply of the state store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`.
    Ok,
    /// `$<n>` bulk string: a GET's value.
    Value(Vec<u8>),
    /// `$-1` or `_`: no such key.
    Nil,
    /// `:<n>`: DEL/VDEL counts, `-1` for a condition that did not hold.
    Integer(i64),
    /// `-<message>`.
    Error(String),
}

/// Parses one reply payload; `None` if it is not exactly one well-formed reply.
pub fn parse_reply(payload: &[u8]) -> Option<Reply> {
    let line_end = payload.windows(2).position(|w| w == b"\r\n")?;
    let (line, rest) = (&payload[..line_end], &payload[line_end + 2..]);
    let (&kind, body) = line.split_first()?;
    let text = std::str::from_utf8(body).ok()?;
    let single_line = |reply: Reply| rest.is_empty().then_some(reply);
    match kind {
        b'+' if text == "OK" => single_line(Reply::Ok),
        b'-' => single_line(Reply::Error(text.to_owned())),
        b':' => single_line(Reply::Integer(text.parse().ok()?)),
        b'_' if text.is_empty() => single_line(Reply::Nil),
        b'$' if text == "-1" => single_line(Reply::Nil),
        b'$' => {
            let len: usize = text.parse().ok()?;
            let value = rest.get(..len)?;
            (rest.get(len..)? == b"\r\n").then(|| Reply::Value(value.to_vec()))
        }
        _ => None,
    }
}

/// A change announced by a KEYNOTIFY notification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notification {
    /// The key was set to this value.
    Set(Vec<u8>),
    /// The key was deleted (DEL, VDEL or expiry).
    Delete,
}

/// Parses a notification payload (§7); `None` if it is neither form.
pub fn parse_notification(payload: &[u8]) -> Option<Notification> {
    if payload == NOTIFY_DELETE_PAYLOAD {
        return Some(Notification::Delete);
    }
    let limits = ProtocolLimits {
        max_array_len: 4,
        max_key_bytes: usize::MAX,
        max_value_bytes: usize::MAX,
        ..ProtocolLimits::default()
    };
    match parse_request(payload, &limits).ok()?.as_slice() {
        [b"NOTIFY", b"SET", b"VALUE", value] => Some(Notification::Set(value.to_vec())),
        _ => None,
    }
}

/// The key of a notification topic `…/command/notify/<HEX(key)>` (§7).
pub fn notified_key(topic: &str) -> Option<Vec<u8>> {
    let (_, hex_key) = topic.rsplit_once("/command/notify/")?;
    hex::decode(hex_key).ok()
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
