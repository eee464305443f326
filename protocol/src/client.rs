//! The client side of the state store protocol, pure: request payloads (spec §2), replies
//! (§2, §3) and KEYNOTIFY notifications (§7) for `statestore kv`. No I/O.

use crate::{NOTIFY_DELETE_PAYLOAD, ProtocolLimits, encode_bulk, parse_request};

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

/// One SCAN page: its keys, and the token of the next page (none on the last).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeysPage {
    /// The page's keys, in key order.
    pub keys: Vec<Vec<u8>>,
    /// Pass it to the next SCAN; `None`: the scan is complete.
    pub next: Option<Vec<u8>>,
}

/// Splits `*<n>\r\n` (or another one-line header of `kind`) off `payload`.
fn header(payload: &[u8], kind: u8) -> Option<(usize, &[u8])> {
    let line_end = payload.windows(2).position(|w| w == b"\r\n")?;
    let (&found, count) = payload[..line_end].split_first()?;
    if found != kind {
        return None;
    }
    let count = std::str::from_utf8(count).ok()?.parse().ok()?;
    Some((count, &payload[line_end + 2..]))
}

/// Splits one bulk string `$<n>\r\n<n bytes>\r\n` off `payload`.
fn bulk(payload: &[u8]) -> Option<(&[u8], &[u8])> {
    let (len, rest) = header(payload, b'$')?;
    let value = rest.get(..len)?;
    let rest = rest.get(len..)?.strip_prefix(b"\r\n")?;
    Some((value, rest))
}

/// Parses a SCAN reply (`*1\r\n*<k>\r\n<keys>` on the last page, `*2\r\n*<k>\r\n<keys>
/// $<t>\r\n<token>\r\n` otherwise); `None` if it is not exactly that.
pub fn parse_keys_page(payload: &[u8]) -> Option<KeysPage> {
    let (elements, rest) = header(payload, b'*')?;
    let (count, mut rest) = header(rest, b'*')?;
    // Each key takes at least 6 bytes (`$0\r\n\r\n`): a count beyond that is a lie.
    let mut keys = Vec::with_capacity(count.min(rest.len() / 6));
    for _ in 0..count {
        let (key, after) = bulk(rest)?;
        keys.push(key.to_vec());
        rest = after;
    }
    let next = match elements {
        1 => None,
        2 => {
            let (token, after) = bulk(rest)?;
            rest = after;
            Some(token.to_vec())
        }
        _ => return None,
    };
    rest.is_empty().then_some(KeysPage { keys, next })
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
mod tests;
