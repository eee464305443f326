//! Unit tests of the HLC: order, text form, update rule, skew and counter bounds.

use super::*;

#[test]
fn parse_accepts_padded_and_unpadded_forms_section_3() {
    type Expected = Result<(u64, u64, &'static str), ()>;
    let cases: &[(&str, Expected)] = &[
        (
            "001696374425000:00001:StateStore",
            Ok((1_696_374_425_000, 1, "StateStore")),
        ),
        (
            "1696374425000:1:StateStore",
            Ok((1_696_374_425_000, 1, "StateStore")),
        ),
        ("0:0:n", Ok((0, 0, "n"))),
        ("1:2:3f2a-uuid", Ok((1, 2, "3f2a-uuid"))),
        ("1:2", Err(())),
        ("1:2:n:extra", Err(())),
        ("1:2:", Err(())),
        ("x:2:n", Err(())),
        ("1:-2:n", Err(())),
        ("+1:2:n", Err(())),
        (" 1:2:n", Err(())),
        ("1::n", Err(())),
        ("", Err(())),
        ("99999999999999999999999:0:n", Err(())),
    ];
    for (text, expected) in cases {
        let got = Hlc::parse(text)
            .map(|h| (h.ms, h.counter, h.node))
            .map_err(|_| ());
        let expected = (*expected).map(|(ms, c, n)| (ms, c, n.to_owned()));
        assert_eq!(got, expected, "parsing {text:?}");
    }
}

#[test]
fn format_pads_ms_to_15_and_counter_to_5_section_3() {
    assert_eq!(
        Hlc::new(1_696_374_425_000, 1, "n1").to_string(),
        "001696374425000:00001:n1"
    );
    assert_eq!(Hlc::new(0, 0, "x").to_string(), "000000000000000:00000:x");
}

#[test]
fn parse_of_format_is_identity() {
    for hlc in [
        Hlc::new(0, 0, "a"),
        Hlc::new(u64::MAX, MAX_COUNTER, "node-1"),
        Hlc::new(17, 99_999, "z"),
    ] {
        assert_eq!(Hlc::parse(&hlc.to_string()), Ok(hlc));
    }
}

#[test]
fn order_is_ms_then_counter_then_node_section_3() {
    assert!(Hlc::new(1, 9, "z") < Hlc::new(2, 0, "a"));
    assert!(Hlc::new(1, 1, "z") < Hlc::new(1, 2, "a"));
    assert!(Hlc::new(1, 1, "a") < Hlc::new(1, 1, "b"));
}

#[test]
fn clock_is_strictly_monotonic_even_when_the_wall_clock_goes_back() {
    let wall = ManualClock::new(1_000);
    let mut clock = HlcClock::new("n1", wall.clone());
    let a = clock.now();
    let b = clock.now();
    wall.set(500);
    let c = clock.now();
    wall.set(2_000);
    let d = clock.now();
    assert!(a < b && b < c && c < d, "{a} {b} {c} {d}");
    assert_eq!((a.ms, a.counter), (1_000, 0));
    assert_eq!((c.ms, c.counter), (1_000, 2));
    assert_eq!((d.ms, d.counter), (2_000, 0));
}

#[test]
fn update_issues_a_version_greater_than_the_remote_one() {
    let wall = ManualClock::new(1_000);
    let mut clock = HlcClock::new("n1", wall);
    let remote = Hlc::new(1_500, 7, "client");
    let issued = clock.update(&remote).expect("within drift");
    assert!(issued > remote);
    assert_eq!(
        (issued.ms, issued.counter, issued.node.as_str()),
        (1_500, 8, "n1")
    );
    let behind = Hlc::new(10, 0, "client");
    assert!(clock.update(&behind).expect("behind is fine") > issued);
}

#[test]
fn update_refuses_more_than_60s_ahead_section_3() {
    let wall = ManualClock::new(1_000_000);
    let mut clock = HlcClock::new("n1", wall);
    assert!(
        clock
            .update(&Hlc::new(1_000_000 + MAX_CLOCK_DRIFT_MS, 0, "c"))
            .is_ok()
    );
    let err = clock.update(&Hlc::new(1_000_000 + MAX_CLOCK_DRIFT_MS + 100_000, 0, "c"));
    assert!(err.is_err());
    // a refused update does not move the clock
    assert!(clock.now().ms <= 1_000_000 + MAX_CLOCK_DRIFT_MS);
}

#[test]
fn counter_never_passes_int32_max() {
    let wall = ManualClock::new(5);
    let mut clock = HlcClock::new("n1", wall);
    let huge = Hlc::new(5, u64::MAX - 1, "client");
    let issued = clock.update(&huge).expect("same ms is within drift");
    assert!(issued > huge);
    assert_eq!((issued.ms, issued.counter), (6, 0));
    assert!(Hlc::new(5, MAX_COUNTER, "a").successor("b") > Hlc::new(5, MAX_COUNTER, "a"));
}

#[test]
fn observe_raises_the_clock_above_stored_versions() {
    let mut clock = HlcClock::new("n2", ManualClock::new(100));
    clock.observe(&Hlc::new(900, 3, "n1"));
    let next = clock.now();
    assert!(next > Hlc::new(900, 3, "n1"));
    assert_eq!(next.node, "n2");
}
