use super::*;
use crate::resp3::encode_bulk;
use proptest::prelude::*;

type Expected<'a> = Result<Command<'a>, ProtocolError>;

fn encode_request(elements: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", elements.len()).into_bytes();
    for element in elements {
        encode_bulk(&mut out, element);
    }
    out
}

fn set<'a>(
    key: &'a [u8],
    value: &'a [u8],
    condition: SetCondition,
    expire_after_ms: Option<u64>,
) -> Command<'a> {
    Command::Set {
        key,
        value,
        condition,
        expire_after_ms,
    }
}

const SYNTAX: Expected<'static> = Err(ProtocolError::Syntax);
const ARITY: Expected<'static> = Err(ProtocolError::WrongArity);
const UNKNOWN: Expected<'static> = Err(ProtocolError::UnknownCommand);
const EMPTY_KEY: Expected<'static> = Err(ProtocolError::EmptyKey);

fn scan<'a>(pattern: &[u8], after: Option<&'a [u8]>) -> Command<'a> {
    Command::Scan {
        pattern: Glob::compile(pattern).expect("test pattern compiles"),
        after,
    }
}

#[test]
fn section_2_sdk_payloads_byte_exact() {
    // aio-wire-protocol.md §2: what the Rust, Go and .NET SDKs send.
    use SetCondition::*;
    let limits = ProtocolLimits::default();
    let cases: &[(&str, &[u8], Expected)] = &[
        (
            "§2 SET",
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n",
            Ok(set(b"k", b"v", Always, None)),
        ),
        (
            "§2 SET NX",
            b"*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nNX\r\n",
            Ok(set(b"k", b"v", IfAbsent, None)),
        ),
        (
            "§2 SET NEX (bare)",
            b"*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$3\r\nNEX\r\n",
            Ok(set(b"k", b"v", IfAbsentOrEqual, None)),
        ),
        (
            "§2 SET PX",
            b"*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nPX\r\n$2\r\n10\r\n",
            Ok(set(b"k", b"v", Always, Some(10))),
        ),
        (
            "§2 SET NX PX",
            b"*6\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nNX\r\n$2\r\nPX\r\n$4\r\n5000\r\n",
            Ok(set(b"k", b"v", IfAbsent, Some(5000))),
        ),
        (
            "§4 SET NEX PX (lease acquire/renew)",
            b"*6\r\n$3\r\nSET\r\n$4\r\nlock\r\n$6\r\nholder\r\n$3\r\nNEX\r\n$2\r\nPX\r\n$5\r\n30000\r\n",
            Ok(set(b"lock", b"holder", IfAbsentOrEqual, Some(30000))),
        ),
        (
            "§2 GET",
            b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
            Ok(Command::Get { key: b"k" }),
        ),
        (
            "§2 DEL",
            b"*2\r\n$3\r\nDEL\r\n$1\r\nk\r\n",
            Ok(Command::Del { key: b"k" }),
        ),
        (
            "§2 VDEL",
            b"*3\r\n$4\r\nVDEL\r\n$1\r\nk\r\n$1\r\nv\r\n",
            Ok(Command::VDel { key: b"k", value: b"v" }),
        ),
        (
            "§2 KEYNOTIFY",
            b"*2\r\n$9\r\nKEYNOTIFY\r\n$1\r\nk\r\n",
            Ok(Command::KeyNotify { key: b"k", stop: false }),
        ),
        (
            "§2 KEYNOTIFY STOP",
            b"*3\r\n$9\r\nKEYNOTIFY\r\n$1\r\nk\r\n$4\r\nSTOP\r\n",
            Ok(Command::KeyNotify { key: b"k", stop: true }),
        ),
    ];
    for (name, payload, expected) in cases {
        assert_eq!(&parse_command(payload, &limits), expected, "case: {name}");
    }
}

#[test]
fn section_2_5_semantic_rules_table() {
    use SetCondition::*;
    let limits = ProtocolLimits::default();
    let cases: &[(&str, &[&[u8]], Expected)] = &[
        // --- case-insensitive verbs and options (§2) ---
        (
            "§2 lower-case get",
            &[b"get", b"k"],
            Ok(Command::Get { key: b"k" }),
        ),
        (
            "§2 mixed-case Get",
            &[b"gEt", b"k"],
            Ok(Command::Get { key: b"k" }),
        ),
        (
            "§2 lower-case set",
            &[b"set", b"k", b"v"],
            Ok(set(b"k", b"v", Always, None)),
        ),
        (
            "§2 lower-case del",
            &[b"del", b"k"],
            Ok(Command::Del { key: b"k" }),
        ),
        (
            "§2 lower-case vdel",
            &[b"vdel", b"k", b"v"],
            Ok(Command::VDel {
                key: b"k",
                value: b"v",
            }),
        ),
        (
            "§2 lower-case keynotify",
            &[b"keynotify", b"k"],
            Ok(Command::KeyNotify {
                key: b"k",
                stop: false,
            }),
        ),
        (
            "§2 lower-case stop",
            &[b"KEYNOTIFY", b"k", b"stop"],
            Ok(Command::KeyNotify {
                key: b"k",
                stop: true,
            }),
        ),
        (
            "§2 lower-case nx",
            &[b"SET", b"k", b"v", b"nx"],
            Ok(set(b"k", b"v", IfAbsent, None)),
        ),
        (
            "§2 lower-case nex",
            &[b"SET", b"k", b"v", b"nEx"],
            Ok(set(b"k", b"v", IfAbsentOrEqual, None)),
        ),
        (
            "§2 lower-case px",
            &[b"SET", b"k", b"v", b"px", b"7"],
            Ok(set(b"k", b"v", Always, Some(7))),
        ),
        // --- option order (§2: accept either order) ---
        (
            "§2 PX before NX",
            &[b"SET", b"k", b"v", b"PX", b"10", b"NX"],
            Ok(set(b"k", b"v", IfAbsent, Some(10))),
        ),
        (
            "§2 PX before NEX",
            &[b"SET", b"k", b"v", b"PX", b"10", b"NEX"],
            Ok(set(b"k", b"v", IfAbsentOrEqual, Some(10))),
        ),
        (
            "§2 NEX before PX",
            &[b"SET", b"k", b"v", b"NEX", b"PX", b"10"],
            Ok(set(b"k", b"v", IfAbsentOrEqual, Some(10))),
        ),
        // --- option errors (§2, §5.1 syntax error) ---
        ("§2 NX twice", &[b"SET", b"k", b"v", b"NX", b"NX"], SYNTAX),
        (
            "§2 NEX twice",
            &[b"SET", b"k", b"v", b"NEX", b"NEX"],
            SYNTAX,
        ),
        (
            "§2 NX and NEX",
            &[b"SET", b"k", b"v", b"NX", b"NEX"],
            SYNTAX,
        ),
        (
            "§2 NEX and NX",
            &[b"SET", b"k", b"v", b"NEX", b"NX"],
            SYNTAX,
        ),
        (
            "§2 PX twice",
            &[b"SET", b"k", b"v", b"PX", b"1", b"PX"],
            SYNTAX,
        ),
        (
            "§2 PX without argument",
            &[b"SET", b"k", b"v", b"PX"],
            SYNTAX,
        ),
        (
            "§2 NX then PX without argument",
            &[b"SET", b"k", b"v", b"NX", b"PX"],
            SYNTAX,
        ),
        (
            "§2 PX argument is an option",
            &[b"SET", b"k", b"v", b"PX", b"NX"],
            SYNTAX,
        ),
        (
            "§2 NEX with a value (article form)",
            &[b"SET", b"k", b"v", b"NEX", b"v"],
            SYNTAX,
        ),
        ("§2 unknown option", &[b"SET", b"k", b"v", b"XX"], SYNTAX),
        (
            "§2 EX is not supported",
            &[b"SET", b"k", b"v", b"EX", b"10"],
            SYNTAX,
        ),
        (
            "§2 GET option of SET is not supported",
            &[b"SET", b"k", b"v", b"GET"],
            SYNTAX,
        ),
        (
            "§2 option with trailing space",
            &[b"SET", b"k", b"v", b"NX "],
            SYNTAX,
        ),
        ("§2 empty option", &[b"SET", b"k", b"v", b""], SYNTAX),
        (
            "§2 KEYNOTIFY unknown option",
            &[b"KEYNOTIFY", b"k", b"GET"],
            SYNTAX,
        ),
        (
            "§2 KEYNOTIFY empty option",
            &[b"KEYNOTIFY", b"k", b""],
            SYNTAX,
        ),
        (
            "§2 KEYNOTIFY STOPX",
            &[b"KEYNOTIFY", b"k", b"STOPX"],
            SYNTAX,
        ),
        // --- PX values (§2, §9) ---
        (
            "§9 PX 1 (minimum)",
            &[b"SET", b"k", b"v", b"PX", b"1"],
            Ok(set(b"k", b"v", Always, Some(1))),
        ),
        (
            "§9 PX 30 days (maximum)",
            &[b"SET", b"k", b"v", b"PX", b"2592000000"],
            Ok(set(b"k", b"v", Always, Some(2_592_000_000))),
        ),
        (
            "§9 PX 30 days + 1 ms",
            &[b"SET", b"k", b"v", b"PX", b"2592000001"],
            SYNTAX,
        ),
        (
            "§2 PX leading zeros",
            &[b"SET", b"k", b"v", b"PX", b"0010"],
            Ok(set(b"k", b"v", Always, Some(10))),
        ),
        ("§9 PX 0", &[b"SET", b"k", b"v", b"PX", b"0"], SYNTAX),
        ("§9 PX 000", &[b"SET", b"k", b"v", b"PX", b"000"], SYNTAX),
        (
            "§2 PX negative",
            &[b"SET", b"k", b"v", b"PX", b"-10"],
            SYNTAX,
        ),
        (
            "§2 PX plus sign",
            &[b"SET", b"k", b"v", b"PX", b"+10"],
            SYNTAX,
        ),
        (
            "§2 PX fractional (.NET TimeSpan)",
            &[b"SET", b"k", b"v", b"PX", b"1500.5"],
            SYNTAX,
        ),
        (
            "§2 PX decimal comma (.NET culture)",
            &[b"SET", b"k", b"v", b"PX", b"1,5"],
            SYNTAX,
        ),
        (
            "§2 PX exponent",
            &[b"SET", b"k", b"v", b"PX", b"1e3"],
            SYNTAX,
        ),
        (
            "§2 PX with space",
            &[b"SET", b"k", b"v", b"PX", b" 10"],
            SYNTAX,
        ),
        ("§2 PX empty", &[b"SET", b"k", b"v", b"PX", b""], SYNTAX),
        (
            "§2 PX u64 overflow",
            &[b"SET", b"k", b"v", b"PX", b"18446744073709551616"],
            SYNTAX,
        ),
        (
            "§2 PX huge",
            &[b"SET", b"k", b"v", b"PX", b"99999999999999999999999999"],
            SYNTAX,
        ),
        // --- verb (§5.1 unknown command) ---
        ("§5.1 unknown verb", &[b"FLUSHALL"], UNKNOWN),
        (
            "§5.1 unknown verb with args",
            &[b"MGET", b"a", b"b"],
            UNKNOWN,
        ),
        // --- SCAN pattern [token] (issue 12) ---
        ("SCAN pattern", &[b"scan", b"k*"], Ok(scan(b"k*", None))),
        (
            "SCAN with token",
            &[b"SCAN", b"*", b"\x01k1"],
            Ok(scan(b"*", Some(b"k1"))),
        ),
        ("SCAN empty pattern", &[b"SCAN", b""], Ok(scan(b"", None))),
        (
            "SCAN unclosed bracket",
            &[b"SCAN", b"["],
            Ok(scan(b"[", None)),
        ),
        (
            "SCAN not UTF-8",
            &[b"SCAN", b"\xff*"],
            Ok(scan(b"\xff*", None)),
        ),
        ("SCAN no pattern", &[b"SCAN"], ARITY),
        (
            "SCAN extra argument",
            &[b"SCAN", b"*", b"\x01k", b"COUNT"],
            ARITY,
        ),
        ("SCAN foreign token", &[b"SCAN", b"*", b"1;1;"], SYNTAX),
        ("SCAN empty token", &[b"SCAN", b"*", b""], SYNTAX),
        ("§5.1 empty verb", &[b""], UNKNOWN),
        ("§5.1 verb with trailing space", &[b"GET ", b"k"], UNKNOWN),
        ("§5.1 verb prefix", &[b"GE", b"k"], UNKNOWN),
        ("§5.1 verb checked before arity", &[b"NOPE"], UNKNOWN),
        // --- arity (§5.1 wrong number of arguments) ---
        ("§5.1 SET no args", &[b"SET"], ARITY),
        ("§5.1 SET key only", &[b"SET", b"k"], ARITY),
        (
            "§5.1 SET 7 elements",
            &[b"SET", b"k", b"v", b"NX", b"PX", b"1", b"NX"],
            ARITY,
        ),
        (
            "§5.1 SET 8 elements",
            &[b"SET", b"k", b"v", b"NX", b"PX", b"1", b"x", b"y"],
            ARITY,
        ),
        ("§5.1 GET no key", &[b"GET"], ARITY),
        ("§5.1 GET two keys", &[b"GET", b"a", b"b"], ARITY),
        ("§5.1 DEL no key", &[b"DEL"], ARITY),
        ("§5.1 DEL two keys", &[b"DEL", b"a", b"b"], ARITY),
        ("§5.1 VDEL key only", &[b"VDEL", b"k"], ARITY),
        (
            "§5.1 VDEL four elements",
            &[b"VDEL", b"k", b"v", b"x"],
            ARITY,
        ),
        ("§5.1 KEYNOTIFY no key", &[b"KEYNOTIFY"], ARITY),
        (
            "§5.1 KEYNOTIFY four elements",
            &[b"KEYNOTIFY", b"k", b"STOP", b"x"],
            ARITY,
        ),
        ("§5.1 arity checked before key", &[b"GET", b"", b""], ARITY),
        // --- empty key (§5.1 the key length is zero) ---
        ("§5.1 SET empty key", &[b"SET", b"", b"v"], EMPTY_KEY),
        ("§5.1 GET empty key", &[b"GET", b""], EMPTY_KEY),
        ("§5.1 DEL empty key", &[b"DEL", b""], EMPTY_KEY),
        ("§5.1 VDEL empty key", &[b"VDEL", b"", b"v"], EMPTY_KEY),
        ("§5.1 KEYNOTIFY empty key", &[b"KEYNOTIFY", b""], EMPTY_KEY),
        (
            "§5.1 key checked before options",
            &[b"SET", b"", b"v", b"BOGUS"],
            EMPTY_KEY,
        ),
        (
            "§5.1 KEYNOTIFY key checked before option",
            &[b"KEYNOTIFY", b"", b"BOGUS"],
            EMPTY_KEY,
        ),
        // --- empty values are values (§2) ---
        (
            "§2 SET empty value",
            &[b"SET", b"k", b""],
            Ok(set(b"k", b"", Always, None)),
        ),
        (
            "§2 VDEL empty value",
            &[b"VDEL", b"k", b""],
            Ok(Command::VDel {
                key: b"k",
                value: b"",
            }),
        ),
        // --- binary keys and values (§2) ---
        (
            "§2 key with CRLF",
            &[b"GET", b"a\r\nb"],
            Ok(Command::Get { key: b"a\r\nb" }),
        ),
        (
            "§2 key that looks like a verb",
            &[b"GET", b"SET"],
            Ok(Command::Get { key: b"SET" }),
        ),
        (
            "§2 value that looks like an option",
            &[b"SET", b"k", b"NX"],
            Ok(set(b"k", b"NX", Always, None)),
        ),
        (
            "§2 value with RESP framing inside",
            &[b"SET", b"k", b"*1\r\n$1\r\nx\r\n"],
            Ok(set(b"k", b"*1\r\n$1\r\nx\r\n", Always, None)),
        ),
        (
            "§2 NUL key",
            &[b"DEL", b"\x00"],
            Ok(Command::Del { key: b"\x00" }),
        ),
    ];
    for (name, elements, expected) in cases {
        let payload = encode_request(elements);
        assert_eq!(&parse_command(&payload, &limits), expected, "case: {name}");
    }
}

#[test]
fn section_2_framing_errors_are_syntax_errors_before_semantics() {
    let limits = ProtocolLimits::default();
    let cases: &[(&str, &[u8])] = &[
        ("§2 trailing byte after a valid GET", b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nX"),
        ("§2 unknown verb but bad framing", b"*1\r\n$4\r\nNOPE\r\n\r\n"),
        ("§2 wrong arity but bad framing", b"*1\r\n$3\r\nGET"),
        ("§2 empty key but bad framing", b"*2\r\n$3\r\nGET\r\n$0\r\n"),
        ("§2 null bulk as key", b"*2\r\n$3\r\nGET\r\n$-1\r\n"),
        ("§2 integer as key", b"*2\r\n$3\r\nGET\r\n:1\r\n"),
        ("§2 verb as simple string", b"*2\r\n+GET\r\n$1\r\nk\r\n"),
        ("§9 nine elements", b"*9\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nNX\r\n$2\r\nPX\r\n$1\r\n1\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"),
        ("§2 huge declared length", b"*2\r\n$3\r\nGET\r\n$99999999999999999999\r\n"),
        ("§2 negative length", b"*2\r\n$3\r\nGET\r\n$-5\r\n"),
        ("§2 empty payload", b""),
    ];
    for (name, payload) in cases {
        assert_eq!(
            parse_command(payload, &limits),
            Err(ProtocolError::Syntax),
            "case: {name}"
        );
    }
    let deep_nesting = b"*1\r\n".repeat(100_000);
    assert_eq!(
        parse_command(&deep_nesting, &limits),
        Err(ProtocolError::Syntax),
        "§2 deep nesting"
    );
}

#[test]
fn section_2_binary_key_and_value_with_every_byte() {
    let limits = ProtocolLimits::default();
    let every_byte: Vec<u8> = (0..=255).collect();
    let reversed: Vec<u8> = (0..=255).rev().chain(*b"\r\n\r\n").collect();
    let payload = encode_request(&[b"SET", &every_byte, &reversed, b"NEX", b"PX", b"100"]);
    assert_eq!(
        parse_command(&payload, &limits),
        Ok(Command::Set {
            key: &every_byte,
            value: &reversed,
            condition: SetCondition::IfAbsentOrEqual,
            expire_after_ms: Some(100),
        })
    );
    let payload = encode_request(&[b"VDEL", &reversed, &every_byte]);
    assert_eq!(
        parse_command(&payload, &limits),
        Ok(Command::VDel {
            key: &reversed,
            value: &every_byte
        })
    );
}

#[test]
fn section_9_key_and_value_limits() {
    let limits = ProtocolLimits::default();
    let key_at_limit = vec![b'k'; limits.max_key_bytes];
    let key_over_limit = vec![b'k'; limits.max_key_bytes + 1];
    let value_at_limit = vec![b'v'; limits.max_value_bytes];
    let value_over_limit = vec![b'v'; limits.max_value_bytes + 1];
    let cases: Vec<(&str, Vec<u8>, Expected)> = vec![
        (
            "§9 GET key at limit",
            encode_request(&[b"GET", &key_at_limit]),
            Ok(Command::Get { key: &key_at_limit }),
        ),
        (
            "§9 GET key one over",
            encode_request(&[b"GET", &key_over_limit]),
            SYNTAX,
        ),
        (
            "§9 DEL key one over",
            encode_request(&[b"DEL", &key_over_limit]),
            SYNTAX,
        ),
        (
            "SCAN pattern one over the key limit",
            encode_request(&[b"SCAN", &key_over_limit]),
            SYNTAX,
        ),
        (
            "SCAN token of a key one over the key limit",
            encode_request(&[b"SCAN", b"*", &[&[1u8][..], &key_over_limit].concat()]),
            SYNTAX,
        ),
        (
            "§9 KEYNOTIFY key one over",
            encode_request(&[b"KEYNOTIFY", &key_over_limit]),
            SYNTAX,
        ),
        (
            "§9 VDEL key one over",
            encode_request(&[b"VDEL", &key_over_limit, b"v"]),
            SYNTAX,
        ),
        (
            "§9 SET key one over",
            encode_request(&[b"SET", &key_over_limit, b"v"]),
            SYNTAX,
        ),
        (
            "§9 SET value at limit",
            encode_request(&[b"SET", b"k", &value_at_limit]),
            Ok(Command::Set {
                key: b"k",
                value: &value_at_limit,
                condition: SetCondition::Always,
                expire_after_ms: None,
            }),
        ),
        (
            "§9 SET value one over",
            encode_request(&[b"SET", b"k", &value_over_limit]),
            SYNTAX,
        ),
        (
            "§9 VDEL value at limit",
            encode_request(&[b"VDEL", b"k", &value_at_limit]),
            Ok(Command::VDel {
                key: b"k",
                value: &value_at_limit,
            }),
        ),
        (
            "§9 VDEL value one over",
            encode_request(&[b"VDEL", b"k", &value_over_limit]),
            SYNTAX,
        ),
        (
            "§9 key over the key limit but under the framing limit is still syntax",
            encode_request(&[b"GET", &value_at_limit]),
            SYNTAX,
        ),
    ];
    for (name, payload, expected) in &cases {
        assert_eq!(&parse_command(payload, &limits), expected, "case: {name}");
    }
}

#[test]
fn section_9_limits_are_configurable() {
    let limits = ProtocolLimits {
        max_key_bytes: 2,
        max_value_bytes: 3,
        max_array_len: 3,
        max_px_ms: 50,
    };
    let cases: &[(&str, &[&[u8]], Expected)] = &[
        (
            "§9 key at configured limit",
            &[b"GET", b"ab"],
            Ok(Command::Get { key: b"ab" }),
        ),
        ("§9 key over configured limit", &[b"GET", b"abc"], SYNTAX),
        (
            "§9 value at configured limit",
            &[b"VDEL", b"k", b"abc"],
            Ok(Command::VDel {
                key: b"k",
                value: b"abc",
            }),
        ),
        (
            "§9 value over configured limit",
            &[b"VDEL", b"k", b"abcd"],
            SYNTAX,
        ),
        (
            "§9 array over configured limit",
            &[b"SET", b"k", b"v", b"NX"],
            SYNTAX,
        ),
        (
            "§9 verbs and options frame under tiny limits",
            &[b"KEYNOTIFY", b"ab", b"STOP"],
            Ok(Command::KeyNotify {
                key: b"ab",
                stop: true,
            }),
        ),
        (
            "§9 PX over configured limit",
            &[b"SET", b"k", b"v", b"PX", b"51"],
            SYNTAX,
        ),
    ];
    for (name, elements, expected) in cases {
        assert_eq!(
            &parse_command(&encode_request(elements), &limits),
            expected,
            "case: {name}"
        );
    }
    let px_limits = ProtocolLimits {
        max_px_ms: 50,
        ..ProtocolLimits::default()
    };
    assert_eq!(
        parse_command(
            &encode_request(&[b"SET", b"k", b"v", b"PX", b"50"]),
            &px_limits
        ),
        Ok(Command::Set {
            key: b"k",
            value: b"v",
            condition: SetCondition::Always,
            expire_after_ms: Some(50)
        })
    );
}

#[test]
fn command_accessors() {
    let cases: &[(Command, CommandVerb, Option<&[u8]>, bool)] = &[
        (
            set(b"a", b"v", SetCondition::Always, None),
            CommandVerb::Set,
            Some(b"a"),
            true,
        ),
        (
            Command::Get { key: b"b" },
            CommandVerb::Get,
            Some(b"b"),
            false,
        ),
        (
            Command::Del { key: b"c" },
            CommandVerb::Del,
            Some(b"c"),
            true,
        ),
        (scan(b"*", None), CommandVerb::Scan, None, false),
        (
            Command::VDel {
                key: b"d",
                value: b"v",
            },
            CommandVerb::VDel,
            Some(b"d"),
            true,
        ),
        (
            Command::KeyNotify {
                key: b"e",
                stop: false,
            },
            CommandVerb::KeyNotify,
            Some(b"e"),
            true,
        ),
        (
            Command::KeyNotify {
                key: b"f",
                stop: true,
            },
            CommandVerb::KeyNotify,
            Some(b"f"),
            true,
        ),
    ];
    for (command, verb, key, is_mutation) in cases {
        assert_eq!(command.verb(), *verb, "{command:?}");
        assert_eq!(command.key(), *key, "{command:?}");
        assert_eq!(command.is_mutation(), *is_mutation, "{command:?}");
    }
}

#[test]
fn verb_labels_are_a_closed_lower_case_set() {
    let expected = ["set", "get", "del", "vdel", "keynotify", "scan", "unknown"];
    let labels: Vec<&str> = CommandVerb::ALL.iter().map(CommandVerb::label).collect();
    assert_eq!(labels, expected);
}

#[test]
fn sniff_verb_table() {
    let cases: &[(&str, &[u8], CommandVerb)] = &[
        (
            "valid GET",
            b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
            CommandVerb::Get,
        ),
        (
            "lower-case set, wrong arity",
            b"*1\r\n$3\r\nset\r\n",
            CommandVerb::Set,
        ),
        (
            "VDEL with broken rest",
            b"*3\r\n$4\r\nVDEL\r\n$9\r\nk",
            CommandVerb::VDel,
        ),
        (
            "KEYNOTIFY too many elements",
            b"*99\r\n$9\r\nKeyNotify\r\n",
            CommandVerb::KeyNotify,
        ),
        ("DEL", b"*2\r\n$3\r\nDEL\r\n$0\r\n\r\n", CommandVerb::Del),
        (
            "unknown verb",
            b"*1\r\n$4\r\nPING\r\n",
            CommandVerb::Unknown,
        ),
        (
            "long first element",
            b"*1\r\n$10\r\nKEYNOTIFYX\r\n",
            CommandVerb::Unknown,
        ),
        ("not an array", b"$3\r\nGET\r\n", CommandVerb::Unknown),
        ("truncated verb", b"*1\r\n$3\r\nGE", CommandVerb::Unknown),
        (
            "nested array",
            b"*1\r\n*1\r\n$3\r\nGET\r\n",
            CommandVerb::Unknown,
        ),
        ("empty", b"", CommandVerb::Unknown),
    ];
    for (name, payload, expected) in cases {
        assert_eq!(sniff_verb(payload), *expected, "case: {name}");
    }
}

fn arbitrary_request_element() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"SET".to_vec()),
        Just(b"get".to_vec()),
        Just(b"DEL".to_vec()),
        Just(b"VDEL".to_vec()),
        Just(b"KEYNOTIFY".to_vec()),
        Just(b"NX".to_vec()),
        Just(b"nex".to_vec()),
        Just(b"PX".to_vec()),
        Just(b"STOP".to_vec()),
        "[0-9]{0,22}".prop_map(String::into_bytes),
        proptest::collection::vec(any::<u8>(), 0..16),
    ]
}

proptest! {
    #[test]
    fn section_2_parse_command_never_panics_on_arbitrary_bytes(
        payload in proptest::collection::vec(any::<u8>(), 0..512)
    ) {
        let _ = parse_command(&payload, &ProtocolLimits::default());
        let _ = sniff_verb(&payload);
    }

    #[test]
    fn section_2_parse_command_never_panics_on_near_valid_requests(
        elements in proptest::collection::vec(arbitrary_request_element(), 0..10),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let element_slices: Vec<&[u8]> = elements.iter().map(Vec::as_slice).collect();
        let mut payload = encode_request(&element_slices);
        if truncate {
            payload.truncate(cut.index(payload.len() + 1));
        }
        let _ = parse_command(&payload, &ProtocolLimits::default());
        let _ = sniff_verb(&payload);
    }

    #[test]
    fn section_2_set_round_trips_binary_key_and_value(
        key in proptest::collection::vec(any::<u8>(), 1..128),
        value in proptest::collection::vec(any::<u8>(), 0..512),
        condition in prop_oneof![
            Just(SetCondition::Always),
            Just(SetCondition::IfAbsent),
            Just(SetCondition::IfAbsentOrEqual),
        ],
        expire_after_ms in proptest::option::of(1u64..=ProtocolLimits::DEFAULT_MAX_PX_MS),
        px_first in any::<bool>(),
    ) {
        let px_text = expire_after_ms.map(|ms| ms.to_string().into_bytes());
        let condition_option: Option<&[u8]> = match condition {
            SetCondition::Always => None,
            SetCondition::IfAbsent => Some(b"NX"),
            SetCondition::IfAbsentOrEqual => Some(b"NEX"),
        };
        let mut px_options: Vec<&[u8]> = Vec::new();
        if let Some(px_text) = &px_text {
            px_options.extend([&b"PX"[..], px_text]);
        }
        let mut elements: Vec<&[u8]> = vec![b"SET", &key, &value];
        if px_first {
            elements.extend(&px_options);
            elements.extend(condition_option);
        } else {
            elements.extend(condition_option);
            elements.extend(&px_options);
        }
        let payload = encode_request(&elements);
        let parsed = parse_command(&payload, &ProtocolLimits::default());
        prop_assert_eq!(
            parsed,
            Ok(Command::Set { key: &key, value: &value, condition, expire_after_ms })
        );
        prop_assert_eq!(sniff_verb(&payload), CommandVerb::Set);
    }
}
