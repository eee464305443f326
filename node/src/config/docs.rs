//! Documentation generated from the settings table: the README's configuration tables
//! (between `<!-- settings:begin NAME -->` and `<!-- settings:end -->`) and the bounds of the
//! Helm chart's `config` values (`helm/statestore/values.schema.json`). `scripts/check-settings`
//! compares both with what is committed. Knows the chart only as far as which settings the chart
//! writes itself.

use serde_json::{Map, Value, json};

use super::setting::{DefaultValue, DocTable, Flag, Kind, Setting};
use super::table::SETTINGS;
use crate::error::NodeError;

const BEGIN: &str = "<!-- settings:begin ";
const END: &str = "<!-- settings:end -->";

/// Settings the chart writes into each node's file itself (and refuses in `config`): the path
/// itself or anything under it.
const CHART_WRITES: &[&str] = &[
    "id",
    "name",
    "data_dir",
    "listen",
    "cluster.advertise",
    "cluster.peers",
    "cluster.join",
    "cluster.tls",
    "mqtt.broker",
    "mqtt.client_id",
    "mqtt.username",
    "mqtt.password",
    "mqtt.password_file",
    "mqtt.tls",
    "admin",
];

/// What the chart adds to a setting's description.
const CHART_NOTES: &[(&str, &str)] = &[
    (
        "shutdown_grace_ms",
        "terminationGracePeriodSeconds follows it.",
    ),
    (
        "telemetry.otlp_endpoint",
        "Allow it in networkPolicy.extraEgress.",
    ),
    ("telemetry.log_format", "The chart's default: json."),
];

/// The README with every settings table regenerated; an error for an unknown or unclosed
/// marker, or a table without its marker.
pub fn render_readme(readme: &str) -> Result<String, NodeError> {
    let mut out = String::with_capacity(readme.len());
    let mut lines = readme.split_inclusive('\n');
    let mut seen = Vec::new();
    while let Some(line) = lines.next() {
        out.push_str(line);
        let Some(name) = line
            .trim_end()
            .strip_prefix(BEGIN)
            .and_then(|rest| rest.strip_suffix(" -->"))
        else {
            continue;
        };
        let table = DocTable::ALL
            .into_iter()
            .find(|table| table.name() == name)
            .ok_or_else(|| readme_error(format!("unknown settings table {name:?}")))?;
        out.push_str(&markdown_table(table));
        let end = lines
            .by_ref()
            .find(|line| line.trim_end() == END)
            .ok_or_else(|| readme_error(format!("settings table {name:?} has no {END}")))?;
        out.push_str(end);
        seen.push(table);
    }
    if let Some(missing) = DocTable::ALL.into_iter().find(|t| !seen.contains(t)) {
        return Err(readme_error(format!(
            "no {BEGIN}{} --> marker",
            missing.name()
        )));
    }
    Ok(out)
}

fn readme_error(message: String) -> NodeError {
    NodeError::Config(format!("README: {message}"))
}

/// One README table in Markdown, header included.
pub fn markdown_table(table: DocTable) -> String {
    let mut out =
        String::from("| flag | TOML | default | range | meaning |\n|---|---|---|---|---|\n");
    for row in SETTINGS.iter().filter(|row| row.table == table) {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            flag_cell(row),
            toml_cell(row),
            default_cell(row.default),
            range_cell(row.kind),
            row.help
        ));
    }
    out
}

fn flag_cell(row: &Setting) -> String {
    match row.flag {
        Flag::None => String::new(),
        Flag::Value { long, value_name } => format!("`--{long} {value_name}`"),
        Flag::Switch(long) => format!("`--{long}`"),
        Flag::HandWritten(text) => text.to_owned(),
    }
}

fn toml_cell(row: &Setting) -> String {
    match row.kind {
        Kind::Table => format!("`[{}]`", row.path),
        _ => format!("`{}`", row.path),
    }
}

fn default_cell(default: DefaultValue) -> String {
    match default {
        DefaultValue::Int(value) => format!("`{value}`"),
        DefaultValue::Float(value) => format!("`{value}`"),
        DefaultValue::Text(text) => format!("`{text}`"),
        DefaultValue::Bool(value) => format!("`{value}`"),
        DefaultValue::Texts(texts) => format!("`{}`", json!(texts)),
        DefaultValue::Unset(meaning) => meaning.to_owned(),
    }
}

fn range_cell(kind: Kind) -> String {
    match kind {
        Kind::Int {
            min: 0,
            max: i64::MAX,
        } => String::new(),
        Kind::Int { min, max: i64::MAX } => format!("≥ {min}"),
        Kind::Int { min, max } => format!("{min}–{max}"),
        Kind::Float { min, max } => format!("{min}–{max}"),
        Kind::Choice(choices) => choices
            .iter()
            .map(|choice| format!("`{choice}`"))
            .collect::<Vec<_>>()
            .join(", "),
        Kind::Text | Kind::Path | Kind::Address | Kind::Bool | Kind::List | Kind::Table => {
            String::new()
        }
    }
}

/// True if the chart writes this setting itself (it is not one of the `config` values).
pub fn chart_writes(path: &str) -> bool {
    CHART_WRITES.iter().any(|owned| {
        path == *owned
            || path
                .strip_prefix(owned)
                .is_some_and(|rest| rest.starts_with('.'))
    })
}

/// The schema of every scalar setting the chart's `config` value takes, by TOML path:
/// `{"set": {path: schema}, "hand_written": [path, ...]}`. `hand_written` lists the settings
/// whose schema is written by hand (lists and tables).
pub fn chart_schema() -> Value {
    let mut set = Map::new();
    let mut hand_written = Vec::new();
    for row in SETTINGS.iter().filter(|row| !chart_writes(row.path)) {
        match property(row) {
            Some(schema) => {
                set.insert(row.path.to_owned(), schema);
            }
            None => hand_written.push(row.path),
        }
    }
    json!({ "set": set, "hand_written": hand_written })
}

/// A setting's JSON schema; `None` for lists and tables.
fn property(row: &Setting) -> Option<Value> {
    let mut schema = Map::new();
    let name = match row.kind {
        Kind::Int { min, max } => {
            schema.insert("minimum".into(), json!(min));
            if max != i64::MAX {
                schema.insert("maximum".into(), json!(max));
            }
            "integer"
        }
        Kind::Float { min, max } => {
            schema.insert("minimum".into(), number(min));
            schema.insert("maximum".into(), number(max));
            "number"
        }
        Kind::Choice(choices) => {
            schema.insert("enum".into(), json!(choices));
            "string"
        }
        Kind::Text | Kind::Path | Kind::Address => "string",
        Kind::Bool => "boolean",
        Kind::List | Kind::Table => return None,
    };
    let kind = match row.default {
        DefaultValue::Unset(_) => json!([name, "null"]),
        _ => json!(name),
    };
    schema.insert("type".into(), kind);
    let mut description = format!("{}.", row.summary());
    if let Some((_, note)) = CHART_NOTES.iter().find(|(path, _)| *path == row.path) {
        description.push(' ');
        description.push_str(note);
    }
    schema.insert("description".into(), json!(description));
    Some(Value::Object(schema))
}

/// A bound as JSON: whole numbers without a fraction (`1`, not `1.0`).
fn number(value: f64) -> Value {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        json!(value as i64)
    } else {
        json!(value)
    }
}

#[cfg(test)]
mod tests;
