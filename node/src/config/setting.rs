//! What one row of the settings table says ([`Setting`]) and what the rows do to a TOML
//! tree: the defaults document, finding and placing a value by its dotted path, and the range
//! check. It knows nothing of the [`super::Config`] structs or of the command line.

use crate::error::NodeError;

/// One setting: where it lives in the TOML file, its flag, default, allowed values and help.
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    /// Dotted TOML path, e.g. `cluster.heartbeat_ms`.
    pub path: &'static str,
    /// The `statestore run` flag that overrides it.
    pub flag: Flag,
    /// The value when neither the file nor a flag gives one.
    pub default: DefaultValue,
    /// The values it takes.
    pub kind: Kind,
    /// The README table that documents it.
    pub table: DocTable,
    /// What it means (the README's "meaning" column). Its first clause, up to the first
    /// `"; "` or `". "`, is the summary used as flag help and schema description.
    pub help: &'static str,
}

/// How a setting is given on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flag {
    /// Only in the file.
    None,
    /// `--long VALUE`, generated from the row.
    Value {
        /// The flag without its dashes.
        long: &'static str,
        /// The placeholder in `--help`.
        value_name: &'static str,
    },
    /// `--long` without a value: turns a boolean on (it cannot turn the file's `true` off).
    Switch(&'static str),
    /// Parsed by hand in `cli.rs` (repeated flags, flags that go in sets); the text is what
    /// the README shows.
    HandWritten(&'static str),
}

/// The values a setting takes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// A whole number from `min` to `max` (`i64::MAX`: no upper bound beyond the field's).
    Int {
        /// Smallest accepted value.
        min: i64,
        /// Largest accepted value.
        max: i64,
    },
    /// A number from `min` to `max`.
    Float {
        /// Smallest accepted value.
        min: f64,
        /// Largest accepted value.
        max: f64,
    },
    /// One of these words.
    Choice(&'static [&'static str]),
    /// Free text.
    Text,
    /// A file or directory path.
    Path,
    /// An `ADDR:PORT` socket address.
    Address,
    /// `true` or `false`.
    Bool,
    /// A list of strings, checked by hand.
    List,
    /// A TOML table of entries, parsed and checked by hand.
    Table,
}

impl Kind {
    /// A whole number of at least `min`.
    pub const fn at_least(min: i64) -> Kind {
        Kind::Int { min, max: i64::MAX }
    }

    /// A whole number from `min` to `max`.
    pub const fn between(min: i64, max: i64) -> Kind {
        Kind::Int { min, max }
    }

    /// A single value a flag can give (not a list or a table).
    pub fn is_scalar(self) -> bool {
        !matches!(self, Kind::List | Kind::Table)
    }
}

/// A setting's default.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DefaultValue {
    /// A whole number.
    Int(i64),
    /// A number.
    Float(f64),
    /// Text (also paths, addresses and choices).
    Text(&'static str),
    /// A boolean.
    Bool(bool),
    /// A list of strings.
    Texts(&'static [&'static str]),
    /// Absent; the text says what that means (shown in the README's default column).
    Unset(&'static str),
}

impl DefaultValue {
    /// The TOML value, or `None` when the setting is absent by default.
    pub fn to_toml(self) -> Option<toml::Value> {
        Some(match self {
            DefaultValue::Int(value) => toml::Value::Integer(value),
            DefaultValue::Float(value) => toml::Value::Float(value),
            DefaultValue::Text(text) => toml::Value::String(text.to_owned()),
            DefaultValue::Bool(value) => toml::Value::Boolean(value),
            DefaultValue::Texts(texts) => toml::Value::Array(
                texts
                    .iter()
                    .map(|text| toml::Value::String((*text).to_owned()))
                    .collect(),
            ),
            DefaultValue::Unset(_) => return None,
        })
    }
}

/// The README table a setting is documented in (between `<!-- settings:begin NAME -->` and
/// `<!-- settings:end -->`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DocTable {
    /// "Configuration".
    Node,
    /// "TLS to the broker".
    MqttTls,
    /// The device-bound queues.
    Devicebound,
    /// "Security".
    Security,
}

impl DocTable {
    /// Every table, in README order.
    pub const ALL: [DocTable; 4] = [
        DocTable::Node,
        DocTable::MqttTls,
        DocTable::Devicebound,
        DocTable::Security,
    ];

    /// The name in the README's markers.
    pub fn name(self) -> &'static str {
        match self {
            DocTable::Node => "node",
            DocTable::MqttTls => "mqtt.tls",
            DocTable::Devicebound => "devicebound",
            DocTable::Security => "security",
        }
    }
}

impl Setting {
    /// The first clause of the help, without Markdown backticks and capitalised.
    pub fn summary(&self) -> String {
        let end = [self.help.find("; "), self.help.find(". ")]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(self.help.len());
        let plain = self.help[..end].replace('`', "");
        let mut chars = plain.chars();
        match chars.next() {
            Some(first) => first.to_uppercase().chain(chars).collect(),
            None => String::new(),
        }
    }

    /// Refuses a value outside the row's range, naming the setting. A value of another type
    /// is left to deserialisation, which refuses it.
    pub fn check(&self, value: &toml::Value) -> Result<(), NodeError> {
        let path = self.path;
        match (self.kind, value) {
            (Kind::Int { min, max }, toml::Value::Integer(got)) if !(min..=max).contains(got) => {
                Err(NodeError::Config(if max == i64::MAX {
                    format!("{path} must be at least {min} (got {got})")
                } else {
                    format!("{path} must be between {min} and {max} (got {got})")
                }))
            }
            (Kind::Float { min, max }, toml::Value::Float(got)) if !(min..=max).contains(got) => {
                Err(NodeError::Config(format!(
                    "{path} must be between {min} and {max} (got {got})"
                )))
            }
            (Kind::Float { min, max }, toml::Value::Integer(got))
                if !(min..=max).contains(&(*got as f64)) =>
            {
                Err(NodeError::Config(format!(
                    "{path} must be between {min} and {max} (got {got})"
                )))
            }
            (Kind::Choice(choices), toml::Value::String(got))
                if !choices.contains(&got.as_str()) =>
            {
                Err(NodeError::Config(format!(
                    "{path} must be one of {} (got {got:?})",
                    choices.join(", ")
                )))
            }
            _ => Ok(()),
        }
    }
}

/// The value at a dotted path of a TOML tree, if there is one.
pub fn lookup<'t>(tree: &'t toml::Table, path: &str) -> Option<&'t toml::Value> {
    let (tables, key) = split(path);
    let mut table = tree;
    for name in tables {
        table = table.get(name)?.as_table()?;
    }
    table.get(key)
}

/// Sets the value at a dotted path, creating the tables on the way; an error if a key on
/// the way holds something other than a table.
pub fn place(tree: &mut toml::Table, path: &str, value: toml::Value) -> Result<(), NodeError> {
    let (tables, key) = split(path);
    let mut table = tree;
    for name in tables {
        table = table
            .entry(name)
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .ok_or_else(|| NodeError::Config(format!("{name} must be a table (for {path})")))?;
    }
    table.insert(key.to_owned(), value);
    Ok(())
}

/// Lays `over` onto `base`: tables merge key by key, anything else replaces.
pub fn merge(base: &mut toml::Table, over: toml::Table) {
    for (key, value) in over {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(inner)), toml::Value::Table(over_inner)) => {
                merge(inner, over_inner);
            }
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// The document of every row's default.
pub fn defaults(rows: &[Setting]) -> Result<toml::Table, NodeError> {
    let mut tree = toml::Table::new();
    for row in rows {
        if let Some(value) = row.default.to_toml() {
            place(&mut tree, row.path, value)?;
        }
    }
    Ok(tree)
}

/// Refuses the first value of the tree outside its row's range.
pub fn check_ranges(rows: &[Setting], tree: &toml::Table) -> Result<(), NodeError> {
    for row in rows {
        if let Some(value) = lookup(tree, row.path) {
            row.check(value)?;
        }
    }
    Ok(())
}

fn split(path: &str) -> (std::str::Split<'_, char>, &str) {
    let (tables, key) = path.rsplit_once('.').unwrap_or(("", path));
    let mut names = tables.split('.');
    if tables.is_empty() {
        // An empty iterator: `"".split('.')` yields one empty name.
        names.next();
    }
    (names, key)
}

#[cfg(test)]
mod tests;
