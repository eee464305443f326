//! Unit tests of snapshot files: round trip, verification, corruption, compression, and the
//! files of the format before compression.

use super::*;

fn is_corrupt<T: std::fmt::Debug>(result: Result<T>) -> bool {
    matches!(result, Err(StorageError::Corrupt { .. }))
}

/// A compressed body as the layout describes it, built with the frame encoder's defaults (not
/// the writer's block settings): the reader takes any LZ4 frame without a content checksum.
fn compressed(body: &[u8]) -> Vec<u8> {
    let mut encoder = FrameEncoder::new(Vec::new());
    encoder.write_all(body).expect("compress");
    let mut bytes = MAGIC.to_vec();
    bytes.extend(encoder.finish().expect("finish"));
    bytes
}

/// The body of a snapshot of `rows` under `header`, with the trailer and the checksum over
/// `magic` and the body, laid out by hand from the module's documentation.
fn body(magic: &[u8; 8], header: &[u8], rows: &[(&[u8], &[u8])]) -> Vec<u8> {
    let mut body = Vec::new();
    let mut part = |bytes: &[u8]| {
        body.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
        body.extend_from_slice(bytes);
    };
    part(header);
    for (key, value) in rows {
        part(key);
        part(value);
    }
    body.extend_from_slice(&u32::MAX.to_be_bytes());
    body.extend_from_slice(&(rows.len() as u64).to_be_bytes());
    let mut hasher = Xxh3::new();
    hasher.update(magic);
    hasher.update(&body);
    body.extend_from_slice(&hasher.digest().to_be_bytes());
    body
}

fn read_all(path: &Path) -> Result<Vec<KvPair>> {
    let mut rows = Vec::new();
    read_entries(path, |row| {
        rows.push(row);
        Ok(())
    })?;
    Ok(rows)
}

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

    // flip one byte in the middle: the frame or the checksum must catch it
    let mut bytes = std::fs::read(&final_path).expect("read file");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(&final_path, &bytes).expect("write");
    assert!(is_corrupt(read_entries(&final_path, |_| Ok(()))));

    // a truncated file is corrupt, not a panic
    std::fs::write(&final_path, &bytes[..bytes.len() - 5]).expect("write");
    assert!(is_corrupt(read_entries(&final_path, |_| Ok(()))));
}

#[test]
fn every_byte_flipped_or_cut_is_caught() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("s.bin");
    let rows: Vec<(Vec<u8>, Vec<u8>)> = (0..50u32)
        .map(|i| {
            (
                format!("key-{i:04}").into_bytes(),
                i.to_be_bytes().repeat(5),
            )
        })
        .collect();
    let mut writer = SnapshotWriter::create(&dir.path().join("s.tmp"), b"hdr").expect("create");
    for (key, value) in &rows {
        writer.push(key, value).expect("push");
    }
    writer.finish(&path, b"hdr").expect("finish");
    let good = std::fs::read(&path).expect("read");
    assert_eq!(read_all(&path).expect("intact"), rows);

    for at in 0..good.len() {
        let mut bad = good.clone();
        bad[at] ^= 0x10;
        std::fs::write(&path, &bad).expect("write");
        assert!(is_corrupt(read_all(&path)), "byte {at} flipped");
        std::fs::write(&path, &good[..at]).expect("write");
        assert!(is_corrupt(read_all(&path)), "cut at {at}");
    }
}

#[test]
fn compressible_rows_take_less_room_than_their_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("s.bin");
    let mut writer = SnapshotWriter::create(&dir.path().join("s.tmp"), b"hdr").expect("create");
    let mut raw_bytes = 0;
    for i in 0..20_000u32 {
        let key = format!("key-{i:012}");
        let value = b"abcdefghijklmnopqrstuvwxyz".repeat(3);
        raw_bytes += 8 + key.len() + value.len();
        writer.push(key.as_bytes(), &value).expect("push");
    }
    let file = writer.finish(&path, b"hdr").expect("finish");
    assert!(
        file.size * 4 < raw_bytes as u64,
        "{} bytes on disk for {raw_bytes} bytes of rows",
        file.size
    );
    assert_eq!(read_all(&path).expect("read").len(), 20_000);
}

#[test]
fn files_of_the_format_before_compression_still_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("old.bin");
    let rows: [(&[u8], &[u8]); 2] = [(b"a", b"1"), (b"b\0", &[0, 255, 7])];
    let mut bytes = PLAIN_MAGIC.to_vec();
    bytes.extend(body(PLAIN_MAGIC, b"old header", &rows));
    std::fs::write(&path, &bytes).expect("write");

    assert_eq!(read_header(&path).expect("header").header, b"old header");
    let expected: Vec<KvPair> = rows.iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
    assert_eq!(read_all(&path).expect("read"), expected);

    // Its checksum covers its own magic: the same body under the new magic does not verify.
    let relabelled = compressed(&body(PLAIN_MAGIC, b"old header", &rows));
    std::fs::write(&path, &relabelled).expect("write");
    assert!(is_corrupt(read_all(&path)));
}

#[test]
fn a_part_longer_than_the_file_is_corrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("s.bin");
    // A header part that says 1,000 bytes, then 3.
    let short = [1000u32.to_be_bytes().as_slice(), b"abc"].concat();
    let plain = [PLAIN_MAGIC.as_slice(), &short].concat();
    for bytes in [plain, compressed(&short)] {
        std::fs::write(&path, bytes).expect("write");
        assert!(is_corrupt(read_header(&path)));
        assert!(is_corrupt(read_all(&path)));
    }
}

#[test]
fn a_frame_built_elsewhere_reads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("s.bin");
    let rows: [(&[u8], &[u8]); 1] = [(b"k", b"v")];
    std::fs::write(&path, compressed(&body(MAGIC, b"h", &rows))).expect("write");
    assert_eq!(
        read_all(&path).expect("read"),
        vec![(b"k".to_vec(), b"v".to_vec())]
    );
}

#[test]
fn absurd_lengths_are_refused_without_allocating() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bad.bin");
    let mut plain = PLAIN_MAGIC.to_vec();
    plain.extend_from_slice(&(MAX_PART_BYTES + 1).to_be_bytes());
    let absurd = compressed(&(MAX_PART_BYTES + 1).to_be_bytes());
    for bytes in [plain, absurd] {
        std::fs::write(&path, bytes).expect("write");
        assert!(is_corrupt(read_header(&path)));
    }
}

#[test]
fn bytes_after_the_checksum_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("s.bin");
    let rows: [(&[u8], &[u8]); 1] = [(b"k", b"v")];
    let mut plain = PLAIN_MAGIC.to_vec();
    plain.extend(body(PLAIN_MAGIC, b"h", &rows));
    plain.push(0);
    let one_frame = compressed(&body(MAGIC, b"h", &rows));
    // A second frame after the first would decode as more body; an empty one would not.
    let second_frame =
        |body: &[u8]| [one_frame.clone(), compressed(body)[MAGIC.len()..].to_vec()].concat();
    // Four bytes are what the decoder reads to look for a next frame.
    let four_more = [one_frame.as_slice(), &[1, 2, 3, 4]].concat();
    for bytes in [plain, second_frame(b"x"), second_frame(b""), four_more] {
        std::fs::write(&path, bytes).expect("write");
        assert!(is_corrupt(read_all(&path)));
    }
}

proptest::proptest! {
    /// Whatever follows either magic, reading never panics, and bytes not written as a snapshot
    /// are corrupt (a chance match of the 64-bit checksum aside).
    #[test]
    fn arbitrary_bodies_never_panic(
        compress in proptest::bool::ANY,
        raw in proptest::collection::vec(proptest::num::u8::ANY, 0..512),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.bin");
        // A valid frame of arbitrary bytes, or arbitrary bytes where a frame belongs.
        let files = [
            if compress { compressed(&raw) } else { [PLAIN_MAGIC.as_slice(), &raw].concat() },
            [MAGIC.as_slice(), &raw].concat(),
        ];
        for bytes in files {
            std::fs::write(&path, bytes).expect("write");
            let header = read_header(&path);
            proptest::prop_assert!(header.is_ok() || is_corrupt(header));
            proptest::prop_assert!(is_corrupt(read_all(&path)));
        }
    }
}
