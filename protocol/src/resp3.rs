//! RESP3 framing for the state store (spec §2, §7, §9): the strict, zero-copy,
//! non-recursive parser for request payloads (one array of bulk strings and
//! nothing else), and the byte-exact encoders for bulk strings and KEYNOTIFY
//! notification payloads. Reply encoding lives in `reply`.

use super::{ProtocolError, ProtocolLimits};

/// KEYNOTIFY payload for a deletion by DEL, VDEL or expiry, byte-exact (spec §7).
/// The operation is `DELETE`, never the article's `DEL`.
pub const NOTIFY_DELETE_PAYLOAD: &[u8] = b"*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n";

/// Everything of a SET notification before the value's bulk string (spec §7).
const NOTIFY_SET_PREFIX: &[u8] = b"*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n";

/// The shortest possible encoded bulk string, `$0\r\n\r\n`; bounds how many
/// elements the remaining bytes can still hold.
const MIN_ENCODED_BULK_BYTES: usize = 6;

/// Parse one request payload: exactly one RESP array of bulk strings and nothing
/// after it (spec §2). Returns borrowed slices (zero-copy). Any violation,
/// including an element count outside `1..=limits.max_array_len` or a bulk
/// longer than [`ProtocolLimits::max_bulk_bytes`] (the longer of the key and
/// value limits, spec §9), is [`ProtocolError::Syntax`].
///
/// Declared lengths are checked against the limits before any byte of the bulk
/// is read or any memory is reserved for it. The parser never recurses: any
/// element that is not a bulk string (nested arrays included) is refused at its
/// type byte.
pub fn parse_request<'a>(
    payload: &'a [u8],
    limits: &ProtocolLimits,
) -> Result<Vec<&'a [u8]>, ProtocolError> {
    parse_array_of_bulks(payload, limits).ok_or(ProtocolError::Syntax)
}

fn parse_array_of_bulks<'a>(payload: &'a [u8], limits: &ProtocolLimits) -> Option<Vec<&'a [u8]>> {
    let mut reader = Reader::new(payload);
    reader.expect_byte(b'*')?;
    let element_count = reader.read_length_line(limits.max_array_len)?;
    if element_count == 0 {
        return None;
    }
    let max_bulk_bytes = limits.max_bulk_bytes();
    let mut elements =
        Vec::with_capacity(element_count.min(reader.remaining() / MIN_ENCODED_BULK_BYTES));
    for _ in 0..element_count {
        elements.push(reader.read_bulk(max_bulk_bytes)?);
    }
    reader.is_at_end().then_some(elements)
}

/// The first element of a request array, if the payload starts like one and
/// that element is a bulk string of at most `max_len` bytes. Nothing after it is
/// looked at; used only for best-effort metric labels on requests that failed
/// to parse (state store and device-bound requests alike).
pub(crate) fn sniff_first_element(payload: &[u8], max_len: usize) -> Option<&[u8]> {
    let mut reader = Reader::new(payload);
    reader.expect_byte(b'*')?;
    reader.read_length_line(usize::MAX)?;
    reader.read_bulk(max_len)
}

/// Append one bulk string: `$<n>\r\n<bytes>\r\n`.
pub fn encode_bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    out.reserve(bytes.len() + 16);
    out.push(b'$');
    out.extend_from_slice(bytes.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

/// KEYNOTIFY payload for a SET, byte-exact (spec §7):
/// `*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n$<n>\r\n<value>\r\n`.
pub fn notify_set_payload(value: &[u8]) -> Vec<u8> {
    let mut payload = Vec::with_capacity(NOTIFY_SET_PREFIX.len() + value.len() + 16);
    payload.extend_from_slice(NOTIFY_SET_PREFIX);
    encode_bulk(&mut payload, value);
    payload
}

/// A forward-only view of the unread bytes of a payload. Every method returns
/// `None` instead of panicking when the bytes do not match.
struct Reader<'a> {
    unread: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(payload: &'a [u8]) -> Self {
        Self { unread: payload }
    }

    fn remaining(&self) -> usize {
        self.unread.len()
    }

    fn is_at_end(&self) -> bool {
        self.unread.is_empty()
    }

    fn take(&mut self, count: usize) -> Option<&'a [u8]> {
        let (taken, rest) = self.unread.split_at_checked(count)?;
        self.unread = rest;
        Some(taken)
    }

    fn expect_byte(&mut self, expected: u8) -> Option<()> {
        let (&first, rest) = self.unread.split_first()?;
        if first != expected {
            return None;
        }
        self.unread = rest;
        Some(())
    }

    fn expect_crlf(&mut self) -> Option<()> {
        self.unread = self.unread.strip_prefix(b"\r\n")?;
        Some(())
    }

    /// `<digits>\r\n` with at least one ASCII digit and no sign or space,
    /// refused as soon as the value exceeds `max` (so a huge declared length
    /// costs no more than reading its digits).
    fn read_length_line(&mut self, max: usize) -> Option<usize> {
        let digit_count = self
            .unread
            .iter()
            .take_while(|byte| byte.is_ascii_digit())
            .count();
        let digits = self.take(digit_count)?;
        let length = parse_decimal(digits, max as u64)?;
        self.expect_crlf()?;
        usize::try_from(length).ok()
    }

    /// `$<len>\r\n<len bytes>\r\n` with `len <= max_len`.
    fn read_bulk(&mut self, max_len: usize) -> Option<&'a [u8]> {
        self.expect_byte(b'$')?;
        let length = self.read_length_line(max_len)?;
        let bytes = self.take(length)?;
        self.expect_crlf()?;
        Some(bytes)
    }
}

/// A non-empty run of ASCII decimal digits whose value is at most `max`.
/// Leading zeros are accepted; a sign, a space, any other byte, an empty run or
/// a value above `max` (overflow included) is `None`.
pub(crate) fn parse_decimal(digits: &[u8], max: u64) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |value, &byte| {
        let digit = byte.is_ascii_digit().then(|| u64::from(byte - b'0'))?;
        let value = value.checked_mul(10)?.checked_add(digit)?;
        (value <= max).then_some(value)
    })
}

#[cfg(test)]
mod tests;
