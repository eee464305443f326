//! The README tables and the chart's schema as generated from the table.

use super::*;

fn with_markers(body: &str) -> String {
    DocTable::ALL
        .iter()
        .map(|table| format!("text\n{BEGIN}{} -->\n{body}{END}\nmore\n", table.name()))
        .collect()
}

#[test]
fn the_readme_tables_are_replaced_between_their_markers() {
    let readme = with_markers("| stale |\n");
    let rendered = render_readme(&readme).expect("rendered");
    assert!(!rendered.contains("stale"), "{rendered}");
    assert!(rendered.contains("| `--heartbeat-ms MS` | `cluster.heartbeat_ms` | `100` | ≥ 1 |"));
    assert!(rendered.contains(
        "| `--devicebound-max-devices N` | `devicebound.max_devices` | `1000000` | 1–10000000 |"
    ));
    assert!(
        rendered.contains(
            "| `--log-format FORMAT` | `telemetry.log_format` | `text` | `text`, `json` |"
        )
    );
    assert_eq!(
        render_readme(&rendered).expect("rendered"),
        rendered,
        "rendering is stable"
    );
}

#[test]
fn markers_must_be_known_closed_and_all_present() {
    let unknown = format!("{}{BEGIN}nonsense -->\n{END}\n", with_markers(""));
    assert!(render_readme(&unknown).is_err());
    let unclosed = format!("{BEGIN}node -->\n| x |\n");
    assert!(render_readme(&unclosed).is_err());
    let one = format!("{BEGIN}node -->\n{END}\n");
    let missing = render_readme(&one)
        .expect_err("three tables missing")
        .to_string();
    assert!(missing.contains("mqtt.tls"), "{missing}");
}

#[test]
fn the_chart_schema_covers_what_the_chart_does_not_write_itself() {
    let schema = chart_schema();
    let set = &schema["set"];
    assert_eq!(
        set["devicebound.max_devices"],
        json!({
            "type": "integer",
            "minimum": 1,
            "maximum": 10_000_000,
            "description": "Devices with state (a queued message or a dead letter), all together."
        })
    );
    assert_eq!(
        set["cluster.max_snapshot_mb"]["type"],
        json!(["integer", "null"])
    );
    assert_eq!(set["telemetry.trace_sample_ratio"]["maximum"], json!(1));
    assert!(
        set["shutdown_grace_ms"]["description"]
            .as_str()
            .is_some_and(|d| d.ends_with("terminationGracePeriodSeconds follows it."))
    );
    for owned in [
        "id",
        "listen.http",
        "mqtt.broker",
        "mqtt.tls.ca_file",
        "admin.token_file",
    ] {
        assert!(set.get(owned).is_none(), "{owned} is the chart's");
    }
    assert_eq!(schema["hand_written"], json!(["mqtt.reply_topic_prefixes"]));
}
