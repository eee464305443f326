//! The log output's throttle: a repeated WARN/ERROR line is written once per window and
//! counted; distinct lines (one per peer) and INFO lines are not held back.

use std::io::Write;
use std::sync::{Arc, Mutex};

use statestore_node::telemetry::{
    SUMMARY_INTERVAL, SuppressedLogLines, ThrottledWarnings, log_throttle,
};
use tracing_subscriber::Layer;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn lines(&self) -> Vec<String> {
        let bytes = self.0.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes)
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn count(&self, needle: &str) -> usize {
        self.lines().iter().filter(|l| l.contains(needle)).count()
    }
}

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut bytes) = self.0.lock() {
            bytes.extend_from_slice(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Captured {
    type Writer = Captured;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

fn subscriber(out: &Captured, summaries: bool) -> impl tracing::Subscriber + Send + Sync {
    subscriber_counted(out, summaries).0
}

/// The subscriber, and the `statestore_log_lines_suppressed_total` collector of its throttle.
fn subscriber_counted(
    out: &Captured,
    summaries: bool,
) -> (impl tracing::Subscriber + Send + Sync, SuppressedLogLines) {
    let throttle = log_throttle(summaries).expect("throttle builds");
    let counted =
        SuppressedLogLines::new(Some(throttle.metrics().clone())).expect("collector builds");
    let subscriber = tracing_subscriber::registry().with(
        tracing_subscriber::fmt::layer()
            .with_writer(out.clone())
            .with_ansi(false)
            .with_filter(ThrottledWarnings::new(throttle)),
    );
    (subscriber, counted)
}

/// The value `collector` exports.
fn exported(collector: &SuppressedLogLines) -> f64 {
    use prometheus::core::Collector;
    let families = collector.collect();
    assert_eq!(families[0].name(), "statestore_log_lines_suppressed_total");
    families[0].get_metric()[0].get_counter().get_value()
}

#[test]
fn repeated_warnings_are_written_once_per_peer_and_info_is_untouched() {
    let out = Captured::default();
    let (subscriber, suppressed) = subscriber_counted(&out, false);
    assert_eq!(exported(&suppressed), 0.0);
    tracing::subscriber::with_default(subscriber, || {
        for _ in 0..200 {
            tracing::warn!(
                "update progress error: Unreachable node: connect 127.0.0.1:7001: refused"
            );
            tracing::warn!(
                "update progress error: Unreachable node: connect 127.0.0.1:7002: refused"
            );
            tracing::error!(peer = 3, "replication failed");
            tracing::info!("applied a batch");
        }
        tracing::error!(peer = 4, "replication failed");
    });
    assert_eq!(out.count("127.0.0.1:7001"), 1, "{:#?}", out.lines());
    assert_eq!(
        out.count("127.0.0.1:7002"),
        1,
        "the other peer's first line is shown"
    );
    assert_eq!(out.count("peer=3"), 1);
    assert_eq!(
        out.count("peer=4"),
        1,
        "a line differing in a field is its own line"
    );
    assert_eq!(out.count("applied a batch"), 200, "INFO is never throttled");
    assert_eq!(
        exported(&suppressed),
        3.0 * 199.0,
        "every held-back repeat is counted (INFO and first lines are not)"
    );
}

#[test]
fn held_back_lines_are_counted_in_a_summary() {
    let out = Captured::default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let _guard = tracing::subscriber::set_default(subscriber(&out, true));
        for _ in 0..50 {
            tracing::warn!("connect 127.0.0.1:7003: Connection refused");
        }
        // The summary task runs on this (paused, auto-advancing) clock.
        let deadline = tokio::time::Instant::now() + SUMMARY_INTERVAL * 3;
        while out.count("Suppressed") == 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    });
    let summaries: Vec<String> = out
        .lines()
        .into_iter()
        .filter(|l| l.contains("Suppressed"))
        .collect();
    assert_eq!(summaries.len(), 1, "{:#?}", out.lines());
    assert!(
        summaries[0].contains("Suppressed 49 times"),
        "{}",
        summaries[0]
    );
    assert!(summaries[0].contains("127.0.0.1:7003"), "{}", summaries[0]);
    assert_eq!(
        out.count("connect 127.0.0.1:7003"),
        2,
        "the first line and the summary"
    );
}
