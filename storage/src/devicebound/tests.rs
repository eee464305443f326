//! Unit tests of the device-bound semantics, one per rule of `shared/spec/devicebound.md` (and
//! of the rules the `apply` module documents where the spec is silent), driven through
//! [`crate::machine::Machine::apply`] on an in-memory map so the reply memory is in the path,
//! with the device queues' index kept across transactions as the consensus layer keeps it (and
//! checked against the index rebuilt from the rows after every one).

use std::collections::BTreeMap;

use super::*;
use crate::engine::{OrderedRead, Overlay, TxnWrites};
use crate::machine::{Carry, Machine, Mutation, Outcome, Proposal, RequestId};
use statestore_vocab::hlc::Hlc;

const T0: u64 = 1_700_000_000_000;
const DEV: &[u8] = b"dev-1";
const OTHER: &[u8] = b"dev-2";

struct Replica {
    map: BTreeMap<Vec<u8>, Vec<u8>>,
    index: DeviceIndex,
    wall_ms: u64,
    counter: u64,
    /// Mixed into every entry's token seed (replicas with another salt issue other secrets).
    seed_salt: u8,
}

impl Replica {
    fn new() -> Self {
        Replica {
            map: BTreeMap::new(),
            index: DeviceIndex::default(),
            wall_ms: T0,
            counter: 0,
            seed_salt: 0,
        }
    }

    fn with(settings: DeviceboundSettings) -> Self {
        let mut replica = Replica::new();
        assert_eq!(
            replica.run(DeviceCommand::SetSettings(settings)).result,
            DeviceResult::SettingsSet
        );
        replica
    }

    fn proposal(&mut self, command: DeviceCommand, request: Option<RequestId>) -> Proposal {
        self.counter += 1;
        Proposal {
            stamp: Hlc::new(self.wall_ms, self.counter, "n1"),
            wall_ms: self.wall_ms,
            request,
            mutation: Mutation::Device(command),
            token_seed: Some(TokenSeed(std::array::from_fn(|i| {
                self.counter.to_le_bytes()[i % 8] ^ self.seed_salt ^ (i as u8)
            }))),
        }
    }

    fn apply_proposal(&mut self, proposal: &Proposal) -> DeviceOutcome {
        let (outcome, writes) = apply_kept(&self.map, &mut self.index, proposal);
        for (k, w) in writes {
            match w.into_value() {
                Some(v) => self.map.insert(k, v),
                None => self.map.remove(&k),
            };
        }
        assert_eq!(
            self.index,
            DeviceIndex::load(&self.map).expect("load"),
            "the kept index is the index of the rows"
        );
        match outcome {
            Outcome::Device(outcome) => *outcome,
            other => panic!("a device command gave {other:?}"),
        }
    }

    fn run(&mut self, command: DeviceCommand) -> DeviceOutcome {
        let proposal = self.proposal(command, None);
        self.apply_proposal(&proposal)
    }

    fn advance(&mut self, ms: u64) {
        self.wall_ms += ms;
    }

    fn send(&mut self, device: &[u8], id: &str) -> DeviceResult {
        self.run(send(device, id, Ack::None, Expiry::Default))
            .result
    }

    fn deliver(&mut self, device: &[u8], max: u32) -> Vec<MessageDelivery> {
        match self
            .run(DeviceCommand::Deliver {
                device: device.to_vec(),
                max,
            })
            .result
        {
            DeviceResult::Delivered { messages } => messages,
            other => panic!("deliver gave {other:?}"),
        }
    }

    fn deliver_one(&mut self, device: &[u8]) -> MessageDelivery {
        let mut delivered = self.deliver(device, 1);
        assert_eq!(delivered.len(), 1, "one message delivered");
        delivered.remove(0)
    }

    fn settle(&mut self, device: &[u8], token: &str, settlement: Settlement) -> bool {
        match self
            .run(DeviceCommand::Settle {
                device: device.to_vec(),
                token: token.to_owned(),
                settlement,
            })
            .result
        {
            DeviceResult::Settled { settled } => settled,
            other => panic!("settle gave {other:?}"),
        }
    }

    fn stats(&self, device: &[u8]) -> QueueStats {
        self.index.queue_stats(device)
    }

    fn ids(&self, device: &[u8]) -> Vec<String> {
        read::messages(&self.map, device, usize::MAX)
            .expect("messages")
            .into_iter()
            .map(|(_, m)| String::from_utf8_lossy(&m.message.message_id).into_owned())
            .collect()
    }

    fn meta(&self) -> DeviceboundMeta {
        read::meta(&self.map).expect("meta")
    }

    fn pending(&self) -> Vec<FeedbackRecord> {
        read::pending_feedback(&self.map, usize::MAX).expect("pending")
    }

    fn cut(&mut self) -> u32 {
        match self.run(DeviceCommand::CutFeedbackBatch).result {
            DeviceResult::FeedbackCut { records } => records,
            other => panic!("cut gave {other:?}"),
        }
    }

    fn deliver_feedback(&mut self, max: u32) -> Vec<FeedbackDelivery> {
        match self.run(DeviceCommand::DeliverFeedback { max }).result {
            DeviceResult::FeedbackDelivered { batches } => batches,
            other => panic!("deliver feedback gave {other:?}"),
        }
    }

    fn settle_feedback(&mut self, token: &str, settlement: FeedbackSettlement) -> bool {
        match self
            .run(DeviceCommand::SettleFeedback {
                token: token.to_owned(),
                settlement,
            })
            .result
        {
            DeviceResult::Settled { settled } => settled,
            other => panic!("settle feedback gave {other:?}"),
        }
    }
}

fn send(device: &[u8], id: &str, ack: Ack, expiry: Expiry) -> DeviceCommand {
    DeviceCommand::Send(SendMessage {
        device: device.to_vec(),
        message_id: id.as_bytes().to_vec(),
        body: format!("body of {id}").into_bytes(),
        properties: vec![("b".into(), "2".into()), ("a".into(), "1".into())],
        content_type: Some(b"text/plain".to_vec()),
        content_encoding: None,
        ack,
        expiry,
        generation: Some(b"gen-7".to_vec()),
    })
}

fn id_of(delivery: &MessageDelivery) -> String {
    String::from_utf8_lossy(&delivery.message.message_id).into_owned()
}

fn sent() -> DeviceResult {
    DeviceResult::Sent {
        expires_at_ms: T0 + 3_600_000,
    }
}

#[test]
fn layout_prefixes_are_distinct_and_inside_the_digested_range() {
    let lower_case: Vec<u8> = crate::layout::Table::ALL
        .iter()
        .map(|t| t.prefix())
        .collect();
    let mut seen = std::collections::HashSet::new();
    for table in layout::DeviceTable::ALL {
        let prefix = table.prefix();
        assert!(seen.insert(prefix), "{table:?} prefix used twice");
        assert!(
            !lower_case.contains(&prefix),
            "{table:?} collides with a keyspace or store-wide table"
        );
        assert!(
            prefix < crate::layout::Table::ConsensusState.prefix(),
            "{table:?} must be covered by digests and snapshots"
        );
        let resident =
            crate::layout::Table::ReplyExpiry.prefix()..=crate::layout::Table::Replies.prefix();
        assert!(
            !resident.contains(&prefix),
            "{table:?} must not fall into the resident reply tables"
        );
    }
}

#[test]
fn lock_tokens_derive_from_the_entry_seed_the_same_on_every_replica() {
    // Two replicas applying the same entries issue the same tokens (apply draws nothing).
    let run = |salt: u8| {
        let mut r = Replica::new();
        r.seed_salt = salt;
        for i in 0..3 {
            assert_eq!(r.send(DEV, &format!("m{i}")), sent());
        }
        assert_eq!(r.send(OTHER, "m"), sent());
        let mut tokens: Vec<String> = r.deliver(DEV, 1).into_iter().map(|d| d.token).collect();
        tokens.extend(r.deliver(OTHER, 1).into_iter().map(|d| d.token));
        make_feedback(&mut r, 1);
        r.advance(15_000);
        assert_eq!(r.cut(), 1);
        tokens.extend(r.deliver_feedback(1).into_iter().map(|b| b.token));
        (tokens, r.map)
    };
    let (tokens, map) = run(0);
    let (again, same_map) = run(0);
    assert_eq!(tokens, again, "same entries, same tokens");
    assert!(map == same_map, "and the same rows");
    assert_eq!(
        tokens.len(),
        3,
        "two message deliveries and a batch: {tokens:?}"
    );
    for token in &tokens {
        assert_eq!(token.len(), token::TOKEN_BYTES, "{token}");
        assert!(
            token
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b'm' || b == b'f')
        );
    }
    assert_eq!(
        token::message_token_seq(&tokens[0]),
        Some(record::FIRST_TAIL_SEQ)
    );
    assert!(tokens[2].starts_with('f'));
    let (other, _) = run(1);
    for (token, other) in tokens.iter().zip(&other) {
        assert_eq!(token[..17], other[..17], "the same place");
        assert_ne!(token[17..], other[17..], "another seed, another secret");
    }
}

#[test]
fn a_token_with_the_right_place_and_a_guessed_secret_settles_nothing() {
    let mut r = Replica::new();
    assert_eq!(r.send(DEV, "m0"), sent());
    let delivery = r.deliver_one(DEV);
    let place = &delivery.token[..17];
    let guesses = [
        format!("{place}{}", "0".repeat(32)),
        format!("{place}{}", &delivery.token[18..]), // one digit short
        format!("{}0", &delivery.token[..48]),
        format!("{}1", &delivery.token[..48]),
        format!("{}0", delivery.token), // one digit long
        delivery.token.to_uppercase(),
    ];
    for guess in &guesses {
        if *guess == delivery.token {
            continue; // the one-in-sixteen case of the last-digit guesses
        }
        for settlement in [
            Settlement::Complete,
            Settlement::Abandon,
            Settlement::Reject,
        ] {
            assert!(!r.settle(DEV, guess, settlement), "{guess} settled");
        }
        assert_eq!(
            r.run(DeviceCommand::Undeliver {
                device: DEV.to_vec(),
                token: guess.clone(),
            })
            .result,
            DeviceResult::Undelivered { restored: false },
            "{guess} gave the delivery back"
        );
    }
    assert_eq!(r.stats(DEV).invisible, 1, "still locked");
    assert!(r.settle(DEV, &delivery.token, Settlement::Complete));
}

#[test]
fn section_4_feedback_complete_with_a_guessed_token_settles_nothing() {
    let mut r = Replica::new();
    make_feedback(&mut r, 1);
    r.advance(15_000);
    assert_eq!(r.cut(), 1);
    let batch = r.deliver_feedback(1).remove(0);
    let count = &batch.token[..17];
    for guess in [
        format!("{count}{}", "0".repeat(32)),
        format!("{}0", &batch.token[..48]),
        format!("{}1", &batch.token[..48]),
        // The next token of data format 6: `f` and the count.
        count.to_owned(),
    ] {
        if guess == batch.token {
            continue;
        }
        for settlement in [FeedbackSettlement::Complete, FeedbackSettlement::Abandon] {
            assert!(!r.settle_feedback(&guess, settlement), "{guess} settled");
        }
        assert_eq!(
            r.run(DeviceCommand::UndeliverFeedback {
                token: guess.clone()
            })
            .result,
            DeviceResult::Undelivered { restored: false }
        );
    }
    assert_eq!(r.meta().feedback_batches, 1);
    assert!(r.settle_feedback(&batch.token, FeedbackSettlement::Complete));
    assert_eq!(r.meta().feedback_batches, 0);
}

#[test]
fn section_1_send_keeps_everything_the_message_carries() {
    let mut r = Replica::new();
    let outcome = r.run(send(DEV, "m1", Ack::Full, Expiry::Default));
    assert_eq!(outcome.result, sent());
    assert_eq!(outcome.counters.enqueued, 1);
    let delivery = r.deliver_one(DEV);
    assert_eq!(delivery.device, DEV);
    assert_eq!(delivery.delivery_count, 1);
    assert_eq!(delivery.lock_expires_at_ms, T0 + 60_000);
    let message = &delivery.message;
    assert_eq!(message.message_id, b"m1");
    assert_eq!(message.body, b"body of m1");
    assert_eq!(
        message.properties,
        vec![
            ("b".to_owned(), "2".to_owned()),
            ("a".to_owned(), "1".to_owned())
        ],
        "application properties keep their order"
    );
    assert_eq!(message.content_type.as_deref(), Some(&b"text/plain"[..]));
    assert_eq!(message.content_encoding, None);
    assert_eq!(message.generation.as_deref(), Some(&b"gen-7"[..]));
    assert_eq!(message.ack, Ack::Full);
    assert_eq!(message.enqueued_ms, T0);
    assert!(delivery.token.is_ascii() && delivery.token.len() <= 64);
}

#[test]
fn section_1_queue_is_fifo_and_the_51st_send_fails() {
    let mut r = Replica::new();
    for i in 0..50 {
        assert_eq!(r.send(DEV, &format!("m{i}")), sent(), "send {i}");
    }
    assert_eq!(
        r.send(DEV, "m50"),
        DeviceResult::Rejected(DeviceRejection::QueueFull)
    );
    assert_eq!(r.stats(DEV).enqueued, 50);
    assert_eq!(
        r.send(OTHER, "x"),
        sent(),
        "another device's queue is its own"
    );
    // Invisible messages count against the depth too.
    let first = r.deliver_one(DEV);
    assert_eq!(id_of(&first), "m0");
    assert_eq!(
        r.send(DEV, "m50"),
        DeviceResult::Rejected(DeviceRejection::QueueFull)
    );
    assert!(
        r.deliver(DEV, 1).is_empty(),
        "window 1: m0 is still Invisible"
    );
    let mut token = first.token;
    for i in 1..50 {
        assert!(
            r.settle(DEV, &token, Settlement::Complete),
            "settle m{}",
            i - 1
        );
        let next = r.deliver_one(DEV);
        assert_eq!(id_of(&next), format!("m{i}"), "FIFO order");
        token = next.token;
    }
    assert!(r.settle(DEV, &token, Settlement::Complete));
    assert_eq!(r.stats(DEV), QueueStats::default());
}

#[test]
fn section_1_oversized_body_and_device_cap_are_refused_at_apply() {
    let mut r = Replica::with(DeviceboundSettings {
        max_message_bytes: 4,
        max_devices: 1,
        ..DeviceboundSettings::default()
    });
    assert_eq!(
        r.send(DEV, "m1"),
        DeviceResult::Rejected(DeviceRejection::MessageTooLarge)
    );
    let small = |device: &[u8]| {
        DeviceCommand::Send(SendMessage {
            device: device.to_vec(),
            message_id: b"s".to_vec(),
            body: b"1234".to_vec(),
            properties: Vec::new(),
            content_type: None,
            content_encoding: None,
            ack: Ack::None,
            expiry: Expiry::Default,
            generation: None,
        })
    };
    assert_eq!(r.run(small(DEV)).result, sent());
    assert_eq!(
        r.run(small(OTHER)).result,
        DeviceResult::Rejected(DeviceRejection::TooManyDevices)
    );
    assert_eq!(
        r.run(small(DEV)).result,
        sent(),
        "a device with state may grow"
    );
    assert_eq!(r.meta().devices, 1);
    r.run(DeviceCommand::Purge {
        device: DEV.to_vec(),
    });
    assert_eq!(
        r.meta().devices,
        0,
        "a purged device without dead letters has no state"
    );
    assert_eq!(r.run(small(OTHER)).result, sent(), "room again");
}

#[test]
fn section_1_ttl_expires_and_the_two_day_cap() {
    let mut r = Replica::new();
    let two_days = 2 * 24 * 3_600_000;
    let cases = [
        (Expiry::Ttl(5_000), T0 + 5_000),
        (Expiry::At(T0 + 7_000), T0 + 7_000),
        (Expiry::Default, T0 + 3_600_000),
        (Expiry::Ttl(two_days + 1), T0 + two_days),
        (Expiry::At(u64::MAX), T0 + two_days),
        (Expiry::Ttl(u64::MAX), T0 + two_days),
    ];
    for (i, (expiry, expected)) in cases.into_iter().enumerate() {
        assert_eq!(
            r.run(send(DEV, &format!("m{i}"), Ack::None, expiry)).result,
            DeviceResult::Sent {
                expires_at_ms: expected
            },
            "{expiry:?}"
        );
    }
}

#[test]
fn section_1_expired_messages_are_dead_lettered_by_sweep_and_on_delivery() {
    let mut r = Replica::new();
    r.run(send(DEV, "short", Ack::Negative, Expiry::Ttl(1_000)));
    r.run(send(DEV, "long", Ack::None, Expiry::Ttl(10_000)));
    r.run(send(OTHER, "other", Ack::None, Expiry::Ttl(1_000)));
    assert_eq!(r.index.next_message_expiry(), Some(T0 + 1_000));
    r.advance(999);
    let nothing = r.run(DeviceCommand::ExpireMessages { max: 10 });
    assert_eq!(nothing.result, DeviceResult::Expired { count: 0 });
    r.advance(1);
    // Delivery finds "short" expired on the way and delivers "long" instead.
    let delivered = r.deliver(DEV, 1);
    assert_eq!(delivered.iter().map(id_of).collect::<Vec<_>>(), ["long"]);
    assert_eq!(r.stats(DEV).dead_lettered, 1);
    let letters = read::dead_letters(&r.map, DEV, 10).expect("read");
    assert_eq!(letters[0].reason, DeadLetterReason::Expired);
    assert_eq!(letters[0].time_ms, T0 + 1_000);
    assert_eq!(r.pending()[0].status, FeedbackStatus::Expired);
    // The sweep is bounded and takes the earliest first.
    let swept = r.run(DeviceCommand::ExpireMessages { max: 1 });
    assert_eq!(swept.result, DeviceResult::Expired { count: 1 });
    assert_eq!(swept.counters.expired, 1);
    assert_eq!(r.stats(OTHER).dead_lettered, 1);
    // An Invisible message that expires is dead-lettered too and its token stops settling.
    r.advance(9_000);
    let token = delivered[0].token.clone();
    let swept = r.run(DeviceCommand::ExpireMessages { max: 10 });
    assert_eq!(swept.result, DeviceResult::Expired { count: 1 });
    assert!(!r.settle(DEV, &token, Settlement::Complete));
    assert_eq!(
        r.stats(DEV),
        QueueStats {
            enqueued: 0,
            invisible: 0,
            dead_lettered: 2,
            oldest_enqueued_ms: None
        }
    );
    assert_eq!(r.index.next_message_expiry(), None);
}

#[test]
fn section_1_delivery_count_reaching_the_max_dead_letters() {
    let mut r = Replica::with(DeviceboundSettings {
        max_delivery_count: 3,
        ..DeviceboundSettings::default()
    });
    r.run(send(DEV, "m", Ack::Full, Expiry::Default));
    r.send(DEV, "next");
    for count in 1..=3 {
        let delivery = r.deliver_one(DEV);
        assert_eq!(id_of(&delivery), "m");
        assert_eq!(delivery.delivery_count, count);
        assert!(r.settle(DEV, &delivery.token, Settlement::Abandon));
    }
    let outcome = r.run(DeviceCommand::Deliver {
        device: DEV.to_vec(),
        max: 1,
    });
    match &outcome.result {
        DeviceResult::Delivered { messages } => {
            assert_eq!(messages.iter().map(id_of).collect::<Vec<_>>(), ["next"]);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(outcome.counters.dead_lettered, 1);
    let letters = read::dead_letters(&r.map, DEV, 10).expect("read");
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].reason, DeadLetterReason::DeliveryCountExceeded);
    assert_eq!(letters[0].delivery_count, 3);
    assert_eq!(r.pending()[0].status, FeedbackStatus::DeliveryCountExceeded);
}

#[test]
fn section_1_lock_expiry_redelivers_with_a_new_token_and_the_old_one_no_longer_settles() {
    let mut r = Replica::new();
    r.send(DEV, "m");
    let first = r.deliver_one(DEV);
    assert!(r.deliver(DEV, 1).is_empty(), "window 1 is full");
    assert_eq!(r.index.next_lock_expiry(), Some(T0 + 60_000));
    r.advance(59_999);
    assert_eq!(
        r.run(DeviceCommand::ExpireLocks { max: 10 }).result,
        DeviceResult::LocksExpired { count: 0 }
    );
    r.advance(1);
    assert!(
        !r.settle(DEV, &first.token, Settlement::Complete),
        "an expired lock does not settle even before the sweep"
    );
    let swept = r.run(DeviceCommand::ExpireLocks { max: 10 });
    assert_eq!(swept.result, DeviceResult::LocksExpired { count: 1 });
    assert_eq!(swept.counters.lock_expiries, 1);
    assert_eq!(r.stats(DEV).enqueued, 1);
    let second = r.deliver_one(DEV);
    assert_eq!(second.delivery_count, 2);
    assert_ne!(second.token, first.token);
    assert!(!r.settle(DEV, &first.token, Settlement::Complete));
    assert!(r.settle(DEV, &second.token, Settlement::Complete));
    assert!(
        !r.settle(DEV, &second.token, Settlement::Complete),
        "settles once"
    );
    assert_eq!(r.stats(DEV), QueueStats::default());
}

#[test]
fn section_3_abandon_puts_the_message_at_the_head() {
    let mut r = Replica::with(DeviceboundSettings {
        device_window: 2,
        ..DeviceboundSettings::default()
    });
    for id in ["a", "b", "c"] {
        r.send(DEV, id);
    }
    let delivered = r.deliver(DEV, 5);
    assert_eq!(delivered.iter().map(id_of).collect::<Vec<_>>(), ["a", "b"]);
    assert!(r.settle(DEV, &delivered[1].token, Settlement::Abandon));
    assert_eq!(r.ids(DEV), ["b", "a", "c"], "b goes in front of everything");
    let again = r.deliver_one(DEV);
    assert_eq!(id_of(&again), "b");
    assert_eq!(again.delivery_count, 2, "abandon keeps the count");
}

#[test]
fn section_3_reject_dead_letters_and_complete_gives_success_feedback() {
    let mut r = Replica::new();
    r.run(send(DEV, "rejected", Ack::Negative, Expiry::Default));
    r.run(send(DEV, "completed", Ack::Positive, Expiry::Default));
    let d = r.deliver_one(DEV);
    let outcome = r.run(DeviceCommand::Settle {
        device: DEV.to_vec(),
        token: d.token.clone(),
        settlement: Settlement::Reject,
    });
    assert_eq!(outcome.result, DeviceResult::Settled { settled: true });
    assert_eq!(
        (outcome.counters.rejected, outcome.counters.dead_lettered),
        (1, 1)
    );
    let d = r.deliver_one(DEV);
    assert!(r.settle(DEV, &d.token, Settlement::Complete));
    let letters = read::dead_letters(&r.map, DEV, 10).expect("read");
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].message.message_id, b"rejected");
    assert_eq!(letters[0].reason, DeadLetterReason::Rejected);
    let statuses: Vec<_> = r.pending().iter().map(|f| f.status).collect();
    assert_eq!(
        statuses,
        [FeedbackStatus::Rejected, FeedbackStatus::Success]
    );
    let record = &r.pending()[0];
    assert_eq!(record.device, DEV);
    assert_eq!(record.original_message_id, b"rejected");
    assert_eq!(record.generation.as_deref(), Some(&b"gen-7"[..]));
}

#[test]
fn section_3_a_device_cannot_settle_another_devices_message() {
    let mut r = Replica::new();
    r.send(DEV, "m");
    let d = r.deliver_one(DEV);
    for settlement in [
        Settlement::Complete,
        Settlement::Abandon,
        Settlement::Reject,
    ] {
        assert!(!r.settle(OTHER, &d.token, settlement));
    }
    assert_eq!(
        r.run(DeviceCommand::Undeliver {
            device: OTHER.to_vec(),
            token: d.token.clone()
        })
        .result,
        DeviceResult::Undelivered { restored: false }
    );
    assert!(!r.settle(DEV, "m-not-a-token", Settlement::Complete));
    assert_eq!(r.stats(DEV).invisible, 1, "untouched");
    assert!(r.settle(DEV, &d.token, Settlement::Complete));
}

#[test]
fn section_3_undeliver_restores_place_and_count() {
    let mut r = Replica::with(DeviceboundSettings {
        device_window: 3,
        ..DeviceboundSettings::default()
    });
    for id in ["a", "b", "c"] {
        r.send(DEV, id);
    }
    let delivered = r.deliver(DEV, 2);
    let outcome = r.run(DeviceCommand::Undeliver {
        device: DEV.to_vec(),
        token: delivered[0].token.clone(),
    });
    assert_eq!(outcome.result, DeviceResult::Undelivered { restored: true });
    assert_eq!(outcome.counters.undelivered, 1);
    assert!(!r.settle(DEV, &delivered[0].token, Settlement::Complete));
    assert_eq!(r.ids(DEV), ["a", "b", "c"]);
    let again = r.deliver(DEV, 5);
    assert_eq!(again.iter().map(id_of).collect::<Vec<_>>(), ["a", "c"]);
    assert_eq!(
        again[0].delivery_count, 1,
        "the undelivered attempt was given back"
    );
}

#[test]
fn section_3_receive_pulls_one_or_none() {
    let mut r = Replica::new();
    let receive = |r: &mut Replica| match r
        .run(DeviceCommand::Receive {
            device: DEV.to_vec(),
        })
        .result
    {
        DeviceResult::Received(message) => message,
        other => panic!("{other:?}"),
    };
    assert!(receive(&mut r).is_none());
    r.send(DEV, "a");
    r.send(DEV, "b");
    let got = receive(&mut r).expect("a message");
    assert_eq!(id_of(&got), "a");
    // A pull is not held back by the push window (1): "b" is the head Enqueued message.
    let next = receive(&mut r).expect("the next Enqueued message");
    assert_eq!(id_of(&next), "b");
    assert!(receive(&mut r).is_none(), "none Enqueued");
    assert!(r.settle(DEV, &got.token, Settlement::Complete));
    assert!(r.settle(DEV, &next.token, Settlement::Abandon));
    assert_eq!(receive(&mut r).map(|m| id_of(&m)).as_deref(), Some("b"));
}

#[test]
fn section_2_queue_stats_report_counts_and_the_oldest_enqueued_time() {
    let mut r = Replica::with(DeviceboundSettings {
        device_window: 2,
        ..DeviceboundSettings::default()
    });
    assert_eq!(r.stats(DEV).oldest_enqueued_or_minus_one(), -1);
    r.send(DEV, "a");
    r.advance(10);
    r.send(DEV, "b");
    r.advance(10);
    r.send(DEV, "c");
    assert_eq!(r.stats(DEV).oldest_enqueued_ms, Some(T0));
    let d = r.deliver(DEV, 2);
    assert_eq!(
        r.stats(DEV),
        QueueStats {
            enqueued: 1,
            invisible: 2,
            dead_lettered: 0,
            oldest_enqueued_ms: Some(T0 + 20)
        }
    );
    assert!(r.settle(DEV, &d[1].token, Settlement::Abandon));
    assert_eq!(r.stats(DEV).oldest_enqueued_ms, Some(T0 + 10));
}

#[test]
fn section_2_purge_and_forget_count_what_they_remove() {
    let mut r = Replica::new();
    r.run(send(DEV, "neg", Ack::Negative, Expiry::Default));
    r.run(send(DEV, "pos", Ack::Positive, Expiry::Default));
    r.run(send(DEV, "full", Ack::Full, Expiry::Default));
    r.deliver_one(DEV);
    let purged = r.run(DeviceCommand::Purge {
        device: DEV.to_vec(),
    });
    assert_eq!(purged.result, DeviceResult::Purged { messages: 3 });
    assert_eq!(purged.counters.purged, 3);
    let purged_ids: Vec<_> = r
        .pending()
        .iter()
        .map(|f| (f.original_message_id.clone(), f.status))
        .collect();
    assert_eq!(
        purged_ids,
        [
            (b"neg".to_vec(), FeedbackStatus::Purged),
            (b"full".to_vec(), FeedbackStatus::Purged)
        ]
    );
    assert_eq!(r.index.next_lock_expiry(), None);
    assert_eq!(
        r.run(DeviceCommand::Purge {
            device: DEV.to_vec()
        })
        .result,
        DeviceResult::Purged { messages: 0 }
    );

    // FORGET: queue, dead letters and the waiting feedback about the device; others stay.
    r.run(send(DEV, "q1", Ack::Negative, Expiry::Default));
    r.run(send(DEV, "q2", Ack::None, Expiry::Default));
    let d = r.deliver_one(DEV);
    assert!(r.settle(DEV, &d.token, Settlement::Reject));
    r.run(send(OTHER, "o", Ack::Negative, Expiry::Default));
    r.run(DeviceCommand::Purge {
        device: OTHER.to_vec(),
    });
    let forgot = r.run(DeviceCommand::Forget {
        device: DEV.to_vec(),
    });
    assert_eq!(
        forgot.result,
        DeviceResult::Forgot {
            messages: 1,
            dead_letters: 1,
            feedback_records: 3
        }
    );
    assert_eq!(r.stats(DEV), QueueStats::default());
    let left: Vec<_> = r.pending().iter().map(|f| f.device.clone()).collect();
    assert_eq!(left, [OTHER.to_vec()]);
    assert_eq!(r.meta().pending_feedback, 1);
    assert_eq!(r.meta().devices, 0);
    assert_eq!(r.meta().messages, 0);
    assert_eq!(r.meta().dead_letters, 0);
}

#[test]
fn section_1_dead_letter_cap_drops_the_oldest() {
    let mut r = Replica::with(DeviceboundSettings {
        max_dead_letters_per_device: 2,
        ..DeviceboundSettings::default()
    });
    for id in ["a", "b", "c"] {
        r.send(DEV, id);
        let d = r.deliver_one(DEV);
        assert!(r.settle(DEV, &d.token, Settlement::Reject));
    }
    let letters = read::dead_letters(&r.map, DEV, 10).expect("read");
    let ids: Vec<_> = letters
        .iter()
        .map(|l| l.message.message_id.clone())
        .collect();
    assert_eq!(ids, [b"b".to_vec(), b"c".to_vec()]);
    assert_eq!(r.stats(DEV).dead_lettered, 2);
    assert_eq!(r.meta().dead_letters_dropped, 1);
    assert_eq!(
        read::dead_letters(&r.map, DEV, 1).expect("read").len(),
        1,
        "COUNT"
    );
}

#[test]
fn section_4_feedback_records_follow_the_ack_mode() {
    // (ack, completed gives Success, rejected gives Rejected)
    let cases = [
        (Ack::None, false, false),
        (Ack::Positive, true, false),
        (Ack::Negative, false, true),
        (Ack::Full, true, true),
    ];
    for (ack, on_success, on_failure) in cases {
        let mut r = Replica::new();
        r.run(send(DEV, "ok", ack, Expiry::Default));
        r.run(send(DEV, "no", ack, Expiry::Default));
        let d = r.deliver_one(DEV);
        assert!(r.settle(DEV, &d.token, Settlement::Complete));
        let d = r.deliver_one(DEV);
        assert!(r.settle(DEV, &d.token, Settlement::Reject));
        let statuses: Vec<_> = r.pending().iter().map(|f| f.status).collect();
        let mut expected = Vec::new();
        if on_success {
            expected.push(FeedbackStatus::Success);
        }
        if on_failure {
            expected.push(FeedbackStatus::Rejected);
        }
        assert_eq!(statuses, expected, "{ack:?}");
        assert!(r.pending().iter().all(|f| f.time_ms == T0));
    }
}

#[test]
fn section_4_pending_feedback_is_capped_dropping_the_oldest() {
    let mut r = Replica::with(DeviceboundSettings {
        max_pending_feedback_records: 2,
        ..DeviceboundSettings::default()
    });
    for id in ["a", "b", "c"] {
        r.run(send(DEV, id, Ack::Negative, Expiry::Default));
    }
    let purged = r.run(DeviceCommand::Purge {
        device: DEV.to_vec(),
    });
    assert_eq!(purged.counters.feedback_records, 3);
    assert_eq!(purged.counters.feedback_records_dropped, 1);
    let ids: Vec<_> = r
        .pending()
        .iter()
        .map(|f| f.original_message_id.clone())
        .collect();
    assert_eq!(ids, [b"b".to_vec(), b"c".to_vec()]);
    assert_eq!(r.meta().feedback_records_dropped, 1);
}

fn make_feedback(r: &mut Replica, n: usize) {
    for i in 0..n {
        let device = format!("fb-{}", i / 50);
        r.run(send(
            device.as_bytes(),
            &format!("m{i}"),
            Ack::Positive,
            Expiry::Default,
        ));
        let d = r.deliver_one(device.as_bytes());
        assert!(r.settle(device.as_bytes(), &d.token, Settlement::Complete));
    }
}

#[test]
fn section_4_a_batch_is_cut_at_64_records_or_15_s_after_the_last_cut() {
    let mut r = Replica::new();
    assert_eq!(r.cut(), 0, "nothing waits");
    make_feedback(&mut r, 1);
    assert_eq!(read::next_feedback_cut(&r.meta()), Some(15_000));
    assert_eq!(r.cut(), 1, "never cut before: the last cut is long past");
    make_feedback(&mut r, 63);
    r.advance(14_999);
    assert_eq!(r.cut(), 0, "63 records, 15 s not passed");
    make_feedback(&mut r, 2);
    assert_eq!(read::next_feedback_cut(&r.meta()), Some(0));
    let outcome = r.run(DeviceCommand::CutFeedbackBatch);
    assert_eq!(outcome.result, DeviceResult::FeedbackCut { records: 64 });
    assert_eq!(outcome.counters.feedback_batches_cut, 1);
    assert_eq!(r.meta().pending_feedback, 1);
    assert_eq!(r.cut(), 0, "one record, just cut");
    r.advance(15_000);
    assert_eq!(r.cut(), 1);
    let batches = read::feedback_batches(&r.map, 10).expect("read");
    let sizes: Vec<_> = batches.iter().map(|(_, b)| b.records.len()).collect();
    assert_eq!(sizes, [1, 64, 1]);
    assert_eq!(batches[1].1.records[0].original_message_id, b"m0");
    assert_eq!(batches[1].1.cut_ms, T0 + 14_999);
}

#[test]
fn section_4_batches_lock_redeliver_settle_and_expire() {
    let mut r = Replica::with(DeviceboundSettings {
        feedback_max_delivery_count: 2,
        ..DeviceboundSettings::default()
    });
    make_feedback(&mut r, 2);
    assert_eq!(r.cut(), 2);
    assert!(read::feedback_deliverable(&r.map).expect("read"));
    let first = r.deliver_feedback(10);
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].delivery_count, 1);
    assert_eq!(first[0].lock_expires_at_ms, T0 + 60_000);
    assert_eq!(first[0].expires_at_ms, T0 + 3_600_000);
    assert!(r.deliver_feedback(10).is_empty(), "locked");
    // Undeliver (PUBACK 0x10) gives the attempt back.
    assert_eq!(
        r.run(DeviceCommand::UndeliverFeedback {
            token: first[0].token.clone()
        })
        .result,
        DeviceResult::Undelivered { restored: true }
    );
    let second = r.deliver_feedback(10);
    assert_eq!(second[0].delivery_count, 1);
    // Lock expiry: published again with a new token; the old one does not settle.
    r.advance(60_000);
    assert!(!r.settle_feedback(&second[0].token, FeedbackSettlement::Complete));
    let swept = r.run(DeviceCommand::ExpireFeedbackLocks { max: 10 });
    assert_eq!(swept.result, DeviceResult::LocksExpired { count: 1 });
    assert_eq!(swept.counters.feedback_batches_redelivered, 1);
    let third = r.deliver_feedback(10);
    assert_eq!(third[0].delivery_count, 2);
    assert_ne!(third[0].token, second[0].token);
    assert!(r.settle_feedback(&third[0].token, FeedbackSettlement::Abandon));
    // Max delivery count reached: the next delivery drops it.
    let outcome = r.run(DeviceCommand::DeliverFeedback { max: 10 });
    assert_eq!(
        outcome.result,
        DeviceResult::FeedbackDelivered {
            batches: Vec::new()
        }
    );
    assert_eq!(outcome.counters.feedback_batches_dropped, 1);
    assert_eq!(r.meta().feedback_batches, 0);

    // Complete removes; TTL drops.
    make_feedback(&mut r, 1);
    r.advance(15_000);
    assert_eq!(r.cut(), 1);
    let d = r.deliver_feedback(1);
    assert!(r.settle_feedback(&d[0].token, FeedbackSettlement::Complete));
    assert!(!r.settle_feedback(&d[0].token, FeedbackSettlement::Complete));
    assert_eq!(r.meta().feedback_batches, 0);
    make_feedback(&mut r, 1);
    r.advance(15_000);
    assert_eq!(r.cut(), 1);
    assert_eq!(
        read::next_feedback_expiry(&r.map).expect("read"),
        Some(r.wall_ms + 3_600_000)
    );
    r.advance(3_600_000);
    let expired = r.run(DeviceCommand::ExpireFeedbackBatches { max: 10 });
    assert_eq!(expired.result, DeviceResult::Expired { count: 1 });
    assert_eq!(r.meta().feedback_batches, 0);
    assert!(!read::feedback_deliverable(&r.map).expect("read"));
}

#[test]
fn section_4_the_batch_cap_drops_the_oldest_batch() {
    let mut r = Replica::with(DeviceboundSettings {
        max_feedback_batches: 1,
        ..DeviceboundSettings::default()
    });
    make_feedback(&mut r, 1);
    assert_eq!(r.cut(), 1);
    make_feedback(&mut r, 1);
    r.advance(15_000);
    let outcome = r.run(DeviceCommand::CutFeedbackBatch);
    assert_eq!(outcome.counters.feedback_batches_dropped, 1);
    let batches = read::feedback_batches(&r.map, 10).expect("read");
    assert_eq!(batches.len(), 1);
    assert_eq!(batches[0].1.records[0].original_message_id, b"m0");
    assert_eq!(batches[0].1.cut_ms, T0 + 15_000, "the newer batch stays");
}

#[test]
fn deliverable_devices_are_found_through_their_index() {
    let mut r = Replica::with(DeviceboundSettings {
        device_window: 2,
        ..DeviceboundSettings::default()
    });
    for device in [&b"d1"[..], b"d2", b"d3"] {
        r.send(device, "a");
        r.send(device, "b");
    }
    r.deliver(b"d2", 2);
    r.deliver(b"d3", 1);
    let all = r.index.deliverable_devices(2, None, 10);
    let names: Vec<_> = all.iter().map(|d| d.device.clone()).collect();
    assert_eq!(
        names,
        [b"d1".to_vec(), b"d3".to_vec()],
        "d2's window is full"
    );
    let page = r.index.deliverable_devices(2, Some(&all[0]), 10);
    assert_eq!(page, all[1..]);
    let strict = r.index.deliverable_devices(1, None, 10);
    assert_eq!(strict.len(), 1, "with a window of 1 only d1 could take one");
}

#[test]
fn retried_send_takes_effect_once_and_counts_nothing_the_second_time() {
    let mut r = Replica::new();
    let request = RequestId {
        client: b"backend".to_vec(),
        correlation: b"c-1".to_vec(),
        remember_for_ms: 10_000,
        digest: 0,
    };
    let proposal = r.proposal(send(DEV, "m", Ack::None, Expiry::Default), Some(request));
    let first = r.apply_proposal(&proposal);
    assert_eq!(first.result, sent());
    assert_eq!(first.counters.enqueued, 1);
    let retry = r.apply_proposal(&proposal);
    assert_eq!(retry.result, first.result, "the remembered reply");
    assert_eq!(
        retry.counters,
        DeviceCounters::default(),
        "nothing happened again"
    );
    assert_eq!(r.stats(DEV).enqueued, 1, "enqueued once");
}

/// A victim's retry after an impostor took its reply slot is executed again
/// (`machine::replies`), so the queue holds two equal messages; each keeps its own lock, and the
/// lock sweep frees only the one whose lock is due (the model once told them apart by content).
#[test]
fn section_1_lock_expiry_frees_only_the_due_one_of_two_equal_messages() {
    let mut r = Replica::with(DeviceboundSettings {
        device_window: 3,
        ..DeviceboundSettings::default()
    });
    let victim = RequestId {
        client: b"backend".to_vec(),
        correlation: b"c-1".to_vec(),
        remember_for_ms: 10_000,
        digest: 0,
    };
    let original = r.proposal(
        send(DEV, "m", Ack::None, Expiry::Default),
        Some(victim.clone()),
    );
    assert_eq!(r.apply_proposal(&original).result, sent());
    let first = r.deliver_one(DEV);
    let impostor = r.proposal(
        send(DEV, "forged", Ack::None, Expiry::Default),
        Some(RequestId {
            digest: 1,
            ..victim
        }),
    );
    assert_eq!(r.apply_proposal(&impostor).result, sent());
    let retry = r.apply_proposal(&original);
    assert_eq!(retry.result, sent());
    assert_eq!(
        retry.counters.enqueued, 1,
        "executed again: an equal message"
    );
    assert_eq!(r.ids(DEV), ["m", "forged", "m"]);

    r.advance(1_000);
    let later = r.deliver(DEV, 3);
    assert_eq!(later.iter().map(id_of).collect::<Vec<_>>(), ["forged", "m"]);
    assert_eq!(
        later[1].message, first.message,
        "the two messages are equal"
    );
    assert_eq!(r.stats(DEV).invisible, 3);

    r.advance(59_000);
    assert_eq!(
        r.run(DeviceCommand::ExpireLocks { max: 10 }).result,
        DeviceResult::LocksExpired { count: 1 }
    );
    assert_eq!(
        (r.stats(DEV).enqueued, r.stats(DEV).invisible),
        (1, 2),
        "only the first delivery's lock was due"
    );
    assert!(!r.settle(DEV, &first.token, Settlement::Complete));
    assert!(r.settle(DEV, &later[1].token, Settlement::Complete));
    let again = r.deliver_one(DEV);
    assert_eq!((id_of(&again), again.delivery_count), ("m".to_owned(), 2));
}

#[test]
fn tokens_are_unique_across_devices_forget_and_feedback() {
    let mut r = Replica::new();
    let mut tokens = std::collections::HashSet::new();
    for round in 0..3 {
        r.send(DEV, "m");
        let d = r.deliver_one(DEV);
        assert!(tokens.insert(d.token.clone()), "round {round}");
        r.run(DeviceCommand::Forget {
            device: DEV.to_vec(),
        });
    }
    make_feedback(&mut r, 1);
    assert_eq!(r.cut(), 1);
    let batch = r.deliver_feedback(1);
    assert!(tokens.insert(batch[0].token.clone()));
    assert!(tokens.iter().all(|t| t.is_ascii() && t.len() <= 64));
}

/// The device-bound rows of a replica (its tables and meta record), without the keyspace's.
fn device_rows(r: &Replica) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let meta = layout::meta_key();
    r.map
        .iter()
        .filter(|(key, _)| {
            **key == meta
                || layout::DeviceTable::ALL
                    .iter()
                    .any(|table| key.first() == Some(&table.prefix()))
        })
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect()
}

/// A replica with `locked` messages delivered and `waiting` more Enqueued behind them.
fn queued_replica(settings: DeviceboundSettings, locked: usize, waiting: usize) -> Replica {
    let mut r = Replica::with(settings);
    for i in 0..locked {
        assert_eq!(r.send(DEV, &format!("locked-{i}")), sent());
    }
    if locked > 0 {
        let max = u32::try_from(locked).expect("a small count");
        assert_eq!(r.deliver(DEV, max).len(), locked);
    }
    for i in 0..waiting {
        assert_eq!(r.send(DEV, &format!("waiting-{i}")), sent());
    }
    r.advance(5);
    r
}

/// The counters a device-bound test compares, as one tuple.
fn counted(c: &DeviceCounters) -> (u32, u32, u32, u32, u32) {
    (
        c.enqueued,
        c.delivered,
        c.dead_lettered,
        c.expired,
        c.feedback_records,
    )
}

#[test]
fn send_and_deliver_writes_what_send_then_deliver_write() {
    // (locked, waiting, device_window, max_delivery_count, expiry of the new message): the
    // shortcut that stores the message locked at once must not be told apart from the two
    // steps, where it applies and where it must not.
    let cases: [(usize, usize, u32, u32, Expiry); 8] = [
        (0, 0, 1, 10, Expiry::Default),
        (1, 0, 1, 10, Expiry::Default),
        (1, 0, 2, 10, Expiry::Default),
        (1, 1, 1, 10, Expiry::Default),
        (1, 1, 2, 10, Expiry::Default),
        (0, 0, 1, 10, Expiry::At(T0 - 1)),
        (0, 0, 1, 0, Expiry::Default),
        (1_024, 0, 2_000, 10, Expiry::Default),
    ];
    for (locked, waiting, window, max_delivery_count, expiry) in cases {
        let settings = DeviceboundSettings {
            device_window: window,
            max_delivery_count,
            max_queue_depth: 2_000,
            ..DeviceboundSettings::default()
        };
        let mut one_step = queued_replica(settings, locked, waiting);
        let mut two_steps = queued_replica(settings, locked, waiting);
        let DeviceCommand::Send(message) = send(DEV, "new", Ack::Full, expiry) else {
            unreachable!("send builds a Send")
        };
        let combined = one_step.run(DeviceCommand::SendAndDeliver(message.clone()));
        let sent_first = two_steps.run(DeviceCommand::Send(message));
        let DeviceResult::Sent { expires_at_ms } = sent_first.result else {
            panic!("the SEND was refused")
        };
        // The Deliver carries the seed the combined entry carried (the seed follows the
        // counter), so both issue the same tokens.
        two_steps.counter -= 1;
        let delivered = two_steps.run(DeviceCommand::Deliver {
            device: DEV.to_vec(),
            max: u32::MAX,
        });
        let DeviceResult::Delivered { messages } = delivered.result else {
            panic!("deliver gave {:?}", delivered.result)
        };
        let case = format!(
            "locked {locked}, waiting {waiting}, window {window}, max deliveries \
             {max_delivery_count}, {expiry:?}"
        );
        assert_eq!(
            combined.result,
            DeviceResult::SentAndDelivered {
                expires_at_ms,
                messages
            },
            "{case}"
        );
        let (a, b) = (counted(&sent_first.counters), counted(&delivered.counters));
        assert_eq!(
            counted(&combined.counters),
            (a.0 + b.0, a.1 + b.1, a.2 + b.2, a.3 + b.3, a.4 + b.4),
            "{case}"
        );
        assert_eq!(device_rows(&one_step), device_rows(&two_steps), "{case}");
    }
}

/// Applies `proposal` on `map` through a machine with the kept `index`; returns the outcome
/// and the transaction's writes (`map` is left for the caller to update).
fn apply_kept(
    map: &impl OrderedRead,
    index: &mut DeviceIndex,
    proposal: &Proposal,
) -> (Outcome, TxnWrites) {
    let mut txn = Overlay::new(map);
    let mut machine = Machine::open_with_index(&mut txn, &Carry::default(), index).expect("open");
    let applied = machine.apply(proposal).expect("apply");
    machine.finish();
    (applied.outcome, txn.into_txn_writes())
}

/// Applies `command` on a base that counts reads; returns the result, the writes, and the
/// reads (gets and range scans) of the device-bound queue tables that apply made (debug builds
/// also check each created row's absence with a read of its own: those are not counted).
fn apply_counting_queue_reads(
    r: &mut Replica,
    command: DeviceCommand,
) -> (DeviceResult, TxnWrites, usize) {
    let proposal = r.proposal(command, None);
    let base = crate::machine::tests::Counting::new(&r.map);
    let (outcome, writes) = apply_kept(&base, &mut r.index, &proposal);
    let queue_tables = [
        layout::DeviceTable::Messages.prefix(),
        layout::DeviceTable::Devices.prefix(),
    ];
    let reads: usize = queue_tables
        .iter()
        .map(|&table| base.scans_with_prefix(table) + base.gets_with_prefix(table))
        .sum();
    let create_checks = if cfg!(debug_assertions) {
        writes
            .iter()
            .filter(|(key, write)| {
                queue_tables.contains(&key[0])
                    && matches!(write, crate::engine::TxnWrite::Create(_))
            })
            .count()
    } else {
        0
    };
    let reads = reads - create_checks;
    for (k, w) in writes.clone() {
        match w.into_value() {
            Some(v) => r.map.insert(k, v),
            None => r.map.remove(&k),
        };
    }
    let Outcome::Device(outcome) = outcome else {
        panic!("a device command gave {outcome:?}")
    };
    (outcome.result, writes, reads)
}

/// The writes of the device-bound queue tables (device rows, message rows), by table.
fn queue_writes(writes: &TxnWrites) -> Vec<(u8, &'static str)> {
    writes
        .iter()
        .filter(|(key, _)| {
            [
                layout::DeviceTable::Messages.prefix(),
                layout::DeviceTable::Devices.prefix(),
            ]
            .contains(&key[0])
        })
        .map(|(key, write)| {
            let kind = match write {
                crate::engine::TxnWrite::Put(_) => "put",
                crate::engine::TxnWrite::Create(_) => "create",
                crate::engine::TxnWrite::Remove => "remove",
            };
            (key[0], kind)
        })
        .collect()
}

#[test]
fn a_message_to_an_idle_device_and_its_completion_read_no_row() {
    let (messages, devices) = (
        layout::DeviceTable::Messages.prefix(),
        layout::DeviceTable::Devices.prefix(),
    );
    let DeviceCommand::Send(message) = send(DEV, "m1", Ack::None, Expiry::Default) else {
        unreachable!("send builds a Send")
    };
    // An idle device: the SEND writes the message row and the device row, reads nothing, and
    // delivers the message with the content it was sent with.
    let mut r = Replica::new();
    let (result, writes, reads) =
        apply_counting_queue_reads(&mut r, DeviceCommand::SendAndDeliver(message));
    let DeviceResult::SentAndDelivered { messages: sent, .. } = result else {
        panic!("{result:?}")
    };
    assert_eq!(sent.len(), 1, "delivered at once");
    assert_eq!(sent[0].message.body, b"body of m1".to_vec());
    assert_eq!(reads, 0, "no device-bound row read");
    assert_eq!(
        queue_writes(&writes),
        [(devices, "create"), (messages, "create")]
    );
    // Its completion removes both rows, again without reading one.
    let (result, writes, reads) = apply_counting_queue_reads(
        &mut r,
        DeviceCommand::SettleAndDeliver {
            device: DEV.to_vec(),
            token: sent[0].token.clone(),
            settlement: Settlement::Complete,
        },
    );
    assert_eq!(
        result,
        DeviceResult::SettledAndDelivered {
            settled: true,
            messages: Vec::new()
        }
    );
    assert_eq!(reads, 0, "no device-bound row read");
    assert_eq!(
        queue_writes(&writes),
        [(devices, "remove"), (messages, "remove")]
    );
    // A completion that delivers a message that waited reads exactly that message's row.
    let mut r = queued_replica(DeviceboundSettings::default(), 1, 1);
    let token = read::messages(&r.map, DEV, 1).expect("read")[0]
        .1
        .lock
        .clone()
        .expect("locked")
        .token;
    let (result, writes, reads) = apply_counting_queue_reads(
        &mut r,
        DeviceCommand::SettleAndDeliver {
            device: DEV.to_vec(),
            token,
            settlement: Settlement::Complete,
        },
    );
    assert!(
        matches!(&result, DeviceResult::SettledAndDelivered { settled: true, messages }
            if messages.iter().map(id_of).collect::<Vec<_>>() == ["waiting-0"]),
        "{result:?}"
    );
    assert_eq!(reads, 1, "the waiting message's row, once");
    assert_eq!(
        queue_writes(&writes),
        [(devices, "put"), (messages, "remove"), (messages, "put")],
        "the completed message removed, the waiting one rewritten locked"
    );
}

#[test]
fn commands_that_change_nothing_write_no_device_bound_row() {
    // A device with one locked and one waiting message.
    let mut r = queued_replica(DeviceboundSettings::default(), 1, 1);
    let made_up = token::message_token(1 << 63, &[9; token::SECRET_BYTES]);
    let unchanged: [DeviceCommand; 4] = [
        DeviceCommand::Settle {
            device: DEV.to_vec(),
            token: made_up.clone(),
            settlement: Settlement::Complete,
        },
        DeviceCommand::SettleAndDeliver {
            device: DEV.to_vec(),
            token: made_up.clone(),
            settlement: Settlement::Reject,
        },
        DeviceCommand::Undeliver {
            device: DEV.to_vec(),
            token: made_up,
        },
        // The window of 1 is full: nothing to deliver.
        DeviceCommand::Deliver {
            device: DEV.to_vec(),
            max: 1,
        },
    ];
    for command in unchanged {
        let label = format!("{command:?}");
        let (_, writes, _) = apply_counting_queue_reads(&mut r, command);
        let device_bound: Vec<_> = writes
            .keys()
            .filter(|key| {
                **key == layout::meta_key()
                    || layout::DeviceTable::ALL
                        .iter()
                        .any(|table| key.first() == Some(&table.prefix()))
            })
            .collect();
        assert!(device_bound.is_empty(), "{label} wrote {device_bound:?}");
    }
    assert_eq!(r.stats(DEV).invisible, 1, "the lock still holds");
}

#[test]
fn the_index_counts_queues_by_depth_and_sizes_itself() {
    let mut r = Replica::with(DeviceboundSettings {
        max_queue_depth: 200,
        ..DeviceboundSettings::default()
    });
    assert_eq!(r.index.depth_distribution(), [0; DEPTH_CLASSES.len()]);
    let empty_bytes = r.index.approximate_bytes();
    // Depths 1, 3, 7 and 120: classes "1", "2-5", "6-10" and "101-1000".
    for (device, depth) in [(&b"a"[..], 1), (b"b", 3), (b"c", 7), (b"d", 120)] {
        for i in 0..depth {
            assert_eq!(r.send(device, &format!("m{i}")), sent());
        }
    }
    assert_eq!(r.index.depth_distribution(), [1, 1, 1, 0, 0, 0, 1, 0]);
    assert_eq!((r.index.devices(), r.index.messages()), (4, 131));
    let full_bytes = r.index.approximate_bytes();
    assert!(
        full_bytes > empty_bytes + 131 * 100,
        "{empty_bytes} -> {full_bytes}"
    );
    // Draining "d" to 2 messages moves it to "2-5"; purging "a" removes it.
    assert_eq!(
        r.run(DeviceCommand::Purge {
            device: b"a".to_vec()
        })
        .result,
        DeviceResult::Purged { messages: 1 }
    );
    for _ in 0..118 {
        let delivered = r.deliver_one(b"d");
        assert!(r.settle(b"d", &delivered.token, Settlement::Complete));
    }
    assert_eq!(r.index.depth_distribution(), [0, 2, 1, 0, 0, 0, 0, 0]);
    assert_eq!((r.index.devices(), r.index.messages()), (3, 12));
    assert!(r.index.approximate_bytes() < full_bytes);
}
