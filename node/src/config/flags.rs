//! The `statestore run` flags generated from the settings table: one clap argument per row
//! with a [`Flag::Value`] or [`Flag::Switch`], and the values given, laid onto the TOML tree
//! by path (so a flag overrides the file's setting of the same path with no code per field).
//! Hand-written flags (`--peer`, `--reply-topic-prefix`, the TLS file sets) live in `cli.rs`.

use std::net::SocketAddr;

use clap::builder::{PossibleValuesParser, ValueParser};
use clap::{Arg, ArgAction, ArgMatches, Args, Command, FromArgMatches};

use super::setting::{self, Flag, Kind, Setting};
use super::table::SETTINGS;
use crate::error::NodeError;

/// The row-backed flags given on the command line, as (TOML path, value).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SettingFlags {
    given: Vec<(&'static str, toml::Value)>,
}

impl SettingFlags {
    /// Lays the given values onto `tree` (a flag wins over the file).
    pub fn apply(&self, tree: &mut toml::Table) -> Result<(), NodeError> {
        for (path, value) in &self.given {
            setting::place(tree, path, value.clone())?;
        }
        Ok(())
    }
}

/// The parser of a row's value: typed, so that a malformed value is refused by clap as before.
fn parser(kind: Kind) -> ValueParser {
    match kind {
        Kind::Int { .. } => clap::value_parser!(u64)
            .range(..=i64::MAX.unsigned_abs())
            .into(),
        Kind::Float { .. } => clap::value_parser!(f64).into(),
        Kind::Choice(choices) => PossibleValuesParser::new(choices.iter().copied()).into(),
        Kind::Address => clap::value_parser!(SocketAddr).into(),
        Kind::Text | Kind::Path | Kind::Bool | Kind::List | Kind::Table => {
            clap::value_parser!(String)
        }
    }
}

fn argument(row: &Setting) -> Option<Arg> {
    let help = format!("{} [{}]", row.summary(), row.path);
    match row.flag {
        Flag::Value { long, value_name } => Some(
            Arg::new(row.path)
                .long(long)
                .value_name(value_name)
                .help(help)
                .action(ArgAction::Set)
                .value_parser(parser(row.kind)),
        ),
        Flag::Switch(long) => Some(
            Arg::new(row.path)
                .long(long)
                .help(help)
                .action(ArgAction::SetTrue),
        ),
        Flag::None | Flag::HandWritten(_) => None,
    }
}

/// The value a flag gave, as the TOML value of its row.
fn given(row: &Setting, matches: &ArgMatches) -> Option<toml::Value> {
    let id = row.path;
    match (row.flag, row.kind) {
        (Flag::Switch(_), _) => matches.get_flag(id).then_some(toml::Value::Boolean(true)),
        (Flag::Value { .. }, Kind::Int { .. }) => matches
            .get_one::<u64>(id)
            .map(|value| toml::Value::Integer(i64::try_from(*value).unwrap_or(i64::MAX))),
        (Flag::Value { .. }, Kind::Float { .. }) => {
            matches.get_one::<f64>(id).map(|v| toml::Value::Float(*v))
        }
        (Flag::Value { .. }, Kind::Address) => matches
            .get_one::<SocketAddr>(id)
            .map(|addr| toml::Value::String(addr.to_string())),
        (Flag::Value { .. }, _) => matches
            .get_one::<String>(id)
            .map(|text| toml::Value::String(text.clone())),
        (Flag::None | Flag::HandWritten(_), _) => None,
    }
}

impl FromArgMatches for SettingFlags {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let mut flags = SettingFlags::default();
        flags.update_from_arg_matches(matches)?;
        Ok(flags)
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        for row in SETTINGS {
            if let Some(value) = given(row, matches) {
                self.given.retain(|(path, _)| *path != row.path);
                self.given.push((row.path, value));
            }
        }
        Ok(())
    }
}

impl Args for SettingFlags {
    fn augment_args(command: Command) -> Command {
        SETTINGS
            .iter()
            .filter_map(argument)
            .fold(command, Command::arg)
    }

    fn augment_args_for_update(command: Command) -> Command {
        Self::augment_args(command)
    }
}

#[cfg(test)]
mod tests;
