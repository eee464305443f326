use super::*;

fn value(rendered: &str, series: &str) -> Option<f64> {
    rendered
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn every_series_exists_at_start_and_counters_add_up() {
    let registry = Registry::new();
    let metrics = DeviceboundMetrics::register(&registry).expect("registers");
    let render = || {
        let mut out = String::new();
        prometheus::TextEncoder::new()
            .encode_utf8(&registry.gather(), &mut out)
            .expect("encodes");
        out
    };
    let out = render();
    for transition in TRANSITIONS {
        let series =
            format!("statestore_devicebound_messages_total{{transition=\"{transition}\"}}");
        assert_eq!(value(&out, &series), Some(0.0), "{series}");
    }
    for event in BATCH_EVENTS {
        let series = format!("statestore_devicebound_feedback_batches_total{{event=\"{event}\"}}");
        assert_eq!(value(&out, &series), Some(0.0), "{series}");
    }
    for verb in DeviceVerb::ALL {
        for error in ErrorReply::of(ErrorService::Devicebound) {
            let series = format!(
                "statestore_devicebound_requests_total{{command=\"{}\",result=\"{}\"}}",
                verb.label(),
                error.result_label()
            );
            assert_eq!(value(&out, &series), Some(0.0), "{series}");
        }
    }
    metrics.record(&DeviceCounters {
        enqueued: 3,
        completed: 1,
        dead_lettered: 2,
        lock_expiries: 4,
        feedback_batches_delivered: 5,
        feedback_batches_redelivered: 1,
        ..DeviceCounters::default()
    });
    metrics.record(&DeviceCounters {
        enqueued: 1,
        ..DeviceCounters::default()
    });
    let out = render();
    for (series, expected) in [
        (
            r#"statestore_devicebound_messages_total{transition="enqueued"}"#,
            4.0,
        ),
        (
            r#"statestore_devicebound_messages_total{transition="completed"}"#,
            1.0,
        ),
        (
            r#"statestore_devicebound_messages_total{transition="dead_lettered"}"#,
            2.0,
        ),
        (
            r#"statestore_devicebound_messages_total{transition="purged"}"#,
            0.0,
        ),
        ("statestore_devicebound_lock_expiries_total", 4.0),
        (
            r#"statestore_devicebound_feedback_batches_total{event="published"}"#,
            5.0,
        ),
        (
            r#"statestore_devicebound_feedback_batches_total{event="redelivered"}"#,
            1.0,
        ),
    ] {
        assert_eq!(value(&out, series), Some(expected), "{series}");
    }
}
