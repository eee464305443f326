//! Quoting and cutting of values and parser messages, and the messages' shapes.

use super::*;

#[test]
fn quote_escapes_and_cuts_at_100_characters() {
    let table: &[(&str, &str)] = &[
        ("abc", "\"abc\""),
        ("", "\"\""),
        ("a\"b\\c", "\"a\\\"b\\\\c\""),
        ("line\nbreak\u{7}", "\"line\\nbreak\\u{7}\""),
        ("é*", "\"é*\""),
    ];
    for (value, expected) in table {
        assert_eq!(quote(value), *expected, "{value:?}");
    }
    let long = "x".repeat(MAX_QUOTED_CHARS + 1);
    assert_eq!(
        quote(&long),
        format!("\"{}\"…", "x".repeat(MAX_QUOTED_CHARS))
    );
    let exact = "é".repeat(MAX_QUOTED_CHARS);
    assert_eq!(quote(&exact), format!("\"{exact}\""));
}

#[test]
fn cut_message_keeps_one_line_of_at_most_300_characters() {
    assert_eq!(
        cut_message("invalid array\nexpected `]`\n"),
        "invalid array; expected `]`"
    );
    assert_eq!(cut_message("a\tb"), "a\\tb");
    let long = "y".repeat(MAX_MESSAGE_CHARS + 5);
    assert_eq!(
        cut_message(&long),
        format!("{}…", "y".repeat(MAX_MESSAGE_CHARS))
    );
}

#[test]
fn messages() {
    let table = [
        (
            PolicyError::TooLarge { bytes: 5_000_000 },
            "policy is 5000000 bytes, more than the limit of 4194304",
        ),
        (
            PolicyError::Toml {
                line: 3,
                column: 7,
                message: "invalid array".into(),
            },
            "invalid TOML at line 3, column 7: invalid array",
        ),
        (
            PolicyError::invalid("state_store[0].keys (line 1)", "must not be empty"),
            "state_store[0].keys (line 1): must not be empty",
        ),
    ];
    for (error, expected) in table {
        assert_eq!(error.to_string(), expected);
    }
}
