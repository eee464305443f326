//! ISO 8601 UTC with milliseconds and `Z` (devicebound.md §3, §4): epoch,
//! leap days, century rules, millisecond padding, the year-9999 bound.

use crate::devicebound::time::{FORMATTED_LEN, MAX_FORMATTED_UNIX_MS, format_utc_millis};

#[test]
fn iso_8601_table() {
    // Expected values from `date -u -d @<seconds>`, milliseconds added by hand.
    let cases: &[(&str, u64, &str)] = &[
        ("the epoch", 0, "1970-01-01T00:00:00.000Z"),
        ("first millisecond", 1, "1970-01-01T00:00:00.001Z"),
        (
            "ms padded to three digits",
            1_010,
            "1970-01-01T00:00:01.010Z",
        ),
        (
            "last ms of the first day",
            86_399_999,
            "1970-01-01T23:59:59.999Z",
        ),
        (
            "first ms of the second day",
            86_400_000,
            "1970-01-02T00:00:00.000Z",
        ),
        (
            "IoT Hub's example",
            1_438_100_688_789,
            "2015-07-28T16:24:48.789Z",
        ),
        ("end of 1999", 946_684_799_999, "1999-12-31T23:59:59.999Z"),
        (
            "2000 is a leap year (div by 400)",
            951_782_400_000,
            "2000-02-29T00:00:00.000Z",
        ),
        (
            "end of 2000-02-29",
            951_868_799_999,
            "2000-02-29T23:59:59.999Z",
        ),
        (
            "a billion seconds",
            1_000_000_000_000,
            "2001-09-09T01:46:40.000Z",
        ),
        (
            "i32 seconds overflow",
            2_147_483_647_000,
            "2038-01-19T03:14:07.000Z",
        ),
        ("2024-02-29", 1_709_164_800_000, "2024-02-29T00:00:00.000Z"),
        ("2100-01-01", 4_102_444_800_000, "2100-01-01T00:00:00.000Z"),
        (
            "2100 is not a leap year",
            4_107_542_399_999,
            "2100-02-28T23:59:59.999Z",
        ),
        (
            "2100-03-01 follows 02-28",
            4_107_542_400_000,
            "2100-03-01T00:00:00.000Z",
        ),
        (
            "the last formatted instant",
            MAX_FORMATTED_UNIX_MS,
            "9999-12-31T23:59:59.999Z",
        ),
        (
            "later times are clamped",
            MAX_FORMATTED_UNIX_MS + 1,
            "9999-12-31T23:59:59.999Z",
        ),
        ("u64::MAX is clamped", u64::MAX, "9999-12-31T23:59:59.999Z"),
    ];
    for (name, unix_ms, expected) in cases {
        let formatted = format_utc_millis(*unix_ms);
        assert_eq!(formatted, *expected, "case: {name}");
        assert_eq!(formatted.len(), FORMATTED_LEN, "case: {name}");
    }
}
