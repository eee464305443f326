//! Every generated flag reaches its setting, typed as the file would give it, and wins over
//! the file; a malformed value is clap's error as before.

use clap::Parser;

use super::*;
use crate::config::Config;

#[derive(Debug, Parser)]
struct Flags {
    #[command(flatten)]
    settings: SettingFlags,
}

/// A command-line value of the row's kind and the TOML value it must become.
fn sample(kind: Kind) -> Option<(&'static str, toml::Value)> {
    Some(match kind {
        Kind::Int { min, .. } if min > 0 => ("7000000", toml::Value::Integer(7_000_000)),
        Kind::Int { .. } => ("0", toml::Value::Integer(0)),
        Kind::Float { .. } => ("0.5", toml::Value::Float(0.5)),
        Kind::Choice(choices) => {
            let last = choices.last()?;
            (last, toml::Value::String((*last).into()))
        }
        Kind::Text | Kind::Path => ("/some/thing", toml::Value::String("/some/thing".into())),
        Kind::Address => ("[::1]:9", toml::Value::String("[::1]:9".into())),
        Kind::Bool | Kind::List | Kind::Table => return None,
    })
}

#[test]
fn every_flag_reaches_its_setting_over_the_file() {
    let file = "id = 3\n[limits]\nmax_keys = 5\n[cluster]\njoin = false\n";
    for row in SETTINGS {
        let (argv, expected) = match (row.flag, sample(row.kind)) {
            (Flag::Value { long, .. }, Some((text, value))) => (
                vec!["x".to_owned(), format!("--{long}"), text.to_owned()],
                value,
            ),
            (Flag::Switch(long), _) => (
                vec!["x".to_owned(), format!("--{long}")],
                toml::Value::Boolean(true),
            ),
            _ => continue,
        };
        let flags = Flags::try_parse_from(&argv)
            .unwrap_or_else(|e| panic!("{argv:?}: {e}"))
            .settings;
        let mut tree = Config::tree_from_str(file).expect("file");
        flags.apply(&mut tree).expect("applied");
        assert_eq!(
            setting::lookup(&tree, row.path),
            Some(&expected),
            "{argv:?}"
        );
        Config::from_tree(tree).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    }
}

#[test]
fn absent_flags_leave_the_file_alone_and_bad_values_are_clap_errors() {
    let flags = Flags::try_parse_from(["x"]).expect("no flags").settings;
    let mut tree = Config::tree_from_str("[limits]\nmax_keys = 5\n").expect("file");
    let before = tree.clone();
    flags.apply(&mut tree).expect("applied");
    assert_eq!(tree, before);
    for bad in [
        ["x", "--max-keys", "-1"],
        ["x", "--max-keys", "many"],
        ["x", "--http", "nowhere"],
        ["x", "--log-format", "xml"],
        ["x", "--trace-sample-ratio", "half"],
    ] {
        assert!(Flags::try_parse_from(bad).is_err(), "{bad:?}");
    }
}
