use super::*;
use proptest::prelude::*;
use std::time::{Duration, Instant};

type Expected = Result<Vec<&'static [u8]>, ProtocolError>;

const SYNTAX: Expected = Err(ProtocolError::Syntax);

fn encode_request(elements: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", elements.len()).into_bytes();
    for element in elements {
        encode_bulk(&mut out, element);
    }
    out
}

#[test]
fn section_2_request_framing_table() {
    let limits = ProtocolLimits::default();
    let cases: &[(&str, &[u8], Expected)] = &[
        // --- accepted shapes ---
        ("§2 one bulk", b"*1\r\n$3\r\nGET\r\n", Ok(vec![b"GET"])),
        (
            "§2 two bulks",
            b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
            Ok(vec![b"GET", b"k"]),
        ),
        (
            "§2 empty bulk",
            b"*2\r\n$3\r\nSET\r\n$0\r\n\r\n",
            Ok(vec![b"SET", b""]),
        ),
        (
            "§2 CRLF inside a bulk is data",
            b"*1\r\n$4\r\n\r\n\r\n\r\n",
            Ok(vec![b"\r\n\r\n"]),
        ),
        (
            "§2 bulk containing a RESP array header is data",
            b"*1\r\n$4\r\n*1\r\n\r\n",
            Ok(vec![b"*1\r\n"]),
        ),
        (
            "§2 NUL and high bytes inside a bulk",
            b"*1\r\n$3\r\n\x00\xff\x80\r\n",
            Ok(vec![b"\x00\xff\x80"]),
        ),
        (
            "§2 leading zeros in lengths accepted",
            b"*01\r\n$003\r\nGET\r\n",
            Ok(vec![b"GET"]),
        ),
        // --- array header ---
        ("§2 empty payload", b"", SYNTAX),
        ("§2 zero elements", b"*0\r\n", SYNTAX),
        ("§2 null array", b"*-1\r\n", SYNTAX),
        (
            "§2 negative count",
            b"*-2\r\n$1\r\na\r\n$1\r\nb\r\n",
            SYNTAX,
        ),
        ("§2 plus-signed count", b"*+1\r\n$1\r\na\r\n", SYNTAX),
        ("§2 space before count", b"* 1\r\n$1\r\na\r\n", SYNTAX),
        ("§2 space after count", b"*1 \r\n$1\r\na\r\n", SYNTAX),
        ("§2 empty count", b"*\r\n$1\r\na\r\n", SYNTAX),
        ("§2 hex count", b"*0x1\r\n$1\r\na\r\n", SYNTAX),
        ("§2 count missing CR", b"*1\n$1\r\na\r\n", SYNTAX),
        ("§2 count missing LF", b"*1\r$1\r\na\r\n", SYNTAX),
        ("§2 count LFCR", b"*1\n\r$1\r\na\r\n", SYNTAX),
        ("§2 header only", b"*1\r\n", SYNTAX),
        ("§2 header cut before CRLF", b"*1", SYNTAX),
        (
            "§9 count overflow",
            b"*99999999999999999999\r\n$1\r\na\r\n",
            SYNTAX,
        ),
        ("§2 not an array: bulk", b"$3\r\nGET\r\n", SYNTAX),
        ("§2 not an array: simple string", b"+GET\r\n", SYNTAX),
        ("§2 not an array: inline command", b"GET k\r\n", SYNTAX),
        ("§2 not an array: RESP3 push", b">1\r\n$1\r\na\r\n", SYNTAX),
        // --- element types other than bulk string ---
        ("§2 nested array", b"*1\r\n*1\r\n$1\r\na\r\n", SYNTAX),
        ("§2 simple string element", b"*1\r\n+OK\r\n", SYNTAX),
        ("§2 error element", b"*1\r\n-ERR x\r\n", SYNTAX),
        ("§2 integer element", b"*1\r\n:1\r\n", SYNTAX),
        ("§2 RESP3 null element", b"*1\r\n_\r\n", SYNTAX),
        (
            "§2 RESP3 map element",
            b"*1\r\n%1\r\n$1\r\na\r\n$1\r\nb\r\n",
            SYNTAX,
        ),
        ("§2 RESP3 set element", b"*1\r\n~1\r\n$1\r\na\r\n", SYNTAX),
        (
            "§2 RESP3 attribute element",
            b"*1\r\n|1\r\n$1\r\na\r\n$1\r\nb\r\n",
            SYNTAX,
        ),
        ("§2 RESP3 boolean element", b"*1\r\n#t\r\n", SYNTAX),
        ("§2 RESP3 double element", b"*1\r\n,1.5\r\n", SYNTAX),
        (
            "§2 RESP3 verbatim element",
            b"*1\r\n=7\r\ntxt:abc\r\n",
            SYNTAX,
        ),
        (
            "§2 RESP3 blob error element",
            b"*1\r\n!3\r\nerr\r\n",
            SYNTAX,
        ),
        ("§2 RESP3 big number element", b"*1\r\n(1\r\n", SYNTAX),
        ("§2 null bulk", b"*1\r\n$-1\r\n", SYNTAX),
        (
            "§2 second element not a bulk",
            b"*2\r\n$1\r\na\r\n:1\r\n",
            SYNTAX,
        ),
        // --- bulk length line ---
        ("§2 negative bulk length", b"*1\r\n$-5\r\nhello\r\n", SYNTAX),
        ("§2 plus-signed bulk length", b"*1\r\n$+1\r\na\r\n", SYNTAX),
        ("§2 space before bulk length", b"*1\r\n$ 1\r\na\r\n", SYNTAX),
        ("§2 space after bulk length", b"*1\r\n$1 \r\na\r\n", SYNTAX),
        ("§2 empty bulk length", b"*1\r\n$\r\n\r\n", SYNTAX),
        ("§2 fractional bulk length", b"*1\r\n$1.0\r\na\r\n", SYNTAX),
        ("§2 bulk length missing CR", b"*1\r\n$1\na\r\n", SYNTAX),
        ("§2 bulk length missing LF", b"*1\r\n$1\ra\r\n", SYNTAX),
        (
            "§9 huge declared bulk length",
            b"*1\r\n$99999999999999999999\r\n",
            SYNTAX,
        ),
        (
            "§9 bulk length one over the value limit, no data",
            b"*1\r\n$4194305\r\n",
            SYNTAX,
        ),
        // --- bulk body and terminator ---
        ("§2 truncated bulk", b"*1\r\n$5\r\nhel", SYNTAX),
        ("§2 bulk without terminator", b"*1\r\n$5\r\nhello", SYNTAX),
        ("§2 bulk with CR only", b"*1\r\n$5\r\nhello\r", SYNTAX),
        ("§2 bulk with LF only", b"*1\r\n$5\r\nhello\n", SYNTAX),
        ("§2 bulk terminator LFCR", b"*1\r\n$5\r\nhello\n\r", SYNTAX),
        (
            "§2 bulk shorter than declared",
            b"*1\r\n$6\r\nhello\r\n",
            SYNTAX,
        ),
        (
            "§2 bulk longer than declared",
            b"*1\r\n$4\r\nhello\r\n",
            SYNTAX,
        ),
        (
            "§2 fewer elements than declared",
            b"*2\r\n$1\r\na\r\n",
            SYNTAX,
        ),
        // --- after the array ---
        ("§2 trailing byte", b"*1\r\n$1\r\na\r\nx", SYNTAX),
        ("§2 trailing CRLF", b"*1\r\n$1\r\na\r\n\r\n", SYNTAX),
        ("§2 trailing NUL", b"*1\r\n$1\r\na\r\n\x00", SYNTAX),
        (
            "§2 second array after the first",
            b"*1\r\n$1\r\na\r\n*1\r\n$1\r\nb\r\n",
            SYNTAX,
        ),
        (
            "§2 more elements than declared",
            b"*1\r\n$1\r\na\r\n$1\r\nb\r\n",
            SYNTAX,
        ),
    ];
    for (name, payload, expected) in cases {
        assert_eq!(&parse_request(payload, &limits), expected, "case: {name}");
    }
}

#[test]
fn section_9_array_element_limit() {
    let limits = ProtocolLimits::default();
    let eight: Vec<&[u8]> = vec![b"a"; 8];
    let nine: Vec<&[u8]> = vec![b"a"; 9];
    assert_eq!(parse_request(&encode_request(&eight), &limits), Ok(eight));
    assert_eq!(
        parse_request(&encode_request(&nine), &limits),
        Err(ProtocolError::Syntax),
        "§9 nine elements"
    );
    // §9 the count alone is enough to refuse, before any element is read.
    assert_eq!(
        parse_request(b"*9\r\n", &limits),
        Err(ProtocolError::Syntax)
    );
}

#[test]
fn section_9_bulk_length_limit_is_max_of_key_and_value_limits() {
    let limits = ProtocolLimits {
        max_key_bytes: 40,
        max_value_bytes: 50,
        ..ProtocolLimits::default()
    };
    let at_limit = vec![b'x'; 50];
    let over_limit = vec![b'x'; 51];
    assert_eq!(
        parse_request(&encode_request(&[&at_limit]), &limits),
        Ok(vec![at_limit.as_slice()])
    );
    assert_eq!(
        parse_request(&encode_request(&[&over_limit]), &limits),
        Err(ProtocolError::Syntax)
    );
    // §9 refused on the declared length alone, before the body is read.
    assert_eq!(
        parse_request(b"*1\r\n$51\r\n", &limits),
        Err(ProtocolError::Syntax)
    );
    // Tiny key/value limits never make verbs and options unframeable.
    let tiny = ProtocolLimits {
        max_key_bytes: 1,
        max_value_bytes: 1,
        ..ProtocolLimits::default()
    };
    assert_eq!(
        parse_request(b"*1\r\n$9\r\nKEYNOTIFY\r\n", &tiny),
        Ok(vec![&b"KEYNOTIFY"[..]])
    );
    // With the default limits: a bulk of exactly 4 MiB is framed, one more is not.
    let defaults = ProtocolLimits::default();
    let value_at_limit = vec![b'v'; defaults.max_value_bytes];
    let value_over_limit = vec![b'v'; defaults.max_value_bytes + 1];
    assert!(parse_request(&encode_request(&[&value_at_limit]), &defaults).is_ok());
    assert_eq!(
        parse_request(&encode_request(&[&value_over_limit]), &defaults),
        Err(ProtocolError::Syntax)
    );
}

#[test]
fn section_2_elements_borrow_from_the_payload() {
    let payload = b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n".to_vec();
    let elements = parse_request(&payload, &ProtocolLimits::default()).unwrap_or_default();
    assert_eq!(elements.len(), 2);
    let payload_range = payload.as_ptr_range();
    for element in elements {
        assert!(payload_range.contains(&element.as_ptr()), "zero-copy slice");
    }
}

#[test]
fn section_2_deep_nesting_is_refused_quickly_without_recursion() {
    let payload = b"*1\r\n".repeat(100_000);
    let started = Instant::now();
    assert_eq!(
        parse_request(&payload, &ProtocolLimits::default()),
        Err(ProtocolError::Syntax)
    );
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[test]
fn section_2_long_run_of_leading_zeros_is_linear_and_accepted() {
    let mut payload = b"*1\r\n$".to_vec();
    payload.extend(std::iter::repeat_n(b'0', 100_000));
    payload.extend_from_slice(b"1\r\na\r\n");
    assert_eq!(
        parse_request(&payload, &ProtocolLimits::default()),
        Ok(vec![&b"a"[..]])
    );
}

#[test]
fn section_2_encode_bulk_is_byte_exact() {
    let cases: &[(&str, &[u8], &[u8])] = &[
        ("§2 empty bulk", b"", b"$0\r\n\r\n"),
        ("§2 short bulk", b"abc", b"$3\r\nabc\r\n"),
        (
            "§2 binary bulk with CRLF",
            b"\r\n\x00",
            b"$3\r\n\r\n\x00\r\n",
        ),
    ];
    for (name, bytes, expected) in cases {
        let mut out = b"prefix".to_vec();
        encode_bulk(&mut out, bytes);
        assert_eq!(out.strip_prefix(b"prefix"), Some(*expected), "case: {name}");
    }
    let mut out = Vec::new();
    encode_bulk(&mut out, &[b'x'; 1234]);
    assert!(out.starts_with(b"$1234\r\nxxx"));
    assert!(out.ends_with(b"x\r\n"));
    assert_eq!(out.len(), 1234 + 9);
}

#[test]
fn section_7_notify_payloads_are_byte_exact() {
    let cases: &[(&str, &[u8], &[u8])] = &[
        (
            "§7 SET notification",
            b"value1",
            b"*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n$6\r\nvalue1\r\n",
        ),
        (
            "§7 SET notification, empty value",
            b"",
            b"*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n$0\r\n\r\n",
        ),
        (
            "§7 SET notification, binary value with CRLF",
            b"a\r\nb",
            b"*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n$4\r\na\r\nb\r\n",
        ),
    ];
    for (name, value, expected) in cases {
        assert_eq!(notify_set_payload(value), *expected, "case: {name}");
    }
    assert_eq!(
        NOTIFY_DELETE_PAYLOAD,
        b"*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n"
    );
}

#[test]
fn section_7_notify_payloads_are_valid_arrays_of_bulks() {
    let limits = ProtocolLimits::default();
    assert_eq!(
        parse_request(&notify_set_payload(b"v"), &limits),
        Ok(vec![&b"NOTIFY"[..], b"SET", b"VALUE", b"v"])
    );
    assert_eq!(
        parse_request(NOTIFY_DELETE_PAYLOAD, &limits),
        Ok(vec![&b"NOTIFY"[..], b"DELETE"])
    );
}

#[test]
fn sniff_first_element_reads_only_the_first_bulk() {
    assert_eq!(
        sniff_first_element(b"*99\r\n$3\r\nGET\r\ngarbage", 9),
        Some(&b"GET"[..])
    );
    assert_eq!(sniff_first_element(b"*1\r\n$10\r\nKEYNOTIFYX\r\n", 9), None);
    assert_eq!(sniff_first_element(b"*1\r\n*1\r\n", 9), None);
    assert_eq!(sniff_first_element(b"", 9), None);
}

#[test]
fn parse_decimal_rules() {
    let cases: &[(&[u8], u64, Option<u64>)] = &[
        (b"0", 10, Some(0)),
        (b"10", 10, Some(10)),
        (b"11", 10, None),
        (b"007", 10, Some(7)),
        (b"", 10, None),
        (b"-1", 10, None),
        (b"+1", 10, None),
        (b" 1", 10, None),
        (b"1 ", 10, None),
        (b"1.5", 10, None),
        (b"18446744073709551615", u64::MAX, Some(u64::MAX)),
        (b"18446744073709551616", u64::MAX, None),
        (b"99999999999999999999999", u64::MAX, None),
    ];
    for (digits, max, expected) in cases {
        assert_eq!(
            parse_decimal(digits, *max),
            *expected,
            "{:?}",
            String::from_utf8_lossy(digits)
        );
    }
}

proptest! {
    #[test]
    fn section_2_parse_request_never_panics(payload in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = parse_request(&payload, &ProtocolLimits::default());
    }

    #[test]
    fn section_2_encoded_arrays_round_trip_and_every_prefix_or_suffix_is_refused(
        elements in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 1..=8),
        extra in 0u8..=255,
    ) {
        let limits = ProtocolLimits::default();
        let element_slices: Vec<&[u8]> = elements.iter().map(Vec::as_slice).collect();
        let payload = encode_request(&element_slices);
        prop_assert_eq!(parse_request(&payload, &limits), Ok(element_slices));
        for cut in 0..payload.len() {
            let prefix = payload.get(..cut).unwrap_or_default();
            prop_assert_eq!(parse_request(prefix, &limits), Err(ProtocolError::Syntax));
        }
        let mut with_trailing_byte = payload.clone();
        with_trailing_byte.push(extra);
        prop_assert_eq!(parse_request(&with_trailing_byte, &limits), Err(ProtocolError::Syntax));
    }
}
