//! Reading the policy text: positions, exact-versus-glob classification, key decoding, and the
//! limits (whose documents are generated here; the hand-written bad documents are in
//! `policy/tests/errors.toml`).

use super::*;

fn rule(keys: &str) -> String {
    format!("[[state_store]]\nprincipals = [\"p\"]\n{keys}\nmethod = \"Read\"\n")
}

fn keys_of(text: &str) -> Vec<Key> {
    let document = read(text).expect("valid");
    document
        .state_store
        .into_iter()
        .flat_map(|rule| rule.keys)
        .collect()
}

fn message(text: &str) -> String {
    read(text).expect_err("invalid").to_string()
}

#[test]
fn line_and_column_count_from_one_in_characters() {
    let text = "ab\né€x\n\nz";
    let table = [
        (0, (1, 1)),
        (2, (1, 3)),
        (3, (2, 1)),
        (5, (2, 2)),  // after é (2 bytes)
        (9, (2, 4)),  // after € (3 bytes)
        (6, (2, 2)),  // inside €: its start
        (11, (4, 1)), // z
        (99, (4, 2)), // past the end
    ];
    for (offset, expected) in table {
        assert_eq!(line_and_column(text, offset), expected, "offset {offset}");
    }
}

#[test]
fn globs_are_entries_with_a_star_question_mark_or_bracket() {
    for (text, glob) in [
        ("abc", false),
        ("a/b.c-d_e", false),
        ("a*", true),
        ("a?", true),
        ("[ab]", true),
        ("[", true),
        ("]", false),
        ("!", false),
    ] {
        assert_eq!(is_glob(text), glob, "{text}");
    }
}

#[test]
fn pattern_keys_are_exact_without_wildcards_and_string_keys_always() {
    let keys = keys_of(&rule(r#"keys = ["plain", "a*", "[x]"]"#));
    assert!(matches!(&keys[0], Key::Exact(bytes) if bytes == b"plain"));
    assert!(matches!(&keys[1], Key::Glob(text, _) if text == "a*"));
    assert!(matches!(&keys[2], Key::Glob(text, _) if text == "[x]"));
    let keys = keys_of(&rule(
        "key_type = \"string\"\nkeys = [\"a*\", \"?\", \"[\"]",
    ));
    let exact: Vec<&[u8]> = keys
        .iter()
        .map(|key| match key {
            Key::Exact(bytes) => bytes.as_slice(),
            Key::Glob(text, _) => panic!("string key {text} compiled as a glob"),
        })
        .collect();
    assert_eq!(exact, [&b"a*"[..], b"?", b"["]);
}

#[test]
fn binary_keys_decode_base64_padded_or_not_and_hex_in_either_case() {
    let table: &[(&str, &[u8])] = &[
        (r#"key_type = "binary""#, b"\x00\xff"),
        ("key_type = \"binary\"\nencoding = \"base64\"", b"\x00\xff"),
        ("key_type = \"binary\"\nencoding = \"hex\"", b"\xab\xcd"),
    ];
    for (header, expected) in table {
        let keys = if header.contains("hex") {
            ["abcd", "ABCD", "aBcD"]
        } else {
            ["AP8=", "AP8", "AP8="]
        };
        let text = rule(&format!(
            "{header}\nkeys = [\"{}\", \"{}\", \"{}\"]",
            keys[0], keys[1], keys[2]
        ));
        for key in keys_of(&text) {
            assert!(
                matches!(&key, Key::Exact(bytes) if bytes == expected),
                "{text}"
            );
        }
    }
    // Trailing bits that are not zero, a wrong padding, the URL-safe alphabet: refused.
    for bad in ["AP9", "AP8==", "AP_-", "A"] {
        let text = rule(&format!("key_type = \"binary\"\nkeys = [\"{bad}\"]"));
        assert!(message(&text).contains("invalid base64"), "{bad}");
    }
}

#[test]
fn principals_devices_and_members_are_exact_or_globs() {
    let text = "[groups]\ng = [\"m\", \"m-*\"]\n\
                [[devicebound]]\nprincipals = [\"p\", \"p?\"]\ngroups = [\"g\"]\n\
                devices = [\"d\", \"[d]*\"]\nactions = [\"send\"]\n";
    let document = read(text).expect("valid");
    let kinds = |matchers: &[Matcher]| -> Vec<bool> {
        matchers
            .iter()
            .map(|matcher| matches!(matcher, Matcher::Glob(..)))
            .collect()
    };
    assert_eq!(kinds(&document.groups[0].members), [false, true]);
    let rule = &document.devicebound[0];
    assert_eq!(kinds(&rule.subjects.principals), [false, true]);
    assert_eq!(rule.subjects.groups, [0]);
    assert_eq!(kinds(&rule.devices), [false, true]);
    assert_eq!(rule.actions, DeviceAction::Send.bit());
}

#[test]
fn methods_and_actions_become_bits() {
    let read_bit = KeyAccess::Read.bit();
    let write_bit = KeyAccess::Write.bit();
    for (method, bits) in [
        ("Read", read_bit),
        ("Write", write_bit),
        ("ReadWrite", read_bit | write_bit),
    ] {
        let text =
            format!("[[state_store]]\nprincipals=[\"p\"]\nkeys=[\"k\"]\nmethod=\"{method}\"");
        assert_eq!(read(&text).expect("valid").state_store[0].access, bits);
    }
    let text = "[[devicebound]]\nprincipals=[\"p\"]\ndevices=[\"d\"]\n\
                actions=[\"send\",\"purge\",\"forget\",\"read\",\"feedback\",\"send\"]";
    assert_eq!(read(text).expect("valid").devicebound[0].actions, 0b1_1111);
}

#[test]
fn rules_are_named_by_index_and_header_line() {
    let text = "# comment\n\n[[state_store]]\nprincipals=[\"p\"]\nkeys=[\"k\"]\nmethod=\"Read\"\n\
                \n[[state_store]]\nprincipals=[\"p\"]\nkeys=[\"k\", \"\"]\nmethod=\"Read\"\n";
    assert_eq!(
        message(text),
        "state_store[1].keys[1] (line 8): must not be empty"
    );
}

#[test]
fn the_text_is_at_most_4_mib() {
    let mut text = String::from("# ");
    text.push_str(&"x".repeat(MAX_POLICY_BYTES - 2));
    assert!(read(&text).is_ok());
    text.push('x');
    assert_eq!(
        read(&text).expect_err("too large"),
        PolicyError::TooLarge {
            bytes: MAX_POLICY_BYTES + 1
        }
    );
}

#[test]
fn at_most_100_000_rules() {
    // The count is checked before any rule, so empty tables are enough.
    let text = "[[state_store]]\n".repeat(60_000) + &"[[devicebound]]\n".repeat(40_001);
    assert_eq!(
        message(&text),
        "policy: has 100001 rules (state_store and devicebound), more than 100000"
    );
    let text = "[[state_store]]\n".repeat(MAX_RULES);
    assert!(message(&text).starts_with("state_store[0] (line 1): needs principals"));
}

#[test]
fn at_most_10_000_groups() {
    let groups = |count: usize| {
        let mut text = String::from("[groups]\n");
        for group in 0..count {
            text.push_str(&format!("g{group} = []\n"));
        }
        text
    };
    assert!(read(&groups(MAX_GROUPS)).is_ok());
    assert_eq!(
        message(&groups(MAX_GROUPS + 1)),
        "groups: has 10001 groups, more than 10000"
    );
}

#[test]
fn at_most_10_000_entries_per_list() {
    let list = |count: usize| vec!["\"k\""; count].join(",");
    assert!(read(&rule(&format!("keys = [{}]", list(MAX_ENTRIES)))).is_ok());
    let fields = [
        ("keys", rule(&format!("keys = [{}]", list(MAX_ENTRIES + 1)))),
        (
            "principals",
            format!(
                "[[devicebound]]\nprincipals=[{}]\ndevices=[\"d\"]\nactions=[\"send\"]",
                list(MAX_ENTRIES + 1)
            ),
        ),
        (
            "devices",
            format!(
                "[[devicebound]]\nprincipals=[\"p\"]\ndevices=[{}]\nactions=[\"send\"]",
                list(MAX_ENTRIES + 1)
            ),
        ),
        (
            "actions",
            format!(
                "[[devicebound]]\nprincipals=[\"p\"]\ndevices=[\"d\"]\nactions=[{}]",
                vec!["\"send\""; MAX_ENTRIES + 1].join(",")
            ),
        ),
    ];
    for (field, text) in fields {
        assert_eq!(
            message(&text),
            format!("{}.{field} (line 1): has 10001 entries, more than 10000", {
                if field == "keys" {
                    "state_store[0]"
                } else {
                    "devicebound[0]"
                }
            }),
        );
    }
    let text = format!("[groups]\ng = [{}]", list(MAX_ENTRIES + 1));
    assert_eq!(
        message(&text),
        "groups.\"g\" (line 2): has 10001 entries, more than 10000"
    );
}

#[test]
fn keys_principals_and_devices_are_at_most_65_535_bytes() {
    let longest = "k".repeat(MAX_ITEM_BYTES);
    let too_long = "k".repeat(MAX_ITEM_BYTES + 1);
    assert!(read(&rule(&format!("keys = [\"{longest}\"]"))).is_ok());
    assert_eq!(
        message(&rule(&format!("keys = [\"{too_long}\"]"))),
        "state_store[0].keys[0] (line 1): is 65536 bytes, more than 65535"
    );
    // Binary keys count decoded bytes: 65,535 bytes are 131,070 hex digits.
    let hex_key = |bytes: usize| {
        rule(&format!(
            "key_type = \"binary\"\nencoding = \"hex\"\nkeys = [\"{}\"]",
            "ab".repeat(bytes)
        ))
    };
    assert!(read(&hex_key(MAX_ITEM_BYTES)).is_ok());
    assert!(message(&hex_key(MAX_ITEM_BYTES + 1)).ends_with("is 65536 bytes, more than 65535"));
    let text = format!(
        "[[devicebound]]\nprincipals=[\"{too_long}\"]\ndevices=[\"{too_long}\"]\nactions=[\"send\"]"
    );
    assert_eq!(
        message(&text),
        "devicebound[0].principals[0] (line 1): is 65536 bytes, more than 65535"
    );
    let text = format!("[groups]\n\"{too_long}\" = []");
    assert!(message(&text).ends_with(": is 65536 bytes, more than 65535"));
}

#[test]
fn globs_obey_the_scan_caps() {
    let elements = "?".repeat(MAX_PATTERN_ELEMENTS + 1);
    assert_eq!(
        message(&rule(&format!("keys = [\"{elements}\"]"))),
        format!(
            "state_store[0].keys[0] (line 1): invalid glob \"{}\"…: more than 1024 elements \
             (a run of `*` counts as one)",
            "?".repeat(100)
        )
    );
    // Long but exact: not a glob, no element cap.
    assert!(read(&rule(&format!("keys = [\"{}\"]", "k".repeat(5000)))).is_ok());
    let class = format!("[{}]", "a".repeat(MAX_CLASS_RANGES + 1));
    assert!(
        message(&rule(&format!("keys = [\"{class}\"]")))
            .ends_with("a bracket expression lists more than 256 members")
    );
    let classes = "[abcdefgh]".repeat(MAX_PATTERN_RANGES / 8 + 1);
    let text =
        format!("[[devicebound]]\nprincipals=[\"{classes}\"]\ndevices=[\"d\"]\nactions=[\"send\"]");
    assert!(message(&text).ends_with("the bracket expressions list more than 4096 members in all"));
}

#[test]
fn deep_nesting_is_refused_without_overflowing_the_stack() {
    for open in ["[", "{a="] {
        let text = format!("x = {}", open.repeat(200_000));
        assert!(
            matches!(read(&text), Err(PolicyError::Toml { .. })),
            "{open}"
        );
    }
    for prefix in ["", "groups.", "[[state_store]]\n", "[[devicebound]]\nx."] {
        let text = format!("{prefix}{}=1", "a.".repeat(200_000));
        assert!(read(&text).is_err(), "{prefix}");
    }
}
