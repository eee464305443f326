//! The replicated encoding (log entries, remembered replies, stored records) pinned byte for
//! byte on samples of every kind of value that crosses the log or reaches the disk.

use statestore_storage::codec;
use statestore_storage::devicebound::{
    Ack, DeadLetter, DeadLetterReason, DeviceCommand, DeviceCounters, DeviceOutcome, DeviceResult,
    Expiry, FeedbackRecord, FeedbackSettlement, FeedbackStatus, Message, SendMessage, TokenSeed,
};
use statestore_storage::keyspace::{KeyspaceMeta, Limits, Rejection, SetCondition};
use statestore_storage::machine::{Mutation, Outcome, Proposal, RememberedReply, RequestId};
use statestore_vocab::hlc::Hlc;

/// The bytes each sample encoded to when the vocabulary crate and the state-machine root were
/// introduced (checked equal to the bytes of the build before them).
const PINNED: &[(&str, &str)] = &[
    (
        "set",
        "01fbd095ffbc3107066e6f64652d31e4d095ffbc310106636c69656e7403010203904ef7ccd5a2b4c6c88880deb7de9af1d9a2a30200016b01760201f403010102016300",
    ),
    (
        "limits",
        "01fbd095ffbc3107066e6f64652d31e4d095ffbc310106636c69656e7403010203904ef7ccd5a2b4c6c88880deb7de9af1d9a2a30207c0843d8080808004e807c0843de807c0843d808080800100",
    ),
    (
        "expire",
        "01fbd095ffbc3107066e6f64652d31e4d095ffbc310106636c69656e7403010203904ef7ccd5a2b4c6c88880deb7de9af1d9a2a3020501016100",
    ),
    (
        "send",
        "01fbd095ffbc3107066e6f64652d31e4d095ffbc310106636c69656e7403010203904ef7ccd5a2b4c6c88880deb7de9af1d9a2a3020810056465762d31026d3104626f647901016b0176010263740003008827010167010909090909090909090909090909090909090909090909090909090909090909",
    ),
    (
        "send_default",
        "01fbd095ffbc3107066e6f64652d31e4d095ffbc310106636c69656e7403010203904ef7ccd5a2b4c6c88880deb7de9af1d9a2a3020800056465762d31026d3104626f647901016b017601026374000302010167010101010101010101010101010101010101010101010101010101010101010101",
    ),
    (
        "send_at",
        "01fbd095ffbc3107066e6f64652d31e4d095ffbc310106636c69656e7403010203904ef7ccd5a2b4c6c88880deb7de9af1d9a2a3020800056465762d31026d3104626f647901016b0176010263740003014d01016700",
    ),
    (
        "fb_settle",
        "01fbd095ffbc3107066e6f64652d31e4d095ffbc310106636c69656e7403010203904ef7ccd5a2b4c6c88880deb7de9af1d9a2a302080c01740100",
    ),
    ("out_rejected", "010802"),
    ("out_stored", "0100fbd095ffbc3107066e6f64652d31"),
    ("out_limits", "010b"),
    ("out_nothing", "010d"),
    (
        "out_device",
        "010c0c0000000000000000000000000000000000000000",
    ),
    ("reply", "01050603"),
    (
        "dead_letter",
        "01026d3104626f647900000104677a69700200632a030164",
    ),
    ("feedback", "01026d310104016400"),
    (
        "meta",
        "01010201fbd095ffbc3107066e6f64652d3103000000000000c0843d8080808004e807c0843de807c0843d8080808001",
    ),
];

/// One value of each kind, named.
fn samples() -> Vec<(&'static str, Vec<u8>)> {
    let stamp = Hlc::new(1_700_000_000_123, 7, "node-1");
    let request = RequestId {
        client: b"client".to_vec(),
        correlation: vec![1, 2, 3],
        remember_for_ms: 10_000,
        digest: 0x0123_4567_89ab_cdef_0011_2233_4455_6677,
    };
    let proposal = |mutation: Mutation, seed: Option<TokenSeed>| Proposal {
        stamp: stamp.clone(),
        wall_ms: 1_700_000_000_100,
        request: Some(request.clone()),
        mutation,
        token_seed: seed,
    };
    let send = SendMessage {
        device: b"dev-1".to_vec(),
        message_id: b"m1".to_vec(),
        body: b"body".to_vec(),
        properties: vec![("k".into(), "v".into())],
        content_type: Some(b"ct".to_vec()),
        content_encoding: None,
        ack: Ack::Full,
        expiry: Expiry::Ttl(5_000),
        generation: Some(b"g".to_vec()),
    };
    let message = Message {
        message_id: b"m1".to_vec(),
        body: b"body".to_vec(),
        properties: vec![],
        content_type: None,
        content_encoding: Some(b"gzip".to_vec()),
        ack: Ack::Negative,
        generation: None,
        expires_at_ms: 99,
        enqueued_ms: 42,
    };
    vec![
        (
            "set",
            codec::encode(&proposal(
                Mutation::Set {
                    key: b"k".to_vec(),
                    value: b"v".to_vec(),
                    condition: SetCondition::IfAbsentOrEqual,
                    expire_after_ms: Some(500),
                    fencing_token: Some(Hlc::new(1, 2, "c")),
                },
                None,
            )),
        ),
        (
            "limits",
            codec::encode(&proposal(Mutation::SetLimits(Limits::default()), None)),
        ),
        (
            "expire",
            codec::encode(&proposal(
                Mutation::Expire {
                    keys: vec![serde_bytes::ByteBuf::from(b"a".to_vec())],
                },
                None,
            )),
        ),
        (
            "send",
            codec::encode(&proposal(
                Mutation::Device(DeviceCommand::SendAndDeliver(send.clone())),
                Some(TokenSeed([9; 32])),
            )),
        ),
        (
            "send_default",
            codec::encode(&proposal(
                Mutation::Device(DeviceCommand::Send(SendMessage {
                    expiry: Expiry::Default,
                    ..send.clone()
                })),
                Some(TokenSeed([1; 32])),
            )),
        ),
        (
            "send_at",
            codec::encode(&proposal(
                Mutation::Device(DeviceCommand::Send(SendMessage {
                    expiry: Expiry::At(77),
                    ..send
                })),
                None,
            )),
        ),
        (
            "fb_settle",
            codec::encode(&proposal(
                Mutation::Device(DeviceCommand::SettleFeedback {
                    token: "t".into(),
                    settlement: FeedbackSettlement::Abandon,
                }),
                None,
            )),
        ),
        (
            "out_rejected",
            codec::encode(&Outcome::Rejected(Rejection::QuotaExceeded)),
        ),
        (
            "out_stored",
            codec::encode(&Outcome::Stored {
                version: stamp.clone(),
            }),
        ),
        ("out_limits", codec::encode(&Outcome::LimitsSet)),
        ("out_nothing", codec::encode(&Outcome::Nothing)),
        (
            "out_device",
            codec::encode(&Outcome::Device(Box::new(DeviceOutcome {
                result: DeviceResult::SettingsSet,
                counters: DeviceCounters::default(),
            }))),
        ),
        (
            "reply",
            codec::encode(&RememberedReply {
                expires_at_ms: 5,
                digest: 6,
                outcome: Outcome::Missing,
            }),
        ),
        (
            "dead_letter",
            codec::encode(&DeadLetter {
                message: message.clone(),
                delivery_count: 3,
                reason: DeadLetterReason::DeliveryCountExceeded,
                time_ms: 100,
            }),
        ),
        (
            "feedback",
            codec::encode(&FeedbackRecord {
                original_message_id: b"m1".to_vec(),
                time_ms: 1,
                status: FeedbackStatus::Purged,
                device: b"d".to_vec(),
                generation: None,
            }),
        ),
        (
            "meta",
            codec::encode(&KeyspaceMeta {
                keys: 1,
                bytes: 2,
                max_version: Some(stamp.clone()),
                time_floor_ms: 3,
                ..KeyspaceMeta::default()
            }),
        ),
    ]
}

/// The log entries and stored records keep their bytes: moving a type between crates or modules
/// (vocab, machine, keyspace, devicebound) must not change the replicated encoding. A change
/// here needs a new data format version, not a new constant.
#[test]
fn the_replicated_encoding_is_pinned() {
    let got = samples();
    assert_eq!(got.len(), PINNED.len(), "one pinned encoding per sample");
    for ((name, bytes), (pinned_name, pinned_hex)) in got.iter().zip(PINNED) {
        assert_eq!(name, pinned_name);
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(&hex, pinned_hex, "encoding of {name}");
    }
}
