//! Paths in a TOML tree, merging a file over the defaults, and the range messages.

use super::*;

fn row(kind: Kind) -> Setting {
    Setting {
        path: "a.b",
        flag: Flag::None,
        default: DefaultValue::Unset("none"),
        kind,
        table: DocTable::Node,
        help: "first clause; more. Even more",
    }
}

#[test]
fn values_are_placed_and_found_by_dotted_path() {
    let mut tree = toml::Table::new();
    place(&mut tree, "top", toml::Value::Integer(1)).expect("placed");
    place(&mut tree, "a.b.c", toml::Value::Integer(2)).expect("placed");
    assert_eq!(lookup(&tree, "top"), Some(&toml::Value::Integer(1)));
    assert_eq!(lookup(&tree, "a.b.c"), Some(&toml::Value::Integer(2)));
    assert_eq!(lookup(&tree, "a.x"), None);
    assert!(place(&mut tree, "top.d", toml::Value::Integer(3)).is_err());
}

#[test]
fn a_file_merges_over_the_defaults_table_by_table() {
    let mut base: toml::Table = toml::from_str("x = 1\n[s]\na = 1\nb = 2\n").expect("toml");
    let over: toml::Table = toml::from_str("[s]\nb = 3\n[t]\nc = 4\n").expect("toml");
    merge(&mut base, over);
    let expected: toml::Table =
        toml::from_str("x = 1\n[s]\na = 1\nb = 3\n[t]\nc = 4\n").expect("toml");
    assert_eq!(base, expected);
}

#[test]
fn ranges_are_refused_naming_the_setting() {
    let message = |kind, value| {
        row(kind)
            .check(&value)
            .map_err(|e| e.to_string())
            .err()
            .unwrap_or_default()
    };
    assert_eq!(
        message(Kind::between(1, 5), toml::Value::Integer(6)),
        "configuration: a.b must be between 1 and 5 (got 6)"
    );
    assert_eq!(
        message(Kind::at_least(1), toml::Value::Integer(0)),
        "configuration: a.b must be at least 1 (got 0)"
    );
    assert_eq!(
        message(Kind::Float { min: 0.0, max: 1.0 }, toml::Value::Float(1.5)),
        "configuration: a.b must be between 0 and 1 (got 1.5)"
    );
    assert_eq!(
        message(Kind::Choice(&["x", "y"]), toml::Value::String("z".into())),
        "configuration: a.b must be one of x, y (got \"z\")"
    );
    assert_eq!(message(Kind::between(1, 5), toml::Value::Integer(5)), "");
    assert_eq!(row(Kind::Text).summary(), "First clause");
}
