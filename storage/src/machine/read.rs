//! Read-only queries that concern the whole state machine rather than one of its parts: the
//! store time a leader read must use, the reply-memory fast path, the digest of the state and
//! the consensus layer's records. Time is always an argument.

use xxhash_rust::xxh3::Xxh3;

use crate::codec;
use crate::engine::OrderedRead;
use crate::error::Result;
use crate::keyspace::KeyspaceMeta;
use crate::layout::{self, Table};
use crate::machine::outcome::Outcome;
use crate::machine::proposal::RequestId;
use crate::machine::reply_rows::{self, RememberedReply};

/// How far the store's time may run ahead of the wall clock of the leader judging by it: the
/// HLC's drift bound (§4). Leaders' clocks differ a little, and the floor keeps time monotonic
/// across them; one leader whose clock jumped far ahead must not expire keys early for good.
pub const MAX_FLOOR_LEAD_MS: u64 = statestore_vocab::hlc::MAX_CLOCK_DRIFT_MS;

/// The store time at a leader whose wall clock reads `wall_ms`, given the time floor reached by
/// entries already applied: never behind the floor, except that the floor counts only up to
/// [`MAX_FLOOR_LEAD_MS`] ahead of this wall clock.
pub fn store_time(time_floor_ms: u64, wall_ms: u64) -> u64 {
    wall_ms.max(time_floor_ms.min(wall_ms.saturating_add(MAX_FLOOR_LEAD_MS)))
}

/// The time a leader read must use: its wall clock, but never behind entries already applied
/// (within [`MAX_FLOOR_LEAD_MS`], see [`store_time`]).
pub fn read_time(meta: &KeyspaceMeta, wall_ms: u64) -> u64 {
    store_time(meta.time_floor_ms, wall_ms)
}

/// The remembered reply of `request` if a retry at `time_ms` must still get it (§6): only a
/// reply to a request with the same digest (another request that claims the same client and
/// correlation data gets `None` and is executed as new).
pub fn remembered_reply(
    view: &(impl OrderedRead + ?Sized),
    request: &RequestId,
    time_ms: u64,
) -> Result<Option<Outcome>> {
    let Some(bytes) = view.get_ref(&reply_rows::reply_key(
        &request.client,
        &request.correlation,
    ))?
    else {
        return Ok(None);
    };
    let remembered: RememberedReply = codec::decode("remembered reply", &bytes)?;
    Ok(
        (remembered.expires_at_ms > time_ms && remembered.digest == request.digest)
            .then_some(remembered.outcome),
    )
}

/// A digest of the whole replicated state (every table but the consensus layer's own records:
/// keyspace, reply memory, device-bound queues). Two replicas at the same applied index must
/// report the same digest.
pub fn digest(view: &(impl OrderedRead + ?Sized)) -> Result<u64> {
    let mut hasher = Xxh3::new();
    let start = [0u8];
    let end = [Table::ConsensusState.prefix()];
    for entry in view.range(&start, &end) {
        let (key, value) = entry?;
        hasher.update(&(key.len() as u64).to_be_bytes());
        hasher.update(&key);
        hasher.update(&(value.len() as u64).to_be_bytes());
        hasher.update(&value);
    }
    Ok(hasher.digest())
}

/// The consensus layer's record `name` ([`crate::machine::Machine::put_consensus_record`]), as
/// it wrote it.
pub fn consensus_record(
    view: &(impl OrderedRead + ?Sized),
    name: &[u8],
) -> Result<Option<Vec<u8>>> {
    view.get(&layout::consensus_key(name))
}
