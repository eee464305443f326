//! What a restart costs the store, printed as a table: a clean reopen (the clean-stop marker
//! found, the state database used as it is) against an unclean one (no marker: `state/` read
//! back whole, every row and the reply memory's log, before it is kept; the Raft log replay
//! after it is the consensus layer's and not timed here).
//!
//! Workload: `REOPEN_COST_KEYS` keys (default 100,000) of 32-byte values, every tenth
//! transaction also remembering a reply, committed 100 keys per transaction, then 1,000 more.
//! Each row times open + [`Store::recover`] + the first read, the median of
//! `REOPEN_COST_ROUNDS` rounds (default 3).
//!
//! Run: `cargo bench -p statestore-storage --bench reopen_cost`.

use std::time::{Duration, Instant};

use statestore_storage::Result;
use statestore_storage::codec;
use statestore_storage::engine::{OrderedRead, TxnWrite, TxnWrites};
use statestore_storage::layout::{Table, consensus_key};
use statestore_storage::machine::{Outcome, RememberedReply, reply_rows};
use statestore_storage::store::{OpenKind, SnapshotCovers, Store, StoreConfig};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn covers(header: &[u8]) -> Result<SnapshotCovers> {
    Ok(SnapshotCovers {
        last_index: Some(1),
        records: vec![(consensus_key(b"applied"), header.to_vec())],
    })
}

fn fill(store: &Store, from: usize, to: usize) -> Result<()> {
    let state = store.state()?;
    for start in (from..to).step_by(100) {
        let mut txn = TxnWrites::new();
        for i in start..(start + 100).min(to) {
            txn.insert(
                format!("key-{i:08}").into_bytes(),
                TxnWrite::Put(vec![b'v'; 32]),
            );
        }
        if start % 1000 == 0 {
            // A remembered reply and its expiry index row, as apply writes them (a reopen
            // rebuilds the index from the reply, which must decode).
            let mut reply = vec![Table::Replies.prefix()];
            reply.extend_from_slice(format!("client/{start}").as_bytes());
            let value = codec::encode(&RememberedReply {
                expires_at_ms: start as u64,
                digest: start as u128,
                outcome: Outcome::Missing,
            });
            let (index, size) = reply_rows::expiry_entry(&reply, &value)?;
            txn.insert(reply, TxnWrite::Put(value));
            txn.insert(index, TxnWrite::Put(size));
        }
        state.commit(txn)?;
    }
    Ok(())
}

/// Opens, recovers and reads one key; the time it took and how the open went.
fn reopen(config: &StoreConfig) -> Result<(Duration, OpenKind, Store)> {
    let started = Instant::now();
    let store = Store::open(config)?;
    // No snapshot file: a state kept after an unclean stop is not behind one.
    let report = store.recover(&covers, &|_| Ok(None))?;
    let value = store.state()?.view().get(b"key-00000000")?;
    assert!(value.is_some(), "the first key is there");
    Ok((started.elapsed(), report.kind, store))
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times.get(times.len() / 2).copied().unwrap_or_default()
}

fn main() -> Result<()> {
    let keys = env("REOPEN_COST_KEYS", 100_000);
    let rounds = env("REOPEN_COST_ROUNDS", 3).max(1);
    let with_unclean = env("REOPEN_COST_UNCLEAN", 1) != 0;
    let dir = tempfile::tempdir()?;
    let config = StoreConfig::new(dir.path(), 256 << 20);
    {
        let store = Store::open(&config)?;
        fill(&store, 0, keys)?;
        fill(&store, keys, keys + 1_000)?;
        store.close_clean()?;
    }
    let mut clean = Vec::new();
    let mut unclean = Vec::new();
    for _ in 0..rounds {
        let (took, kind, store) = reopen(&config)?;
        assert_eq!(kind, OpenKind::Clean);
        clean.push(took);
        if with_unclean {
            drop(store); // no clean stop: the next open reads the state back first
            let (took, kind, store) = reopen(&config)?;
            assert_eq!(kind, OpenKind::UncleanKept);
            unclean.push(took);
            fill(&store, keys, keys + 1_000)?;
            store.close_clean()?;
        } else {
            store.close_clean()?;
        }
    }
    println!(
        "keys {keys}: reopen after a clean stop {:?} (median of {rounds}), after an unclean stop (the state read back and kept) {:?}",
        median(clean),
        median(unclean)
    );
    Ok(())
}
