//! Unit tests of [`super`]: the slow-I/O detector's windows and warnings.

use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn fast_appends_never_report() {
    let mut limiter = SlowFlushLimiter::default();
    let start = Instant::now();
    for i in 0..100 {
        assert_eq!(limiter.observe(ms(49), start + ms(i * 100)), None);
    }
}

#[test]
fn first_slow_append_reports_at_once() {
    let mut limiter = SlowFlushLimiter::default();
    let report = limiter.observe(ms(80), Instant::now());
    assert_eq!(
        report,
        Some(SlowReport {
            worst: ms(80),
            count: 1
        })
    );
}

#[test]
fn slow_appends_within_a_second_are_folded_into_the_next_line() {
    let mut limiter = SlowFlushLimiter::default();
    let start = Instant::now();
    assert!(limiter.observe(ms(60), start).is_some());
    assert_eq!(limiter.observe(ms(120), start + ms(100)), None);
    assert_eq!(limiter.observe(ms(70), start + ms(900)), None);
    // A fast one in between neither reports nor resets what is pending.
    assert_eq!(limiter.observe(ms(1), start + ms(950)), None);
    assert_eq!(
        limiter.observe(ms(55), start + ms(1000)),
        Some(SlowReport {
            worst: ms(120),
            count: 3
        })
    );
    // The pending figures start again after a line.
    assert_eq!(limiter.observe(ms(51), start + ms(1500)), None);
    assert_eq!(
        limiter.observe(ms(52), start + ms(2000)),
        Some(SlowReport {
            worst: ms(52),
            count: 2
        })
    );
}
