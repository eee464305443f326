//! ISO 8601 UTC timestamps with milliseconds and `Z`
//! (`2015-07-28T16:24:48.789Z`), the form IoT Hub uses for `$.exp`,
//! `enqueuedTimeUtc` and `iothub-enqueuedtime` (devicebound.md §3, §4).
//! Pure arithmetic on the proleptic Gregorian calendar; no clock is read here.

/// The last instant with a four-digit year, 9999-12-31T23:59:59.999Z, in
/// milliseconds since the Unix epoch. SEND refuses later expiry times, so every
/// time the codecs format is at most this.
pub const MAX_FORMATTED_UNIX_MS: u64 = 253_402_300_799_999;

/// The length of every string [`format_utc_millis`] returns.
pub const FORMATTED_LEN: usize = "2015-07-28T16:24:48.789Z".len();

const MS_PER_SECOND: u64 = 1_000;
const SECONDS_PER_DAY: u64 = 86_400;

/// `unix_ms` (milliseconds since 1970-01-01T00:00:00Z) as
/// `YYYY-MM-DDTHH:MM:SS.mmmZ`. Times after [`MAX_FORMATTED_UNIX_MS`] are
/// formatted as that instant, so the result always has exactly
/// [`FORMATTED_LEN`] bytes.
pub fn format_utc_millis(unix_ms: u64) -> String {
    let unix_ms = unix_ms.min(MAX_FORMATTED_UNIX_MS);
    let millis = unix_ms % MS_PER_SECOND;
    let unix_seconds = unix_ms / MS_PER_SECOND;
    let second_of_day = unix_seconds % SECONDS_PER_DAY;
    let (year, month, day) = civil_from_days(unix_seconds / SECONDS_PER_DAY);
    // Written digit by digit: every delivery formats one, and `format!` cost more than
    // building the rest of the delivery topic.
    let mut out = *b"0000-00-00T00:00:00.000Z";
    write_digits(&mut out[0..4], year);
    write_digits(&mut out[5..7], month);
    write_digits(&mut out[8..10], day);
    write_digits(&mut out[11..13], second_of_day / 3_600);
    write_digits(&mut out[14..16], second_of_day / 60 % 60);
    write_digits(&mut out[17..19], second_of_day % 60);
    write_digits(&mut out[20..23], millis);
    out.iter().map(|&byte| char::from(byte)).collect()
}

/// Writes the last `field.len()` decimal digits of `value` into `field`, zero-padded.
fn write_digits(field: &mut [u8], mut value: u64) {
    for digit in field.iter_mut().rev() {
        // `value % 10` is below 10: the cast cannot truncate.
        *digit = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

/// Year, month (1–12) and day (1–31) of the day `days` after 1970-01-01
/// (Howard Hinnant's `civil_from_days`, unsigned because no time before the
/// epoch is ever formatted).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    const DAYS_PER_ERA: u64 = 146_097;
    // Days from 0000-03-01 to 1970-01-01: eras start on March 1st so that the
    // leap day is the last day of a year.
    let days_since_0000_03_01 = days + 719_468;
    let era = days_since_0000_03_01 / DAYS_PER_ERA;
    let day_of_era = days_since_0000_03_01 % DAYS_PER_ERA;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}
