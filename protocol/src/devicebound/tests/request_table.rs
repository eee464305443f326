//! The service RPC parser (devicebound.md §2, protocol.md §2, §5): every
//! command form, every exact error, the order errors are checked in, the
//! device id alphabet, application properties, verbs and expiry resolution.

use super::{encode_elements, send};
use crate::devicebound::DeviceboundLimits;
use crate::devicebound::request::{
    Ack, DeviceRequest, DeviceVerb, Expiry, FeedbackSettlement, MAX_TTL_MS, SendRequest,
    application_properties, encode_device_request, parse_device_request, sniff_device_verb,
};
use crate::{ErrorReply, ErrorService, ProtocolError, Reply};

type Expected = Result<DeviceRequest<'static>, ProtocolError>;

const SYNTAX: Expected = Err(ProtocolError::Syntax);
const ARITY: Expected = Err(ProtocolError::WrongArity);
const UNKNOWN: Expected = Err(ProtocolError::UnknownCommand);
const BAD_DEVICE: Expected = Err(ProtocolError::InvalidDeviceId);
const BAD_MESSAGE_ID: Expected = Err(ProtocolError::InvalidMessageId);
const TOO_LARGE: Expected = Err(ProtocolError::MessageTooLarge);

fn ok_send(send: SendRequest<'static>) -> Expected {
    Ok(DeviceRequest::Send(send))
}

fn check(cases: &[(&str, &[&[u8]], Expected)], limits: &DeviceboundLimits) {
    for (name, elements, expected) in cases {
        let payload = encode_elements(elements);
        assert_eq!(
            &parse_device_request(&payload, limits),
            expected,
            "case: {name}"
        );
    }
}

#[test]
fn section_2_every_command_form() {
    let cases: &[(&str, &[&[u8]], Expected)] = &[
        (
            "§2 SEND, no options",
            &[b"SEND", b"dev1", b"m1", b"hello"],
            ok_send(send("dev1", "m1", b"hello")),
        ),
        (
            "§2 SEND empty body",
            &[b"SEND", b"dev1", b"m1", b""],
            ok_send(send("dev1", "m1", b"")),
        ),
        (
            "§2 SEND binary body with CRLF and RESP inside",
            &[b"SEND", b"d", b"m", b"*1\r\n$1\r\nx\r\n\x00\xff"],
            ok_send(send("d", "m", b"*1\r\n$1\r\nx\r\n\x00\xff")),
        ),
        (
            "§2 SEND body that looks like an option",
            &[b"SEND", b"d", b"m", b"TTL"],
            ok_send(send("d", "m", b"TTL")),
        ),
        (
            "§2 SEND TTL",
            &[b"SEND", b"d", b"m", b"b", b"TTL", b"60000"],
            ok_send(SendRequest {
                expiry: Expiry::Ttl(60_000),
                ..send("d", "m", b"b")
            }),
        ),
        (
            "§2 SEND EXPIRES",
            &[b"SEND", b"d", b"m", b"b", b"EXPIRES", b"1700000000000"],
            ok_send(SendRequest {
                expiry: Expiry::At(1_700_000_000_000),
                ..send("d", "m", b"b")
            }),
        ),
        (
            "§2 SEND ACK none",
            &[b"SEND", b"d", b"m", b"b", b"ACK", b"none"],
            ok_send(send("d", "m", b"b")),
        ),
        (
            "§2 SEND ACK positive",
            &[b"SEND", b"d", b"m", b"b", b"ACK", b"positive"],
            ok_send(SendRequest {
                ack: Ack::Positive,
                ..send("d", "m", b"b")
            }),
        ),
        (
            "§2 SEND ACK negative",
            &[b"SEND", b"d", b"m", b"b", b"ACK", b"negative"],
            ok_send(SendRequest {
                ack: Ack::Negative,
                ..send("d", "m", b"b")
            }),
        ),
        (
            "§2 SEND ACK full",
            &[b"SEND", b"d", b"m", b"b", b"ACK", b"full"],
            ok_send(SendRequest {
                ack: Ack::Full,
                ..send("d", "m", b"b")
            }),
        ),
        (
            "§2 SEND GENERATION",
            &[
                b"SEND",
                b"d",
                b"m",
                b"b",
                b"GENERATION",
                b"635872848148125000",
            ],
            ok_send(SendRequest {
                generation: Some("635872848148125000"),
                ..send("d", "m", b"b")
            }),
        ),
        (
            "§2 SEND CONTENTTYPE",
            &[
                b"SEND",
                b"d",
                b"m",
                b"b",
                b"CONTENTTYPE",
                b"application/json",
            ],
            ok_send(SendRequest {
                content_type: Some("application/json"),
                ..send("d", "m", b"b")
            }),
        ),
        (
            "§2 SEND CONTENTENCODING",
            &[b"SEND", b"d", b"m", b"b", b"CONTENTENCODING", b"utf-8"],
            ok_send(SendRequest {
                content_encoding: Some("utf-8"),
                ..send("d", "m", b"b")
            }),
        ),
        (
            "§2 SEND every option, table order",
            &[
                b"SEND",
                b"d",
                b"m",
                b"b",
                b"TTL",
                b"5",
                b"ACK",
                b"full",
                b"GENERATION",
                b"g",
                b"CONTENTTYPE",
                b"t",
                b"CONTENTENCODING",
                b"e",
            ],
            ok_send(SendRequest {
                expiry: Expiry::Ttl(5),
                ack: Ack::Full,
                generation: Some("g"),
                content_type: Some("t"),
                content_encoding: Some("e"),
                ..send("d", "m", b"b")
            }),
        ),
        (
            "§2 SEND every option, reversed order",
            &[
                b"SEND",
                b"d",
                b"m",
                b"b",
                b"CONTENTENCODING",
                b"e",
                b"CONTENTTYPE",
                b"t",
                b"GENERATION",
                b"g",
                b"ACK",
                b"negative",
                b"EXPIRES",
                b"0",
            ],
            ok_send(SendRequest {
                expiry: Expiry::At(0),
                ack: Ack::Negative,
                generation: Some("g"),
                content_type: Some("t"),
                content_encoding: Some("e"),
                ..send("d", "m", b"b")
            }),
        ),
        (
            "§2 SEND non-ASCII message id and content type",
            &[
                b"SEND",
                b"d",
                "m\u{e9}".as_bytes(),
                b"b",
                b"CONTENTTYPE",
                "t\u{2603}".as_bytes(),
            ],
            ok_send(SendRequest {
                content_type: Some("t\u{2603}"),
                ..send("d", "m\u{e9}", b"b")
            }),
        ),
        (
            "§2 PURGE",
            &[b"PURGE", b"dev1"],
            Ok(DeviceRequest::Purge { device_id: "dev1" }),
        ),
        (
            "§2 FORGET",
            &[b"FORGET", b"dev1"],
            Ok(DeviceRequest::Forget { device_id: "dev1" }),
        ),
        (
            "§2 QUEUE",
            &[b"QUEUE", b"dev1"],
            Ok(DeviceRequest::Queue { device_id: "dev1" }),
        ),
        (
            "§2 DEADLETTERS (default count 10)",
            &[b"DEADLETTERS", b"dev1"],
            Ok(DeviceRequest::DeadLetters {
                device_id: "dev1",
                count: 10,
            }),
        ),
        (
            "§2 DEADLETTERS COUNT",
            &[b"DEADLETTERS", b"dev1", b"COUNT", b"3"],
            Ok(DeviceRequest::DeadLetters {
                device_id: "dev1",
                count: 3,
            }),
        ),
        (
            "§2 DEADLETTERS COUNT u32::MAX",
            &[b"DEADLETTERS", b"dev1", b"COUNT", b"4294967295"],
            Ok(DeviceRequest::DeadLetters {
                device_id: "dev1",
                count: u32::MAX,
            }),
        ),
        (
            "§2 FEEDBACK COMPLETE",
            &[b"FEEDBACK", b"COMPLETE", b"lt-1"],
            Ok(DeviceRequest::Feedback {
                settlement: FeedbackSettlement::Complete,
                lock_token: "lt-1",
            }),
        ),
        (
            "§2 FEEDBACK ABANDON",
            &[b"FEEDBACK", b"ABANDON", b"lt-1"],
            Ok(DeviceRequest::Feedback {
                settlement: FeedbackSettlement::Abandon,
                lock_token: "lt-1",
            }),
        ),
        (
            "§1 FEEDBACK lock token of 64 printable bytes",
            &[
                b"FEEDBACK",
                b"COMPLETE",
                b"!\"$%&'()*,-.0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`a{|",
            ],
            Ok(DeviceRequest::Feedback {
                settlement: FeedbackSettlement::Complete,
                lock_token: "!\"$%&'()*,-.0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`a{|",
            }),
        ),
    ];
    check(cases, &DeviceboundLimits::default());
}

#[test]
fn section_2_verbs_options_and_keywords_are_case_insensitive() {
    let cases: &[(&str, &[&[u8]], Expected)] = &[
        (
            "§2 lower-case send",
            &[b"send", b"d", b"m", b"b"],
            ok_send(send("d", "m", b"b")),
        ),
        (
            "§2 mixed-case SeNd",
            &[b"SeNd", b"d", b"m", b"b"],
            ok_send(send("d", "m", b"b")),
        ),
        (
            "§2 lower-case options, upper-case ACK value",
            &[
                b"send",
                b"d",
                b"m",
                b"b",
                b"ttl",
                b"7",
                b"ack",
                b"FULL",
                b"generation",
                b"g",
                b"contenttype",
                b"t",
                b"contentencoding",
                b"e",
            ],
            ok_send(SendRequest {
                expiry: Expiry::Ttl(7),
                ack: Ack::Full,
                generation: Some("g"),
                content_type: Some("t"),
                content_encoding: Some("e"),
                ..send("d", "m", b"b")
            }),
        ),
        (
            "§2 Expires, Ack Positive",
            &[
                b"SEND",
                b"d",
                b"m",
                b"b",
                b"Expires",
                b"9",
                b"Ack",
                b"Positive",
            ],
            ok_send(SendRequest {
                expiry: Expiry::At(9),
                ack: Ack::Positive,
                ..send("d", "m", b"b")
            }),
        ),
        (
            "§2 ack nEgAtIvE, ack NONE",
            &[b"SEND", b"d", b"m", b"b", b"ACK", b"nEgAtIvE"],
            ok_send(SendRequest {
                ack: Ack::Negative,
                ..send("d", "m", b"b")
            }),
        ),
        (
            "§2 ACK NONE",
            &[b"SEND", b"d", b"m", b"b", b"ACK", b"NONE"],
            ok_send(send("d", "m", b"b")),
        ),
        (
            "§2 purge",
            &[b"purge", b"d"],
            Ok(DeviceRequest::Purge { device_id: "d" }),
        ),
        (
            "§2 Forget",
            &[b"Forget", b"d"],
            Ok(DeviceRequest::Forget { device_id: "d" }),
        ),
        (
            "§2 queue",
            &[b"queue", b"d"],
            Ok(DeviceRequest::Queue { device_id: "d" }),
        ),
        (
            "§2 deadLetters count",
            &[b"deadLetters", b"d", b"count", b"2"],
            Ok(DeviceRequest::DeadLetters {
                device_id: "d",
                count: 2,
            }),
        ),
        (
            "§2 feedback complete",
            &[b"feedback", b"complete", b"t"],
            Ok(DeviceRequest::Feedback {
                settlement: FeedbackSettlement::Complete,
                lock_token: "t",
            }),
        ),
        (
            "§2 Feedback Abandon",
            &[b"Feedback", b"Abandon", b"t"],
            Ok(DeviceRequest::Feedback {
                settlement: FeedbackSettlement::Abandon,
                lock_token: "t",
            }),
        ),
        (
            "§2 ids and tokens are not case-folded",
            &[b"FEEDBACK", b"COMPLETE", b"AbC"],
            Ok(DeviceRequest::Feedback {
                settlement: FeedbackSettlement::Complete,
                lock_token: "AbC",
            }),
        ),
    ];
    check(cases, &DeviceboundLimits::default());
}

#[test]
fn section_5_unknown_command_and_wrong_number_of_arguments() {
    let cases: &[(&str, &[&[u8]], Expected)] = &[
        // --- verb (protocol.md §5.1 unknown command), checked before arity ---
        ("§5.1 unknown verb", &[b"FLUSH", b"d"], UNKNOWN),
        ("§5.1 unknown verb alone", &[b"NOPE"], UNKNOWN),
        ("§5.1 state store verb", &[b"SET", b"k", b"v"], UNKNOWN),
        ("§5.1 empty verb", &[b""], UNKNOWN),
        (
            "§5.1 verb with trailing space",
            &[b"SEND ", b"d", b"m", b"b"],
            UNKNOWN,
        ),
        ("§5.1 verb prefix", &[b"DEADLETTER", b"d"], UNKNOWN),
        ("§5.1 verb with suffix", &[b"QUEUES", b"d"], UNKNOWN),
        // --- arity (protocol.md §5.1 wrong number of arguments) ---
        ("§5.1 SEND alone", &[b"SEND"], ARITY),
        ("§5.1 SEND device only", &[b"SEND", b"d"], ARITY),
        ("§5.1 SEND no body", &[b"SEND", b"d", b"m"], ARITY),
        (
            "§5.1 SEND 11 option elements (15 elements)",
            &[
                b"SEND",
                b"d",
                b"m",
                b"b",
                b"TTL",
                b"1",
                b"ACK",
                b"full",
                b"GENERATION",
                b"g",
                b"CONTENTTYPE",
                b"t",
                b"CONTENTENCODING",
                b"e",
                b"X",
            ],
            ARITY,
        ),
        (
            "§5.1 SEND 12 option elements (16 elements)",
            &[
                b"SEND",
                b"d",
                b"m",
                b"b",
                b"TTL",
                b"1",
                b"ACK",
                b"full",
                b"GENERATION",
                b"g",
                b"CONTENTTYPE",
                b"t",
                b"CONTENTENCODING",
                b"e",
                b"X",
                b"Y",
            ],
            ARITY,
        ),
        ("§5.1 PURGE no device", &[b"PURGE"], ARITY),
        ("§5.1 PURGE two devices", &[b"PURGE", b"a", b"b"], ARITY),
        ("§5.1 FORGET no device", &[b"FORGET"], ARITY),
        ("§5.1 FORGET two devices", &[b"FORGET", b"a", b"b"], ARITY),
        ("§5.1 QUEUE no device", &[b"QUEUE"], ARITY),
        ("§5.1 QUEUE two devices", &[b"QUEUE", b"a", b"b"], ARITY),
        ("§5.1 DEADLETTERS no device", &[b"DEADLETTERS"], ARITY),
        (
            "§5.1 DEADLETTERS five elements",
            &[b"DEADLETTERS", b"d", b"COUNT", b"1", b"x"],
            ARITY,
        ),
        ("§5.1 FEEDBACK alone", &[b"FEEDBACK"], ARITY),
        ("§5.1 FEEDBACK no token", &[b"FEEDBACK", b"COMPLETE"], ARITY),
        (
            "§5.1 FEEDBACK extra element",
            &[b"FEEDBACK", b"COMPLETE", b"t", b"x"],
            ARITY,
        ),
        ("§5.1 arity before device id", &[b"PURGE", b"", b""], ARITY),
        (
            "§5.1 arity before device id (SEND)",
            &[b"SEND", b"bad/id", b"m"],
            ARITY,
        ),
        (
            "§5.1 arity before subcommand",
            &[b"FEEDBACK", b"BOGUS"],
            ARITY,
        ),
    ];
    check(cases, &DeviceboundLimits::default());
}

#[test]
fn section_5_syntax_errors() {
    let cases: &[(&str, &[&[u8]], Expected)] = &[
        // --- SEND options: unknown, duplicated, value-less ---
        (
            "§5.1 unknown option",
            &[b"SEND", b"d", b"m", b"b", b"PRIORITY", b"1"],
            SYNTAX,
        ),
        (
            "§5.1 option with trailing space",
            &[b"SEND", b"d", b"m", b"b", b"TTL ", b"1"],
            SYNTAX,
        ),
        (
            "§5.1 empty option name",
            &[b"SEND", b"d", b"m", b"b", b"", b"1"],
            SYNTAX,
        ),
        (
            "§5.1 state store PX is not a SEND option",
            &[b"SEND", b"d", b"m", b"b", b"PX", b"1"],
            SYNTAX,
        ),
        (
            "§5.1 TTL without value",
            &[b"SEND", b"d", b"m", b"b", b"TTL"],
            SYNTAX,
        ),
        (
            "§5.1 ACK without value",
            &[b"SEND", b"d", b"m", b"b", b"TTL", b"5", b"ACK"],
            SYNTAX,
        ),
        (
            "§5.1 bare option word",
            &[b"SEND", b"d", b"m", b"b", b"NX"],
            SYNTAX,
        ),
        (
            "§5.1 TTL twice",
            &[b"SEND", b"d", b"m", b"b", b"TTL", b"1", b"TTL", b"2"],
            SYNTAX,
        ),
        (
            "§5.1 TTL and EXPIRES",
            &[b"SEND", b"d", b"m", b"b", b"TTL", b"1", b"EXPIRES", b"2"],
            SYNTAX,
        ),
        (
            "§5.1 EXPIRES and TTL",
            &[b"SEND", b"d", b"m", b"b", b"EXPIRES", b"2", b"TTL", b"1"],
            SYNTAX,
        ),
        (
            "§5.1 EXPIRES twice",
            &[
                b"SEND", b"d", b"m", b"b", b"EXPIRES", b"2", b"expires", b"2",
            ],
            SYNTAX,
        ),
        (
            "§5.1 ACK twice",
            &[b"SEND", b"d", b"m", b"b", b"ACK", b"full", b"ACK", b"full"],
            SYNTAX,
        ),
        (
            "§5.1 GENERATION twice",
            &[
                b"SEND",
                b"d",
                b"m",
                b"b",
                b"GENERATION",
                b"a",
                b"GENERATION",
                b"b",
            ],
            SYNTAX,
        ),
        (
            "§5.1 CONTENTTYPE twice",
            &[
                b"SEND",
                b"d",
                b"m",
                b"b",
                b"CONTENTTYPE",
                b"a",
                b"contenttype",
                b"b",
            ],
            SYNTAX,
        ),
        (
            "§5.1 CONTENTENCODING twice",
            &[
                b"SEND",
                b"d",
                b"m",
                b"b",
                b"CONTENTENCODING",
                b"a",
                b"CONTENTENCODING",
                b"a",
            ],
            SYNTAX,
        ),
        // --- TTL and EXPIRES values ---
        (
            "§5.1 TTL 0",
            &[b"SEND", b"d", b"m", b"b", b"TTL", b"0"],
            SYNTAX,
        ),
        (
            "§5.1 TTL 000",
            &[b"SEND", b"d", b"m", b"b", b"TTL", b"000"],
            SYNTAX,
        ),
        (
            "§5.1 TTL negative",
            &[b"SEND", b"d", b"m", b"b", b"TTL", b"-5"],
            SYNTAX,
        ),
        (
            "§5.1 TTL plus sign",
            &[b"SEND", b"d", b"m", b"b", b"TTL", b"+5"],
            SYNTAX,
        ),
        (
            "§5.1 TTL fractional",
            &[b"SEND", b"d", b"m", b"b", b"TTL", b"1.5"],
            SYNTAX,
        ),
        (
            "§5.1 TTL exponent",
            &[b"SEND", b"d", b"m", b"b", b"TTL", b"1e3"],
            SYNTAX,
        ),
        (
            "§5.1 TTL with space",
            &[b"SEND", b"d", b"m", b"b", b"TTL", b" 5"],
            SYNTAX,
        ),
        (
            "§5.1 TTL empty",
            &[b"SEND", b"d", b"m", b"b", b"TTL", b""],
            SYNTAX,
        ),
        (
            "§5.1 TTL is a word",
            &[b"SEND", b"d", b"m", b"b", b"TTL", b"ACK"],
            SYNTAX,
        ),
        (
            "§5.1 TTL u64 overflow",
            &[b"SEND", b"d", b"m", b"b", b"TTL", b"18446744073709551616"],
            SYNTAX,
        ),
        (
            "§5.1 TTL past year 9999",
            &[b"SEND", b"d", b"m", b"b", b"TTL", b"253402300800000"],
            SYNTAX,
        ),
        (
            "§5.1 EXPIRES past year 9999",
            &[b"SEND", b"d", b"m", b"b", b"EXPIRES", b"253402300800000"],
            SYNTAX,
        ),
        (
            "§5.1 EXPIRES negative",
            &[b"SEND", b"d", b"m", b"b", b"EXPIRES", b"-1"],
            SYNTAX,
        ),
        (
            "§5.1 EXPIRES ISO text",
            &[
                b"SEND",
                b"d",
                b"m",
                b"b",
                b"EXPIRES",
                b"2030-01-01T00:00:00Z",
            ],
            SYNTAX,
        ),
        // --- ACK values ---
        (
            "§5.1 ACK unknown value",
            &[b"SEND", b"d", b"m", b"b", b"ACK", b"all"],
            SYNTAX,
        ),
        (
            "§5.1 ACK empty value",
            &[b"SEND", b"d", b"m", b"b", b"ACK", b""],
            SYNTAX,
        ),
        (
            "§5.1 ACK value with space",
            &[b"SEND", b"d", b"m", b"b", b"ACK", b"full "],
            SYNTAX,
        ),
        // --- text option values ---
        (
            "§5.1 GENERATION empty",
            &[b"SEND", b"d", b"m", b"b", b"GENERATION", b""],
            SYNTAX,
        ),
        (
            "§5.1 CONTENTTYPE empty",
            &[b"SEND", b"d", b"m", b"b", b"CONTENTTYPE", b""],
            SYNTAX,
        ),
        (
            "§5.1 CONTENTTYPE with LF",
            &[b"SEND", b"d", b"m", b"b", b"CONTENTTYPE", b"a\nb"],
            SYNTAX,
        ),
        (
            "§5.1 CONTENTTYPE invalid UTF-8",
            &[b"SEND", b"d", b"m", b"b", b"CONTENTTYPE", b"\xff"],
            SYNTAX,
        ),
        (
            "§5.1 CONTENTENCODING with NUL",
            &[b"SEND", b"d", b"m", b"b", b"CONTENTENCODING", b"a\x00"],
            SYNTAX,
        ),
        (
            "§5.1 GENERATION with DEL",
            &[b"SEND", b"d", b"m", b"b", b"GENERATION", b"a\x7f"],
            SYNTAX,
        ),
        // --- DEADLETTERS ---
        (
            "§5.1 DEADLETTERS COUNT without value",
            &[b"DEADLETTERS", b"d", b"COUNT"],
            SYNTAX,
        ),
        (
            "§5.1 DEADLETTERS unknown option",
            &[b"DEADLETTERS", b"d", b"LIMIT", b"5"],
            SYNTAX,
        ),
        (
            "§5.1 DEADLETTERS COUNT 0",
            &[b"DEADLETTERS", b"d", b"COUNT", b"0"],
            SYNTAX,
        ),
        (
            "§5.1 DEADLETTERS COUNT word",
            &[b"DEADLETTERS", b"d", b"COUNT", b"all"],
            SYNTAX,
        ),
        (
            "§5.1 DEADLETTERS COUNT negative",
            &[b"DEADLETTERS", b"d", b"COUNT", b"-1"],
            SYNTAX,
        ),
        (
            "§5.1 DEADLETTERS COUNT over u32",
            &[b"DEADLETTERS", b"d", b"COUNT", b"4294967296"],
            SYNTAX,
        ),
        // --- FEEDBACK ---
        (
            "§5.1 FEEDBACK unknown settlement",
            &[b"FEEDBACK", b"REJECT", b"t"],
            SYNTAX,
        ),
        (
            "§5.1 FEEDBACK empty token",
            &[b"FEEDBACK", b"COMPLETE", b""],
            SYNTAX,
        ),
        (
            "§1 FEEDBACK token with /",
            &[b"FEEDBACK", b"COMPLETE", b"a/b"],
            SYNTAX,
        ),
        (
            "§1 FEEDBACK token with +",
            &[b"FEEDBACK", b"COMPLETE", b"a+b"],
            SYNTAX,
        ),
        (
            "§1 FEEDBACK token with #",
            &[b"FEEDBACK", b"COMPLETE", b"a#b"],
            SYNTAX,
        ),
        (
            "§1 FEEDBACK token with space",
            &[b"FEEDBACK", b"COMPLETE", b"a b"],
            SYNTAX,
        ),
        (
            "§1 FEEDBACK token with control",
            &[b"FEEDBACK", b"COMPLETE", b"a\tb"],
            SYNTAX,
        ),
        (
            "§1 FEEDBACK token not ASCII",
            &[b"FEEDBACK", b"COMPLETE", "\u{e9}".as_bytes()],
            SYNTAX,
        ),
        (
            "§1 FEEDBACK token of 65 bytes",
            &[
                b"FEEDBACK",
                b"COMPLETE",
                b"12345678901234567890123456789012345678901234567890123456789012345",
            ],
            SYNTAX,
        ),
    ];
    check(cases, &DeviceboundLimits::default());
}

#[test]
fn section_2_framing_errors_are_syntax_errors() {
    let limits = DeviceboundLimits::default();
    let mut seventeen: Vec<&[u8]> = vec![b"SEND", b"d", b"m", b"b"];
    seventeen.extend([&b"x"[..]; 13]);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("§2 empty payload", Vec::new()),
        ("§2 not an array", b"$4\r\nSEND\r\n".to_vec()),
        ("§2 empty array", b"*0\r\n".to_vec()),
        (
            "§2 trailing byte",
            b"*2\r\n$5\r\nQUEUE\r\n$1\r\nd\r\nX".to_vec(),
        ),
        ("§2 truncated", b"*2\r\n$5\r\nQUEUE\r\n$1\r\n".to_vec()),
        (
            "§2 nested array",
            b"*2\r\n$5\r\nQUEUE\r\n*1\r\n$1\r\nd\r\n".to_vec(),
        ),
        (
            "§2 integer element",
            b"*2\r\n$5\r\nQUEUE\r\n:1\r\n".to_vec(),
        ),
        ("§2 null bulk", b"*2\r\n$5\r\nQUEUE\r\n$-1\r\n".to_vec()),
        (
            "§2 declared length beyond the payload",
            b"*2\r\n$5\r\nQUEUE\r\n$999\r\nd\r\n".to_vec(),
        ),
        ("§9 seventeen elements", encode_elements(&seventeen)),
    ];
    for (name, payload) in cases {
        assert_eq!(
            parse_device_request(&payload, &limits),
            Err(ProtocolError::Syntax),
            "case: {name}"
        );
    }
}

/// `[A-Za-z0-9-.%_*?!(),:=@$']`, 1–128 bytes (devicebound.md §1).
#[test]
fn section_1_device_id_alphabet_and_length() {
    let limits = DeviceboundLimits::default();
    let at_limit = "a".repeat(128);
    let over_limit = "a".repeat(129);
    let every_allowed: String = ('A'..='Z')
        .chain('a'..='z')
        .chain('0'..='9')
        .chain("-.%_*?!(),:=@$'".chars())
        .collect();
    let mut accepted: Vec<String> = vec![at_limit, every_allowed];
    accepted.extend("-.%_*?!(),:=@$'".chars().map(String::from));
    accepted.extend(["A", "z", "0", "9"].map(String::from));
    for device_id in &accepted {
        for verb in ["PURGE", "FORGET", "QUEUE", "DEADLETTERS"] {
            let payload = encode_elements(&[verb.as_bytes(), device_id.as_bytes()]);
            let parsed = parse_device_request(&payload, &limits);
            assert_eq!(
                parsed.as_ref().map(DeviceRequest::device_id),
                Ok(Some(device_id.as_str())),
                "{verb} {device_id:?} is valid"
            );
        }
        let payload = encode_elements(&[b"SEND", device_id.as_bytes(), b"m", b"b"]);
        assert_eq!(
            parse_device_request(&payload, &limits),
            Ok(DeviceRequest::Send(send(device_id, "m", b"b"))),
            "SEND {device_id:?}"
        );
    }

    let mut refused: Vec<Vec<u8>> = vec![Vec::new(), over_limit.into_bytes()];
    let disallowed = b"/+# &~\"\\;<>[]{}|^`\t\r\n\x00\x7f";
    refused.extend(disallowed.iter().map(|&byte| vec![b'd', byte, b'v']));
    refused.extend([
        "d\u{e9}v".as_bytes().to_vec(),
        b"\xff".to_vec(),
        b"dev ".to_vec(),
    ]);
    for device_id in &refused {
        for verb in ["PURGE", "FORGET", "QUEUE", "DEADLETTERS"] {
            let payload = encode_elements(&[verb.as_bytes(), device_id]);
            assert_eq!(
                parse_device_request(&payload, &limits),
                BAD_DEVICE,
                "{verb} {device_id:?}"
            );
        }
        let payload = encode_elements(&[b"SEND", device_id, b"m", b"b"]);
        assert_eq!(
            parse_device_request(&payload, &limits),
            BAD_DEVICE,
            "SEND {device_id:?}"
        );
    }
}

#[test]
fn section_2_message_id_and_body_limits() {
    let limits = DeviceboundLimits {
        max_message_bytes: 4,
    };
    let id_at_limit = "m".repeat(128);
    let id_over_limit = "m".repeat(129);
    let cases: &[(&str, &[&[u8]], Expected)] = &[
        (
            "§2 empty message id",
            &[b"SEND", b"d", b"", b"b"],
            BAD_MESSAGE_ID,
        ),
        (
            "§2 message id over 128 bytes",
            &[b"SEND", b"d", id_over_limit.as_bytes(), b"b"],
            BAD_MESSAGE_ID,
        ),
        (
            "§2 message id not UTF-8",
            &[b"SEND", b"d", b"m\xff", b"b"],
            BAD_MESSAGE_ID,
        ),
        (
            "§2 message id with LF",
            &[b"SEND", b"d", b"m\n", b"b"],
            BAD_MESSAGE_ID,
        ),
        (
            "§2 message id with NUL",
            &[b"SEND", b"d", b"\x00", b"b"],
            BAD_MESSAGE_ID,
        ),
        (
            "§2 message id with C1 control",
            &[b"SEND", b"d", "m\u{85}".as_bytes(), b"b"],
            BAD_MESSAGE_ID,
        ),
        (
            "§2 message id with non-character",
            &[b"SEND", b"d", "m\u{ffff}".as_bytes(), b"b"],
            BAD_MESSAGE_ID,
        ),
        (
            "§2 body one over the limit",
            &[b"SEND", b"d", b"m", b"12345"],
            TOO_LARGE,
        ),
        // --- what is checked first ---
        (
            "§2 device id before message id",
            &[b"SEND", b"", b"", b"12345"],
            BAD_DEVICE,
        ),
        (
            "§2 message id before body",
            &[b"SEND", b"d", b"", b"12345"],
            BAD_MESSAGE_ID,
        ),
        (
            "§2 body before options",
            &[b"SEND", b"d", b"m", b"12345", b"BOGUS", b"1"],
            TOO_LARGE,
        ),
        (
            "§2 device id before options",
            &[b"SEND", b"d/", b"m", b"b", b"TTL"],
            BAD_DEVICE,
        ),
        (
            "§2 DEADLETTERS device id before options",
            &[b"DEADLETTERS", b"", b"BOGUS", b"1"],
            BAD_DEVICE,
        ),
    ];
    check(cases, &limits);

    let accepted: &[(&str, &[&[u8]], Expected)] = &[
        (
            "§2 body at the limit",
            &[b"SEND", b"d", b"m", b"1234"],
            ok_send(send("d", "m", b"1234")),
        ),
        (
            "§2 message id of one byte",
            &[b"SEND", b"d", b"m", b""],
            ok_send(send("d", "m", b"")),
        ),
        (
            "§2 message id with IoT Hub punctuation",
            &[b"SEND", b"d", b"-:.+%_#*?!(),=@;$'", b""],
            ok_send(send("d", "-:.+%_#*?!(),=@;$'", b"")),
        ),
    ];
    check(accepted, &limits);
    let payload = encode_elements(&[b"SEND", b"d", id_at_limit.as_bytes(), b""]);
    assert_eq!(
        parse_device_request(&payload, &limits),
        Ok(DeviceRequest::Send(send("d", &id_at_limit, b""))),
        "§2 message id of 128 bytes"
    );
}

#[test]
fn section_2_body_limit_is_the_configured_one_not_the_framing_one() {
    let limits = DeviceboundLimits::default();
    let at_limit = vec![b'x'; 65_536];
    let over_limit = vec![b'x'; 65_537];
    let payload = encode_elements(&[b"SEND", b"d", b"m", &at_limit]);
    assert_eq!(
        parse_device_request(&payload, &limits),
        Ok(DeviceRequest::Send(send("d", "m", &at_limit)))
    );
    let payload = encode_elements(&[b"SEND", b"d", b"m", &over_limit]);
    assert_eq!(parse_device_request(&payload, &limits), TOO_LARGE);
}

#[test]
fn section_2_errors_encode_as_their_exact_wire_text() {
    let cases = [
        (
            ProtocolError::InvalidDeviceId,
            &b"-ERR invalid device id\r\n"[..],
        ),
        (
            ProtocolError::InvalidMessageId,
            b"-ERR invalid message id\r\n",
        ),
        (
            ProtocolError::MessageTooLarge,
            b"-ERR message too large\r\n",
        ),
        (ProtocolError::Syntax, b"-ERR syntax error\r\n"),
        (
            ProtocolError::WrongArity,
            b"-ERR wrong number of arguments\r\n",
        ),
        (ProtocolError::UnknownCommand, b"-ERR unknown command\r\n"),
    ];
    for (error, wire) in cases {
        assert_eq!(
            Reply::Error(ErrorReply::from(error)).encode(),
            wire,
            "{error:?}"
        );
        assert!(ErrorReply::from(error).answered_by(ErrorService::Devicebound));
    }
    assert_eq!(
        Reply::Error(ErrorReply::DeviceQueueFull).encode(),
        b"-ERR device queue is full\r\n"
    );
}

#[test]
fn section_1_application_properties_skip_double_underscore_names_and_keep_order() {
    let user_properties = [
        ("__srcId", "client-1"),
        ("color", "red"),
        ("__ts", "1:0:x"),
        ("_single", "kept"),
        ("$partition", "p"),
        ("color", "blue"),
        ("", "empty name"),
        ("__", "bare double underscore"),
        ("weird name", "a&b=c/d"),
    ];
    let expected: Vec<(String, String)> = [
        ("color", "red"),
        ("_single", "kept"),
        ("$partition", "p"),
        ("color", "blue"),
        ("", "empty name"),
        ("weird name", "a&b=c/d"),
    ]
    .iter()
    .map(|&(name, value)| (name.to_owned(), value.to_owned()))
    .collect();
    assert_eq!(application_properties(user_properties), Ok(expected));
    assert_eq!(application_properties([]), Ok(Vec::new()));
}

#[test]
fn section_2_application_properties_named_like_the_delivery_s_own_are_refused() {
    // (user properties, expected): a `$.` name would stand next to the delivery's own
    // `$.mid`, `$.lt`, `$.exp`, `$.ct`, `$.ce` in the property bag and user properties.
    type Pairs = Vec<(&'static str, &'static str)>;
    type Case = (
        &'static [(&'static str, &'static str)],
        Result<Pairs, ProtocolError>,
    );
    const REFUSED: Result<Pairs, ProtocolError> = Err(ProtocolError::InvalidPropertyName);
    let cases: &[Case] = &[
        (&[("$.lt", "forged-token")], REFUSED),
        (&[("$.mid", "m")], REFUSED),
        (&[("$.exp", "2099-01-01T00:00:00.000Z")], REFUSED),
        (&[("$.ct", "text/plain")], REFUSED),
        (&[("$.ce", "utf-8")], REFUSED),
        (&[("$.", "bare prefix")], REFUSED),
        (&[("$.LT", "any case")], REFUSED),
        (&[("$.to", "any other system name")], REFUSED),
        (&[("color", "red"), ("$.lt", "after a good one")], REFUSED),
        (&[("$.lt", "x"), ("__srcId", "c")], REFUSED),
        // Not the prefix: carried as they are.
        (&[("$", "v")], Ok(vec![("$", "v")])),
        (&[("$lt", "v")], Ok(vec![("$lt", "v")])),
        (&[("%24.lt", "v")], Ok(vec![("%24.lt", "v")])),
        (&[(" $.lt", "v")], Ok(vec![(" $.lt", "v")])),
        (&[("x$.lt", "v")], Ok(vec![("x$.lt", "v")])),
        (&[("lt", "$.lt")], Ok(vec![("lt", "$.lt")])),
        // An envelope property is no application property, whatever follows.
        (&[("__$.lt", "v")], Ok(vec![])),
    ];
    for (user_properties, expected) in cases {
        let expected = expected.clone().map(|pairs| {
            pairs
                .iter()
                .map(|&(name, value)| (name.to_owned(), value.to_owned()))
                .collect::<Vec<_>>()
        });
        assert_eq!(
            application_properties(user_properties.iter().copied()),
            expected,
            "{user_properties:?}"
        );
    }
    assert_eq!(
        Reply::Error(ErrorReply::from(ProtocolError::InvalidPropertyName)).encode(),
        b"-ERR invalid property name\r\n"
    );
    assert!(ErrorReply::InvalidPropertyName.answered_by(ErrorService::Devicebound));
}

#[test]
fn verbs_labels_sniffing_and_mutations() {
    let labels: Vec<&str> = DeviceVerb::ALL.iter().map(|verb| verb.label()).collect();
    assert_eq!(
        labels,
        [
            "send",
            "purge",
            "forget",
            "queue",
            "deadletters",
            "feedback",
            "unknown"
        ]
    );
    let sniff_cases: &[(&[u8], DeviceVerb)] = &[
        (b"*4\r\n$4\r\nSEND\r\n$1\r\nd\r\n", DeviceVerb::Send),
        (b"*1\r\n$5\r\npurge\r\n", DeviceVerb::Purge),
        (b"*9\r\n$6\r\nForget\r\n", DeviceVerb::Forget),
        (b"*2\r\n$5\r\nQUEUE\r\n$9\r\nx", DeviceVerb::Queue),
        (b"*1\r\n$11\r\nDEADLETTERS\r\n", DeviceVerb::DeadLetters),
        (b"*3\r\n$8\r\nFEEDBACK\r\n", DeviceVerb::Feedback),
        (b"*1\r\n$12\r\nDEADLETTERSX\r\n", DeviceVerb::Unknown),
        (b"*1\r\n$3\r\nSET\r\n", DeviceVerb::Unknown),
        (b"", DeviceVerb::Unknown),
    ];
    for (payload, verb) in sniff_cases {
        assert_eq!(sniff_device_verb(payload), *verb, "{payload:?}");
    }
    let mutation_cases: &[(DeviceRequest, bool)] = &[
        (DeviceRequest::Send(send("d", "m", b"")), true),
        (DeviceRequest::Purge { device_id: "d" }, true),
        (DeviceRequest::Forget { device_id: "d" }, true),
        (DeviceRequest::Queue { device_id: "d" }, false),
        (
            DeviceRequest::DeadLetters {
                device_id: "d",
                count: 1,
            },
            false,
        ),
        (
            DeviceRequest::Feedback {
                settlement: FeedbackSettlement::Complete,
                lock_token: "t",
            },
            true,
        ),
    ];
    for (request, is_mutation) in mutation_cases {
        assert_eq!(request.is_mutation(), *is_mutation, "{request:?}");
        assert_eq!(
            sniff_device_verb(&encode_device_request(request)),
            request.verb()
        );
    }
}

#[test]
fn section_2_encoder_output_is_byte_exact() {
    let send_request = DeviceRequest::Send(SendRequest {
        expiry: Expiry::Ttl(1000),
        ack: Ack::Full,
        generation: Some("g"),
        ..send("d1", "m1", b"hi")
    });
    let cases: &[(DeviceRequest, &[u8])] = &[
        (
            send_request,
            b"*10\r\n$4\r\nSEND\r\n$2\r\nd1\r\n$2\r\nm1\r\n$2\r\nhi\r\n$3\r\nTTL\r\n$4\r\n1000\r\n$3\r\nACK\r\n$4\r\nfull\r\n$10\r\nGENERATION\r\n$1\r\ng\r\n",
        ),
        (
            DeviceRequest::Queue { device_id: "d1" },
            b"*2\r\n$5\r\nQUEUE\r\n$2\r\nd1\r\n",
        ),
        (
            DeviceRequest::DeadLetters {
                device_id: "d1",
                count: 10,
            },
            b"*4\r\n$11\r\nDEADLETTERS\r\n$2\r\nd1\r\n$5\r\nCOUNT\r\n$2\r\n10\r\n",
        ),
        (
            DeviceRequest::Feedback {
                settlement: FeedbackSettlement::Abandon,
                lock_token: "t",
            },
            b"*3\r\n$8\r\nFEEDBACK\r\n$7\r\nABANDON\r\n$1\r\nt\r\n",
        ),
    ];
    for (request, wire) in cases {
        assert_eq!(encode_device_request(request), *wire, "{request:?}");
    }
}

/// devicebound.md §1: TTL or EXPIRES, else the default TTL, capped at 2 days.
#[test]
fn section_1_expiry_resolution() {
    const ENQUEUED: u64 = 1_700_000_000_000;
    const DEFAULT_TTL: u64 = 3_600_000;
    let with = |expiry| SendRequest {
        expiry,
        ..send("d", "m", b"")
    };
    let cases: &[(&str, Expiry, u64, u64)] = &[
        (
            "default TTL",
            Expiry::Default,
            ENQUEUED,
            ENQUEUED + DEFAULT_TTL,
        ),
        ("TTL", Expiry::Ttl(5_000), ENQUEUED, ENQUEUED + 5_000),
        (
            "TTL exactly 2 days",
            Expiry::Ttl(MAX_TTL_MS),
            ENQUEUED,
            ENQUEUED + MAX_TTL_MS,
        ),
        (
            "TTL over 2 days is capped",
            Expiry::Ttl(MAX_TTL_MS + 1),
            ENQUEUED,
            ENQUEUED + MAX_TTL_MS,
        ),
        (
            "EXPIRES",
            Expiry::At(ENQUEUED + 10),
            ENQUEUED,
            ENQUEUED + 10,
        ),
        (
            "EXPIRES in the past stays in the past",
            Expiry::At(5),
            ENQUEUED,
            5,
        ),
        (
            "EXPIRES after 2 days is capped",
            Expiry::At(u64::MAX),
            ENQUEUED,
            ENQUEUED + MAX_TTL_MS,
        ),
        (
            "no overflow near u64::MAX",
            Expiry::Ttl(u64::MAX),
            u64::MAX - 1,
            u64::MAX,
        ),
    ];
    for (name, expiry, enqueued, expected) in cases {
        assert_eq!(
            with(*expiry).expires_at_ms(*enqueued, DEFAULT_TTL),
            *expected,
            "case: {name}"
        );
    }
    assert_eq!(MAX_TTL_MS, 172_800_000);
}

#[test]
fn section_4_ack_modes_choose_the_feedback() {
    let cases = [
        (Ack::None, "none", false, false),
        (Ack::Positive, "positive", true, false),
        (Ack::Negative, "negative", false, true),
        (Ack::Full, "full", true, true),
    ];
    for (mode, keyword, success, failure) in cases {
        assert_eq!(mode.keyword(), keyword);
        assert_eq!(mode.on_success(), success, "{mode:?}");
        assert_eq!(mode.on_failure(), failure, "{mode:?}");
    }
    assert_eq!(Ack::default(), Ack::None);
}
