//! The dead-connection rule: an overdue acknowledgement and a silent broker, both.

use std::time::{Duration, Instant};

use super::Liveness;

const TIMEOUT: Duration = Duration::from_secs(5);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn nothing_waiting_for_an_acknowledgement_is_never_dead() {
    let start = Instant::now();
    let liveness = Liveness::new(TIMEOUT, start);
    assert!(!liveness.presumed_dead(None, start + ms(60_000)));
}

#[test]
fn an_overdue_acknowledgement_on_a_silent_connection_is_dead() {
    let start = Instant::now();
    let liveness = Liveness::new(TIMEOUT, start);
    let sent = start + ms(100);
    assert!(!liveness.presumed_dead(Some(sent), sent + TIMEOUT));
    assert!(liveness.presumed_dead(Some(sent), sent + TIMEOUT + ms(1)));
}

#[test]
fn a_broker_that_keeps_sending_is_alive_while_its_acknowledgement_queues() {
    let start = Instant::now();
    let liveness = Liveness::new(TIMEOUT, start);
    let sent = start;
    // Requests keep arriving every second while the PUBACK waits behind them.
    for second in 1..=20 {
        let now = start + ms(second * 1_000);
        liveness.heard(now);
        assert!(
            !liveness.presumed_dead(Some(sent), now + ms(999)),
            "at {second} s"
        );
    }
    // Then the broker goes quiet: dead one ack timeout after the last packet.
    let last = start + ms(20_000);
    assert!(!liveness.presumed_dead(Some(sent), last + TIMEOUT));
    assert!(liveness.presumed_dead(Some(sent), last + TIMEOUT + ms(1)));
}

#[test]
fn a_recent_publish_is_not_overdue_however_long_the_broker_was_silent() {
    // An idle connection: nothing heard for a minute, then a probe goes out.
    let start = Instant::now();
    let liveness = Liveness::new(TIMEOUT, start);
    let probe = start + ms(60_000);
    assert!(!liveness.presumed_dead(Some(probe), probe + ms(4_999)));
    assert!(liveness.presumed_dead(Some(probe), probe + ms(5_001)));
}

#[test]
fn an_earlier_instant_never_moves_the_last_heard_back() {
    let start = Instant::now();
    let liveness = Liveness::new(TIMEOUT, start);
    liveness.heard(start + ms(3_000));
    liveness.heard(start + ms(1_000));
    assert_eq!(liveness.silent_for(start + ms(4_000)), ms(1_000));
}
