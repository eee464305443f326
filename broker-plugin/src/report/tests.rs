//! Counters, the drop-line rate limit, the report clock and log-safe text.

use super::*;

#[test]
fn counters_line() {
    let c = Counters::default();
    Counters::bump(&c.vouched);
    Counters::add(&c.forged_removed, 3);
    Counters::bump(&c.refused_response_topic);
    assert_eq!(
        c.line(),
        "statestore-plugin counters: vouched=1 forged_removed=3 refused_response_topic=1 \
         refused_no_identity=0 errors=0"
    );
}

#[test]
fn drop_lines_are_rate_limited_per_second() {
    let mut d = DropLog::default();
    for _ in 0..DROP_LINES_PER_SECOND {
        assert_eq!(d.admit(100), Admit::Log { suppressed: 0 });
    }
    assert_eq!(d.admit(100), Admit::Suppress);
    assert_eq!(d.admit(100), Admit::Suppress);
    assert_eq!(d.admit(101), Admit::Log { suppressed: 2 });
    assert_eq!(d.admit(101), Admit::Log { suppressed: 0 });
}

#[test]
fn report_clock() {
    let mut never = ReportClock::new(0);
    assert!(!never.due(0));
    assert!(!never.due(u64::MAX));
    let mut c = ReportClock::new(60);
    let table = [
        (1_000, false),
        (1_059, false),
        (1_060, true),
        (1_061, false),
        (1_119, false),
        (1_120, true),
        (5_000, true),
        (5_001, false),
    ];
    for (now, want) in table {
        assert_eq!(c.due(now), want, "{now}");
    }
}

#[test]
fn shortening() {
    let table = [
        ("abc", 5, "abc"),
        ("abcdef", 3, "abc…"),
        ("a\nb", 10, "a\\nb"),
        ("é€x", 2, "é€…"),
        ("", 3, ""),
    ];
    for (text, max, want) in table {
        assert_eq!(shorten(text, max), want, "{text:?}");
    }
    assert_eq!(shorten_bytes(b"a\xffb", 10), "a\u{fffd}b");
}
