//! Unit tests of the versioned record encoding.

use super::*;

#[test]
fn round_trip_and_version_check() {
    let bytes = encode(&(7u64, "x".to_string()));
    assert_eq!(bytes[0], FORMAT_VERSION);
    let back: (u64, String) = decode("pair", &bytes).expect("decodes");
    assert_eq!(back, (7, "x".to_string()));
    let mut future = bytes.clone();
    future[0] = 9;
    assert!(matches!(
        decode::<(u64, String)>("pair", &future),
        Err(StorageError::FormatVersion { found: 9, .. })
    ));
    assert!(matches!(
        decode::<(u64, String)>("pair", &[]),
        Err(StorageError::Corrupt { .. })
    ));
    assert!(matches!(
        decode::<(u64, String)>("pair", &[FORMAT_VERSION, 0xff]),
        Err(StorageError::Corrupt { .. })
    ));
}

#[test]
fn decode_prefix_reports_where_the_encoding_ends() {
    let bytes = encode(&(7u64, "xyz".to_string()));
    let mut longer = bytes.clone();
    longer.extend_from_slice(&[0xaa; 5]);
    let (back, used): ((u64, String), usize) = decode_prefix("pair", &longer).expect("decodes");
    assert_eq!(back, (7, "xyz".to_string()));
    assert_eq!(used, bytes.len());
    assert!(decode_prefix::<(u64, String)>("pair", &bytes[..bytes.len() - 1]).is_err());
    assert!(matches!(
        decode_prefix::<(u64, String)>("pair", &[9, 0]),
        Err(StorageError::FormatVersion { found: 9, .. })
    ));
    assert!(decode_prefix::<(u64, String)>("pair", &[]).is_err());
}
