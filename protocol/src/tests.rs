use super::*;

#[test]
fn section_9_default_limits() {
    let limits = ProtocolLimits::default();
    assert_eq!(limits.max_key_bytes, 60 * 1024);
    assert_eq!(limits.max_value_bytes, 4 * 1024 * 1024);
    assert_eq!(limits.max_array_len, 8);
    assert_eq!(limits.max_px_ms, 2_592_000_000);
    assert_eq!(limits.max_bulk_bytes(), 4 * 1024 * 1024);
    let tiny = ProtocolLimits {
        max_key_bytes: 1,
        max_value_bytes: 2,
        ..limits
    };
    assert_eq!(tiny.max_bulk_bytes(), ProtocolLimits::MIN_FRAMED_BULK_BYTES);
}

#[test]
fn section_5_1_protocol_error_display_is_the_wire_message() {
    let cases = [
        (ProtocolError::Syntax, "syntax error"),
        (ProtocolError::WrongArity, "wrong number of arguments"),
        (ProtocolError::UnknownCommand, "unknown command"),
        (ProtocolError::EmptyKey, "the key length is zero"),
        (ProtocolError::InvalidDeviceId, "invalid device id"),
        (ProtocolError::InvalidMessageId, "invalid message id"),
        (ProtocolError::MessageTooLarge, "message too large"),
        (ProtocolError::InvalidPropertyName, "invalid property name"),
    ];
    for (error, wire_message) in cases {
        assert_eq!(error.to_string(), wire_message, "{error:?}");
        assert_eq!(ErrorReply::from(error).message(), wire_message, "{error:?}");
    }
}
