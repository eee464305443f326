//! The log layer's output as a file receives it: plain text without colour escapes, or one
//! JSON object per line carrying the span it was written in.

use super::log_layer;
use crate::config::LogFormat;
use std::io::{Read, Seek};
use tracing::level_filters::LevelFilter;
use tracing_subscriber::layer::SubscriberExt;

/// What the log layer in `format` writes into a regular file (not a terminal) for one event
/// inside a `request` span.
fn logged_to_a_file(format: LogFormat) -> String {
    let mut file = tempfile::tempfile().expect("a temporary file");
    let stream = file.try_clone().expect("a second handle");
    let subscriber =
        tracing_subscriber::registry().with(log_layer(format, stream, LevelFilter::INFO));
    tracing::subscriber::with_default(subscriber, || {
        let span = tracing::info_span!("request", command = "SET", service = "statestore");
        let _entered = span.enter();
        tracing::info!(key = "greeting", "handled");
    });
    let mut written = String::new();
    file.rewind().expect("rewind");
    file.read_to_string(&mut written).expect("read back");
    written
}

/// Until 2026-11-27 text logs were coloured whatever stderr was: a log file had escapes on
/// every line.
#[test]
fn text_written_to_a_file_has_no_colour_escapes() {
    let written = logged_to_a_file(LogFormat::Text);
    assert!(
        written.contains("handled") && written.contains("greeting"),
        "the event is written: {written:?}"
    );
    assert!(
        !written.contains('\x1b'),
        "no ANSI escapes in a file: {written:?}"
    );
}

#[test]
fn json_is_one_object_per_line_with_the_span_and_its_fields() {
    let written = logged_to_a_file(LogFormat::Json);
    let lines: Vec<&str> = written.lines().collect();
    assert_eq!(lines.len(), 1, "one line for one event: {written:?}");
    let event: serde_json::Value = serde_json::from_str(lines[0]).expect("a JSON object");
    assert_eq!(event["level"], "INFO");
    assert!(event["timestamp"].is_string(), "a timestamp: {event}");
    assert!(event["target"].is_string(), "a target: {event}");
    assert_eq!(event["fields"]["message"], "handled");
    assert_eq!(event["fields"]["key"], "greeting");
    let span = serde_json::json!({"name": "request", "command": "SET", "service": "statestore"});
    assert_eq!(event["span"], span, "the current span with its fields");
    assert_eq!(event["spans"], serde_json::json!([span]), "the span list");
    assert!(!written.contains('\x1b'), "no ANSI escapes: {written:?}");
}
