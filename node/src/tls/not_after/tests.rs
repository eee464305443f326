use super::*;

#[test]
fn civil_dates_count_days_from_the_epoch() {
    assert_eq!(days_from_civil(1970, 1, 1), 0);
    assert_eq!(days_from_civil(2000, 3, 1), 11_017);
    assert_eq!(days_from_civil(2024, 2, 29), 19_782);
    assert_eq!(days_from_civil(1969, 12, 31), -1);
}

#[test]
fn both_time_forms_parse_and_garbage_does_not() {
    assert_eq!(parse_time(UTC_TIME, b"700101000000Z"), Some(0));
    assert_eq!(parse_time(UTC_TIME, b"491231235959Z"), Some(2_524_607_999));
    assert_eq!(
        parse_time(GENERALIZED_TIME, b"20491231235959Z"),
        Some(2_524_607_999)
    );
    assert_eq!(parse_time(UTC_TIME, b"20491231235959Z"), None);
    assert_eq!(parse_time(UTC_TIME, b"491331235959Z"), None);
    assert_eq!(parse_time(UTC_TIME, b"4912312359+0Z"), None);
    assert_eq!(parse_time(INTEGER, b"491231235959Z"), None);
}

#[test]
fn truncated_der_is_not_read() {
    assert_eq!(element(&[SEQUENCE, 0x82, 0x01]), None);
    assert_eq!(element(&[SEQUENCE, 0x05, 0x00]), None);
    assert_eq!(
        not_after_unix(&CertificateDer::from(vec![SEQUENCE, 0x00])),
        None
    );
}
