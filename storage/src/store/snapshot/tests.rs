//! Unit tests of snapshot files: round trip, verification, corruption.

use super::*;

#[test]
fn snapshot_round_trip_and_corruption_detection() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tmp = dir.path().join("s.tmp");
    let final_path = dir.path().join("s.bin");
    let mut writer = SnapshotWriter::create(&tmp, b"hdr").expect("create");
    writer.push(b"k1", b"v1").expect("push");
    writer.push(b"k2\r\n", &[0u8, 255]).expect("push");
    writer.push(b"", b"").expect("push");
    let file = writer.finish(&final_path, b"hdr").expect("finish");
    assert_eq!(file.entries, 3);
    assert!(!tmp.exists());

    assert_eq!(read_header(&final_path).expect("header").header, b"hdr");
    let mut seen = Vec::new();
    let back = read_entries(&final_path, |kv| {
        seen.push(kv);
        Ok(())
    })
    .expect("read");
    assert_eq!(back.entries, 3);
    assert_eq!(seen[1], (b"k2\r\n".to_vec(), vec![0u8, 255]));

    // flip one byte in the middle: the checksum must catch it
    let mut bytes = std::fs::read(&final_path).expect("read file");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(&final_path, &bytes).expect("write");
    assert!(read_entries(&final_path, |_| Ok(())).is_err());

    // a truncated file is an error, not a panic
    std::fs::write(&final_path, &bytes[..bytes.len() - 5]).expect("write");
    assert!(read_entries(&final_path, |_| Ok(())).is_err());
}

#[test]
fn absurd_lengths_are_refused_without_allocating() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bad.bin");
    let mut bytes = MAGIC.to_vec();
    bytes.extend_from_slice(&(MAX_PART_BYTES + 1).to_be_bytes());
    std::fs::write(&path, bytes).expect("write");
    assert!(matches!(
        read_header(&path),
        Err(StorageError::Corrupt { .. })
    ));
}
