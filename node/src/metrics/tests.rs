use super::*;
use statestore_storage::keyspace::Limits;

fn sample(rendered: &str, name: &str) -> Option<String> {
    rendered.lines().find_map(|line| {
        line.strip_prefix(name)?
            .strip_prefix(' ')
            .map(str::to_owned)
    })
}

#[test]
fn keyspace_record_sets_the_cap_gauges_and_advances_the_eviction_counter() {
    let metrics = NodeMetrics::new().expect("registers");
    let mut meta = KeyspaceMeta {
        keys: 2,
        registrations: 3,
        remembered_replies: 4,
        remembered_reply_bytes: 5,
        replies_evicted: 6,
        observer_cap_refusals: 7,
        reply_mismatches: 7,
        ..KeyspaceMeta::default()
    };
    metrics.store.record_keyspace(&meta);
    let out = metrics.render();
    for (name, value) in [
        ("statestore_keyspace_keys", "2"),
        ("statestore_keyspace_registrations", "3"),
        ("statestore_reply_memory_entries", "4"),
        ("statestore_reply_memory_bytes", "5"),
        ("statestore_reply_memory_evicted_total", "6"),
        ("statestore_keyspace_observer_cap_refusals_total", "7"),
        ("statestore_reply_memory_mismatches_total", "7"),
    ] {
        assert_eq!(
            sample(&out, name).as_deref(),
            Some(value),
            "{name} in\n{out}"
        );
    }
    assert!(
        out.contains("# TYPE statestore_reply_memory_evicted_total counter"),
        "a counter"
    );
    meta.replies_evicted = 9;
    meta.reply_mismatches = 8;
    meta.remembered_replies = 1;
    metrics.store.record_keyspace(&meta);
    metrics.store.record_keyspace(&meta);
    let out = metrics.render();
    assert_eq!(
        sample(&out, "statestore_reply_memory_evicted_total").as_deref(),
        Some("9"),
        "advanced to the replicated total, once"
    );
    assert_eq!(
        sample(&out, "statestore_reply_memory_mismatches_total").as_deref(),
        Some("8")
    );
    assert_eq!(
        sample(&out, "statestore_reply_memory_entries").as_deref(),
        Some("1")
    );
}

#[test]
fn quota_used_ratio_is_the_fullest_of_keys_bytes_and_registrations() {
    let metrics = NodeMetrics::new().expect("registers");
    let limits = Limits {
        max_keys: 100,
        max_bytes: 1_000,
        max_registrations: 10,
        max_remembered_replies: 10,
        ..Limits::default()
    };
    // (keys, bytes, registrations, remembered replies) -> ratio
    for (keys, bytes, registrations, replies, expected) in [
        (50, 100, 1, 0, "0.5"),
        (10, 900, 1, 0, "0.9"),
        (10, 100, 8, 0, "0.8"),
        // A full reply memory evicts; it is not a quota that fails requests.
        (10, 100, 1, 10, "0.1"),
    ] {
        let meta = KeyspaceMeta {
            keys,
            bytes,
            registrations,
            remembered_replies: replies,
            limits,
            ..KeyspaceMeta::default()
        };
        metrics.store.record_keyspace(&meta);
        let out = metrics.render();
        assert_eq!(
            sample(&out, "statestore_keyspace_quota_used_ratio").as_deref(),
            Some(expected),
            "{meta:?}"
        );
    }
}

#[test]
fn a_gauge_set_past_its_range_shows_its_largest_value_not_a_negative_one() {
    let gauge = IntGauge::new("g", "g").expect("gauge");
    set_gauge(&gauge, 5_u64);
    assert_eq!(gauge.get(), 5);
    set_gauge(&gauge, u64::MAX);
    assert_eq!(gauge.get(), i64::MAX);
    set_gauge(&gauge, usize::MAX);
    assert_eq!(gauge.get(), i64::MAX);
}
