use super::*;
use std::collections::HashSet;

#[test]
fn section_5_1_error_table_is_byte_exact() {
    // (variant, exact wire payload per spec §5.1, metric label)
    let cases: [(ErrorReply, &[u8], &str); 17] = [
        (
            ErrorReply::TimestampSkew,
            b"-ERR the request timestamp is too far in the future; ensure that the client and broker system clocks are synchronized\r\n",
            "timestamp_skew",
        ),
        (
            ErrorReply::FencingTokenRequired,
            b"-ERR a fencing token is required for this request\r\n",
            "missing_fencing_token",
        ),
        (
            ErrorReply::FencingTokenSkew,
            b"-ERR the request fencing token timestamp is too far in the future; ensure that the client and broker system clocks are synchronized\r\n",
            "fencing_token_skew",
        ),
        (
            ErrorReply::FencingTokenLower,
            b"-ERR the request fencing token is a lower version than the fencing token protecting the resource\r\n",
            "fencing_token_lower_version",
        ),
        (ErrorReply::QuotaExceeded, b"-ERR the quota has been exceeded\r\n", "quota_exceeded"),
        (ErrorReply::Syntax, b"-ERR syntax error\r\n", "syntax_error"),
        (ErrorReply::NotAuthorized, b"-ERR not authorized\r\n", "not_authorized"),
        (ErrorReply::UnknownCommand, b"-ERR unknown command\r\n", "unknown_command"),
        (
            ErrorReply::WrongArity,
            b"-ERR wrong number of arguments\r\n",
            "wrong_number_of_arguments",
        ),
        (ErrorReply::MissingTimestamp, b"-ERR missing timestamp\r\n", "timestamp_missing"),
        (
            ErrorReply::MalformedTimestamp,
            b"-ERR malformed timestamp\r\n",
            "timestamp_malformed",
        ),
        (ErrorReply::EmptyKey, b"-ERR the key length is zero\r\n", "key_length_zero"),
        // devicebound.md §2
        (
            ErrorReply::DeviceQueueFull,
            b"-ERR device queue is full\r\n",
            "device_queue_full",
        ),
        (
            ErrorReply::InvalidDeviceId,
            b"-ERR invalid device id\r\n",
            "invalid_device_id",
        ),
        (
            ErrorReply::InvalidMessageId,
            b"-ERR invalid message id\r\n",
            "invalid_message_id",
        ),
        (
            ErrorReply::MessageTooLarge,
            b"-ERR message too large\r\n",
            "message_too_large",
        ),
        (
            ErrorReply::InvalidPropertyName,
            b"-ERR invalid property name\r\n",
            "invalid_property_name",
        ),
    ];
    for (error, wire, label) in cases {
        assert_eq!(Reply::Error(error).encode(), wire, "{error:?}");
        assert_eq!(error.result_label(), label, "{error:?}");
        assert_eq!(Reply::Error(error).result_label(), label, "{error:?}");
    }
    let covered: Vec<ErrorReply> = cases.iter().map(|(error, _, _)| *error).collect();
    assert_eq!(
        covered,
        ErrorReply::ALL,
        "every variant has a row, in ALL order"
    );
}

#[test]
fn section_5_1_error_table_is_well_formed() {
    let variants: HashSet<ErrorReply> = ErrorReply::ALL.into_iter().collect();
    let messages: HashSet<&str> = ErrorReply::ALL
        .iter()
        .map(|error| error.message())
        .collect();
    let labels: HashSet<&str> = ErrorReply::ALL
        .iter()
        .map(|error| error.result_label())
        .collect();
    assert_eq!(variants.len(), 17, "ALL has no duplicates");
    assert_eq!(messages.len(), 17, "messages are distinct");
    assert_eq!(labels.len(), 17, "labels are distinct");
    let per_service: HashSet<ErrorReply> = ErrorReply::of(ErrorService::StateStore)
        .into_iter()
        .chain(ErrorReply::of(ErrorService::Devicebound))
        .collect();
    assert_eq!(per_service, variants, "every error belongs to a service");
    for error in ErrorReply::ALL {
        let message = error.message();
        assert!(!message.is_empty() && message.is_ascii(), "{error:?}");
        assert!(
            !message.contains(['\r', '\n']),
            "{error:?}: no CR/LF inside"
        );
        assert_eq!(message.trim(), message, "{error:?}: no surrounding spaces");
        let label = error.result_label();
        assert!(
            label
                .bytes()
                .all(|byte| byte.is_ascii_lowercase() || byte == b'_'),
            "{error:?}: snake_case label"
        );
        assert!(
            !["ok", "not_found", "not_applied"].contains(&label),
            "{error:?}"
        );
    }
    // §5.1 and the SDKs: "than", not the article's stale "that".
    assert!(
        ErrorReply::FencingTokenLower
            .message()
            .contains("lower version than the")
    );
}

#[test]
fn section_5_1_protocol_errors_map_to_their_replies() {
    let cases = [
        (ProtocolError::Syntax, ErrorReply::Syntax),
        (ProtocolError::WrongArity, ErrorReply::WrongArity),
        (ProtocolError::UnknownCommand, ErrorReply::UnknownCommand),
        (ProtocolError::EmptyKey, ErrorReply::EmptyKey),
        (ProtocolError::InvalidDeviceId, ErrorReply::InvalidDeviceId),
        (
            ProtocolError::InvalidMessageId,
            ErrorReply::InvalidMessageId,
        ),
        (ProtocolError::MessageTooLarge, ErrorReply::MessageTooLarge),
        (
            ProtocolError::InvalidPropertyName,
            ErrorReply::InvalidPropertyName,
        ),
    ];
    for (protocol_error, reply) in cases {
        assert_eq!(ErrorReply::from(protocol_error), reply);
        assert_eq!(protocol_error.to_string(), reply.message());
    }
}

#[test]
fn section_2_reply_encoding_is_byte_exact() {
    let cases: &[(&str, Reply, &[u8], &str)] = &[
        ("§2 SET applied / KEYNOTIFY", Reply::Ok, b"+OK\r\n", "ok"),
        (
            "§2 SET not applied is :-1",
            Reply::NotApplied,
            b":-1\r\n",
            "not_applied",
        ),
        (
            "§2 VDEL mismatch as integer",
            Reply::Integer(-1),
            b":-1\r\n",
            "not_applied",
        ),
        ("§2 DEL deleted", Reply::Integer(1), b":1\r\n", "ok"),
        ("§2 DEL missing", Reply::Integer(0), b":0\r\n", "not_found"),
        ("integer many", Reply::Integer(42), b":42\r\n", "ok"),
        (
            "integer max",
            Reply::Integer(i64::MAX),
            b":9223372036854775807\r\n",
            "ok",
        ),
        (
            "integer min",
            Reply::Integer(i64::MIN),
            b":-9223372036854775808\r\n",
            "not_applied",
        ),
        (
            "§2 GET hit",
            Reply::Bulk(b"value".to_vec()),
            b"$5\r\nvalue\r\n",
            "ok",
        ),
        (
            "§2 GET hit, empty value",
            Reply::Bulk(Vec::new()),
            b"$0\r\n\r\n",
            "ok",
        ),
        (
            "§2 GET hit, binary value with CRLF",
            Reply::Bulk(b"a\r\n\x00\xff".to_vec()),
            b"$5\r\na\r\n\x00\xff\r\n",
            "ok",
        ),
        ("§2 GET miss", Reply::Nil, b"$-1\r\n", "not_found"),
        (
            "§5.1 error with one space",
            Reply::Error(ErrorReply::Syntax),
            b"-ERR syntax error\r\n",
            "syntax_error",
        ),
    ];
    for (name, reply, wire, label) in cases {
        let encoded = reply.encode();
        assert_eq!(encoded, *wire, "case: {name}");
        assert!(!encoded.is_empty(), "case: {name}: never an empty payload");
        assert_eq!(reply.result_label(), *label, "case: {name}");
    }
}

#[test]
fn section_2_not_applied_is_never_an_error_or_nil() {
    let encoded = Reply::NotApplied.encode();
    assert_ne!(encoded, b"-1\r\n");
    assert_ne!(encoded, b"$-1\r\n");
    assert_eq!(
        Reply::from(ErrorReply::EmptyKey),
        Reply::Error(ErrorReply::EmptyKey)
    );
}

#[test]
fn each_service_answers_its_own_errors() {
    // Spec §5.1 (state store) and devicebound.md §2, in `ALL` order.
    let state_store = [
        ErrorReply::TimestampSkew,
        ErrorReply::FencingTokenRequired,
        ErrorReply::FencingTokenSkew,
        ErrorReply::FencingTokenLower,
        ErrorReply::QuotaExceeded,
        ErrorReply::Syntax,
        ErrorReply::NotAuthorized,
        ErrorReply::UnknownCommand,
        ErrorReply::WrongArity,
        ErrorReply::MissingTimestamp,
        ErrorReply::MalformedTimestamp,
        ErrorReply::EmptyKey,
    ];
    let devicebound = [
        ErrorReply::QuotaExceeded,
        ErrorReply::Syntax,
        ErrorReply::NotAuthorized,
        ErrorReply::UnknownCommand,
        ErrorReply::WrongArity,
        ErrorReply::DeviceQueueFull,
        ErrorReply::InvalidDeviceId,
        ErrorReply::InvalidMessageId,
        ErrorReply::MessageTooLarge,
        ErrorReply::InvalidPropertyName,
    ];
    assert_eq!(ErrorReply::of(ErrorService::StateStore), state_store);
    assert_eq!(ErrorReply::of(ErrorService::Devicebound), devicebound);
}
