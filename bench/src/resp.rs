//! The wire payloads of the state store protocol as far as the benchmark needs them (spec §2):
//! RESP3 request encoding and the check that a reply is the kind the request expects.

use crate::workload::{Op, PX_MS};

/// A RESP3 array of bulk strings: `*<n>\r\n` then `$<len>\r\n<bytes>\r\n` per element.
pub fn encode(parts: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + parts.iter().map(|p| p.len() + 16).sum::<usize>());
    out.extend_from_slice(format!("*{}\r\n", parts.len()).as_bytes());
    for part in parts {
        out.extend_from_slice(format!("${}\r\n", part.len()).as_bytes());
        out.extend_from_slice(part);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// The request payload for `op` on `key` (`value` is used by SET and SET NX PX).
pub fn request(op: Op, key: &[u8], value: &[u8]) -> Vec<u8> {
    match op {
        Op::Set => encode(&[b"SET", key, value]),
        Op::Get => encode(&[b"GET", key]),
        Op::Del => encode(&[b"DEL", key]),
        Op::SetNxPx => encode(&[
            b"SET",
            key,
            value,
            b"NX",
            b"PX",
            PX_MS.to_string().as_bytes(),
        ]),
    }
}

/// What the request expects back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect<'a> {
    /// The state store's answer for this operation.
    Store(Op),
    /// The echo floor: `+OK\r\n` for everything.
    Echo,
    /// A GET that must hit and return exactly this value.
    Hit(&'a [u8]),
    /// `+OK\r\n` (e.g. a device-bound SEND, devicebound.md §2).
    PlusOk,
}

/// `Ok(())` when `stat` (the `__stat` user property) is `200` and `payload` is a success reply
/// for `expect`; otherwise a short description of what came back.
pub fn classify(expect: Expect<'_>, stat: Option<&str>, payload: &[u8]) -> Result<(), String> {
    match stat {
        Some("200") => {}
        Some(other) => return Err(format!("__stat {other}")),
        None => return Err("no __stat".to_owned()),
    }
    let good = match expect {
        Expect::Echo | Expect::PlusOk => payload == b"+OK\r\n",
        Expect::Store(Op::Set) => payload == b"+OK\r\n",
        Expect::Store(Op::SetNxPx) => payload == b"+OK\r\n" || payload == b":-1\r\n",
        Expect::Store(Op::Del) => payload == b":1\r\n" || payload == b":0\r\n",
        Expect::Store(Op::Get) => is_bulk_or_nil(payload),
        Expect::Hit(value) => payload == bulk(value).as_slice(),
    };
    if good { Ok(()) } else { Err(describe(payload)) }
}

/// `$<len>\r\n<value>\r\n`.
pub fn bulk(value: &[u8]) -> Vec<u8> {
    let mut out = format!("${}\r\n", value.len()).into_bytes();
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
    out
}

/// `$-1\r\n`, or `$<n>\r\n` followed by exactly n bytes and `\r\n`.
fn is_bulk_or_nil(payload: &[u8]) -> bool {
    if payload == b"$-1\r\n" {
        return true;
    }
    let Some(rest) = payload.strip_prefix(b"$") else {
        return false;
    };
    let Some(header_end) = rest.windows(2).position(|w| w == b"\r\n") else {
        return false;
    };
    let digits = &rest[..header_end];
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return false;
    }
    let Some(len) = std::str::from_utf8(digits)
        .ok()
        .and_then(|d| d.parse::<usize>().ok())
    else {
        return false;
    };
    let body = &rest[header_end + 2..];
    body.len() == len + 2 && body.ends_with(b"\r\n")
}

/// A printable, bounded rendering of an unexpected reply, e.g. `-ERR syntax error`.
pub fn describe(payload: &[u8]) -> String {
    const MAX: usize = 80;
    if payload.is_empty() {
        return "empty payload".to_owned();
    }
    let shown = &payload[..payload.len().min(MAX)];
    let mut text = String::from_utf8_lossy(shown)
        .trim_end_matches("\r\n")
        .replace('\r', "\\r")
        .replace('\n', "\\n");
    if payload.len() > MAX {
        text.push('…');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_is_encoded_as_in_the_spec() {
        assert_eq!(
            encode(&[b"SET", b"k", b"v"]),
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n"
        );
    }

    #[test]
    fn requests_for_every_operation() {
        assert_eq!(
            request(Op::Get, b"key", b""),
            b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n"
        );
        assert_eq!(
            request(Op::Del, b"k", b""),
            b"*2\r\n$3\r\nDEL\r\n$1\r\nk\r\n"
        );
        assert_eq!(
            request(Op::SetNxPx, b"k", b"vv"),
            b"*6\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nvv\r\n$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n10000\r\n"
        );
        // binary safe: CRLF inside a value
        assert_eq!(
            request(Op::Set, b"k", b"a\r\nb"),
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\na\r\nb\r\n"
        );
        assert_eq!(encode(&[]), b"*0\r\n");
    }

    #[test]
    fn replies_are_classified() {
        let ok = Some("200");
        assert_eq!(classify(Expect::Store(Op::Set), ok, b"+OK\r\n"), Ok(()));
        assert_eq!(
            classify(Expect::Store(Op::Set), ok, b":-1\r\n"),
            Err(":-1".to_owned())
        );
        assert_eq!(classify(Expect::Store(Op::SetNxPx), ok, b":-1\r\n"), Ok(()));
        assert_eq!(classify(Expect::Store(Op::SetNxPx), ok, b"+OK\r\n"), Ok(()));
        assert_eq!(classify(Expect::Store(Op::Get), ok, b"$-1\r\n"), Ok(()));
        assert_eq!(classify(Expect::Store(Op::Get), ok, b"$0\r\n\r\n"), Ok(()));
        assert_eq!(
            classify(Expect::Store(Op::Get), ok, b"$5\r\nwo\r\nd\r\n"),
            Ok(())
        );
        assert!(classify(Expect::Store(Op::Get), ok, b"$5\r\nworl\r\n").is_err());
        assert!(classify(Expect::Store(Op::Get), ok, b"$5\r\nworld\r\nx").is_err());
        assert!(classify(Expect::Store(Op::Get), ok, b"$+5\r\nworld\r\n").is_err());
        assert!(classify(Expect::Store(Op::Get), ok, b"+OK\r\n").is_err());
        assert_eq!(classify(Expect::Store(Op::Del), ok, b":0\r\n"), Ok(()));
        assert_eq!(classify(Expect::Store(Op::Del), ok, b":1\r\n"), Ok(()));
        assert!(classify(Expect::Store(Op::Del), ok, b":-1\r\n").is_err());
        assert_eq!(classify(Expect::Echo, ok, b"+OK\r\n"), Ok(()));
        assert!(classify(Expect::Echo, ok, b"$-1\r\n").is_err());
        assert_eq!(classify(Expect::PlusOk, ok, b"+OK\r\n"), Ok(()));
        assert_eq!(
            classify(Expect::PlusOk, ok, b"-ERR device queue is full\r\n"),
            Err("-ERR device queue is full".to_owned())
        );
        assert_eq!(
            classify(Expect::Hit(b"world"), ok, b"$5\r\nworld\r\n"),
            Ok(())
        );
        assert!(classify(Expect::Hit(b"world"), ok, b"$5\r\nWorld\r\n").is_err());
        assert!(classify(Expect::Hit(b"world"), ok, b"$-1\r\n").is_err());
        assert!(classify(Expect::Hit(b""), ok, b"$-1\r\n").is_err());
        assert_eq!(classify(Expect::Hit(b""), ok, b"$0\r\n\r\n"), Ok(()));
    }

    #[test]
    fn errors_and_status_are_failures() {
        assert_eq!(
            classify(
                Expect::Store(Op::Set),
                Some("200"),
                b"-ERR missing timestamp\r\n"
            ),
            Err("-ERR missing timestamp".to_owned())
        );
        assert_eq!(
            classify(Expect::Store(Op::Set), Some("505"), b""),
            Err("__stat 505".to_owned())
        );
        assert_eq!(
            classify(Expect::Store(Op::Set), None, b"+OK\r\n"),
            Err("no __stat".to_owned())
        );
        assert_eq!(
            classify(Expect::Store(Op::Get), Some("200"), b""),
            Err("empty payload".to_owned())
        );
        let long = vec![b'x'; 200];
        assert_eq!(describe(&long).chars().count(), 81);
    }
}
