use super::*;

fn detector() -> StallDetector {
    StallDetector {
        epoch: Instant::now() - Duration::from_secs(60),
        last_tick_us: AtomicU64::new(0),
        stall_start_us: AtomicU64::new(0),
        stall_end_us: AtomicU64::new(0),
        stalls: prometheus::IntCounter::new("stalls", "test").expect("counter"),
    }
}

#[test]
fn messages_read_in_a_regular_schedule_keep_their_read_time() {
    let d = detector();
    let t0 = d.epoch + Duration::from_secs(10);
    d.tick(t0);
    d.tick(t0 + Duration::from_millis(20));
    let read = t0 + Duration::from_millis(30);
    assert_eq!(d.arrival_bound(read), read);
    assert_eq!(d.stalls.get(), 0);
}

#[test]
fn messages_read_during_an_unnoticed_stall_are_dated_to_its_start() {
    let d = detector();
    let t0 = d.epoch + Duration::from_secs(10);
    d.tick(t0);
    let read = t0 + Duration::from_millis(2_500); // resumed; the ticker has not run yet
    assert_eq!(d.arrival_bound(read), t0);
}

#[test]
fn messages_read_just_after_a_noticed_stall_are_dated_to_its_start() {
    let d = detector();
    let t0 = d.epoch + Duration::from_secs(10);
    d.tick(t0);
    let resumed = t0 + Duration::from_millis(2_500);
    d.tick(resumed);
    assert_eq!(d.stalls.get(), 1);
    assert_eq!(d.arrival_bound(resumed + Duration::from_millis(50)), t0);
    let later = resumed + Duration::from_millis(500);
    d.tick(later);
    assert_eq!(
        d.arrival_bound(later),
        later,
        "long after the stall nothing is dated back"
    );
}
