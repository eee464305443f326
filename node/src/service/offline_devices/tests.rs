use super::*;

#[tokio::test(start_paused = true)]
async fn backoff_starts_at_one_second_doubles_to_thirty_and_resets_on_activity() {
    let mut backoffs = Backoffs::new(2);
    let t0 = Instant::now();
    assert!(backoffs.offline("d", t0));
    assert!(backoffs.blocked("d", t0 + Duration::from_millis(999)));
    assert!(!backoffs.blocked("d", t0 + Duration::from_secs(1)));
    let mut expected = 1;
    for _ in 0..8 {
        assert!(backoffs.offline("d", t0));
        expected = (expected * 2).min(30);
        assert_eq!(
            backoffs.until("d"),
            Some(t0 + Duration::from_secs(expected))
        );
    }
    assert_eq!(expected, 30, "capped at 30 s");
    assert!(backoffs.reset("d"));
    assert!(!backoffs.blocked("d", t0));
    assert!(!backoffs.reset("d"));
}

#[tokio::test(start_paused = true)]
async fn the_backoff_map_is_bounded() {
    let mut backoffs = Backoffs::new(2);
    let t0 = Instant::now();
    assert!(backoffs.offline("a", t0));
    assert!(backoffs.offline("b", t0));
    assert!(!backoffs.offline("c", t0), "full: not tracked");
    assert_eq!(backoffs.len(), 2);
    // Long-expired entries make room.
    let later = t0 + Duration::from_secs(120);
    assert!(backoffs.offline("c", later));
    assert!(backoffs.len() <= 2);
}
