//! The settings table itself: defaults within their ranges, paths and flags unique, every
//! row a real setting of `Config`, help texts that fit a Markdown table cell.

use std::collections::BTreeSet;

use clap::CommandFactory;

use super::*;
use crate::cli::Cli;
use crate::config::Config;
use crate::config::setting::{self, check_ranges, defaults};

#[test]
fn every_default_is_within_its_own_range() {
    for row in SETTINGS {
        if let Some(value) = row.default.to_toml() {
            row.check(&value)
                .unwrap_or_else(|e| panic!("{}: default {value}: {e}", row.path));
        }
    }
    let tree = defaults(SETTINGS).expect("no clashing paths");
    check_ranges(SETTINGS, &tree).expect("defaults in range");
    Config::default().validate().expect("the defaults validate");
}

#[test]
fn paths_and_flags_are_unique_and_clap_accepts_them() {
    let mut paths = BTreeSet::new();
    let mut flags = BTreeSet::new();
    for row in SETTINGS {
        assert!(paths.insert(row.path), "{} twice", row.path);
        let flag = match row.flag {
            Flag::Value { long, .. } | Flag::Switch(long) => Some(long),
            Flag::HandWritten(text) => Some(text),
            Flag::None => None,
        };
        if let Some(flag) = flag {
            assert!(flags.insert(flag), "flag {flag} twice");
        }
    }
    // Duplicates between generated and hand-written flags, or bad ids, panic here.
    Cli::command().debug_assert();
}

/// A value of the row's kind other than its default, to prove the path is a real field.
fn sample(row: &Setting) -> Option<toml::Value> {
    Some(match row.kind {
        Kind::Int { min, .. } => toml::Value::Integer(min),
        Kind::Float { max, .. } => toml::Value::Float(max),
        Kind::Choice(choices) => toml::Value::String(choices[choices.len() - 1].to_owned()),
        Kind::Text => toml::Value::String("x".to_owned()),
        Kind::Path => toml::Value::String("/x".to_owned()),
        Kind::Address => toml::Value::String("127.0.0.2:9".to_owned()),
        Kind::Bool => toml::Value::Boolean(true),
        Kind::List => toml::Value::Array(vec![toml::Value::String("x/".to_owned())]),
        Kind::Table => return None,
    })
}

#[test]
fn every_row_is_a_field_of_config_and_reaches_it() {
    for row in SETTINGS {
        let Some(value) = sample(row) else { continue };
        let mut tree = Config::defaults_tree();
        setting::place(&mut tree, row.path, value.clone()).expect("placed");
        let config = Config::from_tree(tree).unwrap_or_else(|e| panic!("{}: {e}", row.path));
        let back = toml::Table::try_from(&config).expect("serialises");
        assert_eq!(
            setting::lookup(&back, row.path),
            Some(&value),
            "{} reaches its field",
            row.path
        );
    }
}

#[test]
fn every_field_of_config_has_a_row() {
    fn leaves(prefix: &str, table: &toml::Table, out: &mut Vec<String>) {
        for (key, value) in table {
            let path = if prefix.is_empty() {
                key.clone()
            } else {
                format!("{prefix}.{key}")
            };
            match value {
                toml::Value::Table(inner) => leaves(&path, inner, out),
                _ => out.push(path),
            }
        }
    }
    let mut found = Vec::new();
    let config = toml::Table::try_from(Config::default()).expect("serialises");
    leaves("", &config, &mut found);
    for path in found {
        assert!(
            SETTINGS.iter().any(|row| row.path == path),
            "{path} has no row in the settings table"
        );
    }
}

#[test]
fn help_texts_fit_a_table_cell_and_summaries_read_alone() {
    for row in SETTINGS {
        assert!(
            !row.help.contains('|') && !row.help.contains('\n'),
            "{}: no | or line break in a Markdown cell",
            row.path
        );
        let summary = row.summary();
        assert!(
            !summary.is_empty() && !summary.starts_with('.') && !summary.ends_with(['(', ',']),
            "{}: summary {summary:?}",
            row.path
        );
    }
}

#[test]
fn a_wrong_type_in_a_file_is_refused_naming_the_setting() {
    let error = Config::from_toml_str("[limits]\nmax_keys = \"many\"\n")
        .expect_err("a string is no count")
        .to_string();
    assert!(error.contains("max_keys"), "{error}");
    let error = Config::from_toml_str("[limits]\nmax_registrations_per_client = 5000000000\n")
        .and_then(|config| config.validate())
        .expect_err("above u32")
        .to_string();
    assert!(error.contains("max_registrations_per_client"), "{error}");
}
