//! The log store's values measured by decoding: the natural length of each frame kind is the
//! length `log_store` writes, whatever follows it.

use openraft::testing::log_id;
use statestore_storage::codec as storage_codec;

use super::*;
use crate::batch::Batch;
use crate::types::TypeConfig;

/// Record and chunk builders shared by the check's submodules' tests.
pub(super) mod support;

fn natural_len_with_trailing_bytes<T: serde::Serialize>(kind: FrameKind, value: &T) {
    let bytes = storage_codec::encode(value);
    let mut longer = bytes.clone();
    longer.extend_from_slice(&[0, 0, 0, 1, 0xff, 0xee]);
    assert_eq!(LogFrames.natural_len(kind, &longer), Some(bytes.len()));
    assert_eq!(LogFrames.natural_len(kind, &bytes[..bytes.len() - 1]), None);
}

#[test]
fn each_kind_decodes_to_its_written_length() {
    let id = log_id::<TypeConfig>(3, 2, 41);
    natural_len_with_trailing_bytes(FrameKind::LogId, &id);
    natural_len_with_trailing_bytes(FrameKind::Vote, &Vote::new(3, 2));
    natural_len_with_trailing_bytes(FrameKind::Payload, &EntryPayload::Blank);
    natural_len_with_trailing_bytes(
        FrameKind::Payload,
        &EntryPayload::Normal(Batch::new(Vec::new())),
    );
    let encoded = storage_codec::encode(&id);
    assert_eq!(LogFrames.log_id(&encoded), Some(id));
    assert_eq!(LogFrames.index(&id), 41);
    assert_eq!(LogFrames.log_id(&[9, 9]), None);
}

#[test]
fn the_refusal_names_file_offset_problem_and_the_way_out() {
    let corruption = WalCorruption {
        path: PathBuf::from("/data/raft-log/r-00_000_000_000_000_000_000.wal"),
        offset: 4242,
        problem: Problem::RunsPastChunkEnd,
        node: Some(3),
    };
    let text = corruption.to_string();
    for part in [
        "/data/raft-log/r-00_000_000_000_000_000_000.wal at byte 4242",
        "not the last one",
        "refuses to start",
        "move the data directory aside",
        "remove-node --id 3",
        "`--join`",
        "add-node --id <new id>",
        "snapshot",
    ] {
        assert!(text.contains(part), "{part:?} missing from {text}");
    }
}
