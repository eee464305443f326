use super::*;

const LIMITS: PaceLimits = PaceLimits {
    bytes_per_sec: 1_000_000,
    messages_per_sec: 1_000,
};

/// Counts the messages of `bytes` that leave in `window` when sent as soon as allowed.
fn sent_in(window: Duration, bytes: usize) -> (u64, Pacer) {
    let start = Instant::now();
    let mut pacer = Pacer::new(LIMITS, start);
    let mut now = start;
    let mut sent = 0;
    loop {
        now = pacer.ready_at(now);
        if now >= start + window {
            return (sent, pacer);
        }
        pacer.spend(bytes, now);
        sent += 1;
    }
}

#[test]
fn small_messages_are_held_to_the_message_rate_after_the_burst() {
    // 100 at once (100 ms of 1,000 a second), then 1,000 a second.
    let (sent, _) = sent_in(Duration::from_secs(2), 10);
    assert!((2_099..=2_101).contains(&sent), "{sent}");
}

#[test]
fn large_messages_are_held_to_the_byte_rate() {
    // 100 kB of burst, then 1 MB a second, in messages of 200 kB (twice the burst).
    let (sent, _) = sent_in(Duration::from_secs(2), 200_000);
    assert!((10..=11).contains(&sent), "{sent}");
}

#[test]
fn a_burst_goes_out_at_once_and_the_debt_delays_what_follows() {
    let start = Instant::now();
    let mut pacer = Pacer::new(LIMITS, start);
    for _ in 0..100 {
        assert!(pacer.ready(start), "the burst is not held");
        pacer.spend(100, start);
    }
    assert!(!pacer.ready(start), "the 101st waits");
    assert_eq!(pacer.ready_at(start), start + Duration::from_millis(1));
    // One message larger than the whole burst goes, and its debt holds the next ones.
    let later = start + Duration::from_secs(1);
    assert!(pacer.ready(later));
    pacer.spend(300_000, later);
    let next = pacer.ready_at(later) - later;
    assert!(
        next >= Duration::from_millis(200) && next < Duration::from_millis(201),
        "200 kB of debt at 1 MB a second: {next:?}"
    );
}

#[test]
fn an_idle_pacer_holds_no_more_than_the_burst() {
    let start = Instant::now();
    let mut pacer = Pacer::new(LIMITS, start);
    let much_later = start + Duration::from_secs(3600);
    let mut sent = 0;
    while pacer.ready(much_later) {
        pacer.spend(1, much_later);
        sent += 1;
    }
    assert_eq!(sent, 100);
}
