//! Unit tests of the keyspace records: the borrowed twins encode and decode the same bytes.

use super::*;
use crate::error::StorageError;

fn records() -> Vec<Record> {
    vec![
        Record {
            value: b"v\r\n\xff".to_vec(),
            version: Hlc::new(1_700_000_000_000, 3, "n1"),
            expires_at_ms: Some(1_700_000_000_100),
            fencing_token: Some(Hlc::new(5, 0, "client")),
        },
        Record {
            value: vec![7; 300], // a length that needs a two-byte varint
            version: Hlc::new(0, 0, ""),
            expires_at_ms: None,
            fencing_token: None,
        },
        Record {
            value: Vec::new(),
            version: Hlc::new(u64::MAX, u64::MAX, "x"),
            expires_at_ms: Some(u64::MAX),
            fencing_token: None,
        },
    ]
}

#[test]
fn borrowed_record_twins_use_the_record_encoding() {
    for record in records() {
        let bytes = codec::encode(&record);
        let out = RecordOut {
            value: &record.value,
            version: &record.version,
            expires_at_ms: record.expires_at_ms,
            fencing_token: record.fencing_token.as_ref(),
        };
        assert_eq!(codec::encode(&out), bytes, "{record:?}");
        let view: RecordView<'_> = decode_borrowed("record", &bytes).expect("decodes");
        assert_eq!(view.value, record.value.as_slice());
        assert_eq!(view.version, record.version);
        assert_eq!(view.expires_at_ms, record.expires_at_ms);
        assert_eq!(view.fencing_token, record.fencing_token);
    }
}

#[test]
fn observer_floor_round_trips_and_an_empty_row_has_none() {
    assert_eq!(encode_observer_floor(None), Vec::<u8>::new());
    assert_eq!(decode_observer_floor(&[]).expect("empty"), None);
    let floor = Hlc::new(1_700_000_000_000, 7, "n3");
    let bytes = encode_observer_floor(Some(&floor));
    assert_eq!(decode_observer_floor(&bytes).expect("decodes"), Some(floor));
    assert!(matches!(
        decode_observer_floor(&bytes[..2]),
        Err(StorageError::Corrupt { .. })
    ));
}

#[test]
fn borrowed_decode_checks_the_format_version() {
    let mut bytes = codec::encode(&records()[0]);
    assert!(decode_borrowed::<RecordView<'_>>("record", &bytes[..3]).is_err());
    assert!(matches!(
        decode_borrowed::<RecordView<'_>>("record", &[]),
        Err(StorageError::Corrupt { .. })
    ));
    bytes[0] = codec::FORMAT_VERSION + 1;
    assert!(matches!(
        decode_borrowed::<RecordView<'_>>("record", &bytes),
        Err(StorageError::FormatVersion { .. })
    ));
}
