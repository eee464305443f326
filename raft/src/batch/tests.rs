//! Unit tests of [`super`]: a batch serialises as its cached encoding and undecodable bytes are an error.

use statestore_vocab::hlc::Hlc;
use statestore_vocab::keyspace::SetCondition;

use super::*;

fn set(key: &str) -> Proposal {
    Proposal {
        stamp: Hlc::parse("1700000000000:0:n1").expect("hlc"),
        wall_ms: 1_700_000_000_000,
        request: None,
        mutation: Mutation::Set {
            key: key.as_bytes().to_vec(),
            value: b"value".to_vec(),
            condition: SetCondition::Always,
            expire_after_ms: None,
            fencing_token: None,
        },
        token_seed: None,
    }
}

#[test]
fn serialises_as_its_cached_encoding_and_round_trips() {
    let batch = Batch::new(vec![set("a"), set("b")]);
    let wire = codec::encode(&batch);
    let back: Batch = codec::decode("batch", &wire).expect("decodes");
    assert_eq!(back, batch);
    assert_eq!(back.proposals().len(), 2);
    // the decoded batch keeps the bytes it was decoded from
    assert_eq!(back.encoded(), batch.encoded());
}

#[test]
fn undecodable_bytes_are_an_error_not_a_panic() {
    let wire = codec::encode(&serde_bytes::ByteBuf::from(vec![
        codec::FORMAT_VERSION,
        0xff,
    ]));
    assert!(codec::decode::<Batch>("batch", &wire).is_err());
}
