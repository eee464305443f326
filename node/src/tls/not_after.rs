//! The expiry (notAfter) of an X.509 certificate, read from its DER with a minimal walk of
//! RFC 5280's `Certificate → TBSCertificate → Validity` (no general ASN.1 parser: only the
//! fields in front of `validity` are stepped over).

use std::path::Path;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

const SEQUENCE: u8 = 0x30;
const VERSION: u8 = 0xa0;
const INTEGER: u8 = 0x02;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// One DER element: its tag, its contents and what follows it.
fn element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let octets = usize::from(first & 0x7f);
        if octets == 0 || octets > 4 || rest.len() < octets {
            return None;
        }
        let (len, rest) = rest.split_at(octets);
        let len = len.iter().fold(0usize, |n, &b| (n << 8) | usize::from(b));
        (len, rest)
    };
    if rest.len() < len {
        return None;
    }
    let (contents, after) = rest.split_at(len);
    Some((tag, contents, after))
}

/// The contents of the element tagged `tag` at the start of `der`, and what follows.
fn expect(der: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (found, contents, after) = element(der)?;
    (found == tag).then_some((contents, after))
}

/// notAfter of `cert` in seconds since the Unix epoch; `None` if it cannot be read.
pub fn not_after_unix(cert: &CertificateDer<'_>) -> Option<i64> {
    let (certificate, _) = expect(cert.as_ref(), SEQUENCE)?;
    let (tbs, _) = expect(certificate, SEQUENCE)?;
    let mut rest = tbs;
    if let Some((VERSION, _, after)) = element(rest) {
        rest = after;
    }
    let (_serial, rest) = expect(rest, INTEGER)?;
    let (_signature, rest) = expect(rest, SEQUENCE)?;
    let (_issuer, rest) = expect(rest, SEQUENCE)?;
    let (validity, _) = expect(rest, SEQUENCE)?;
    let (_, _not_before, rest) = element(validity)?;
    let (tag, not_after, _) = element(rest)?;
    parse_time(tag, not_after)
}

/// notAfter of the first certificate of the PEM file at `path` (a server's or client's own
/// certificate comes first in its chain); `None` if the file or the certificate cannot be read.
pub fn pem_file_not_after_unix(path: &Path) -> Option<i64> {
    let pem = std::fs::read(path).ok()?;
    let first = CertificateDer::pem_slice_iter(&pem).next()?.ok()?;
    not_after_unix(&first)
}

/// UTCTime `YYMMDDHHMMSSZ` (years 1950–2049, RFC 5280 §4.1.2.5.1) or GeneralizedTime
/// `YYYYMMDDHHMMSSZ`.
fn parse_time(tag: u8, text: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(text).ok()?.strip_suffix('Z')?;
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let number = |range: std::ops::Range<usize>| text.get(range)?.parse::<i64>().ok();
    let (year, rest) = match (tag, text.len()) {
        (UTC_TIME, 12) => {
            let yy = number(0..2)?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, 2)
        }
        (GENERALIZED_TIME, 14) => (number(0..4)?, 4),
        _ => return None,
    };
    let month = number(rest..rest + 2)?;
    let day = number(rest + 2..rest + 4)?;
    let hour = number(rest + 4..rest + 6)?;
    let minute = number(rest + 6..rest + 8)?;
    let second = number(rest + 8..rest + 10)?;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + hour * 3_600 + minute * 60 + second)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests;
