//! The grants of recently seen identities, bounded in entries and bytes: computing an
//! identity's grants walks the policy's glob principals, so it is done once per identity per
//! policy, not per request. Full, it drops the oldest-inserted entries first (FIFO: a hit
//! costs no bookkeeping); an entry larger than the whole byte budget is not kept.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use statestore_policy::Grants;

/// Most identities cached.
pub const MAX_ENTRIES: usize = 4_096;
/// Most bytes the cached grants and identities hold together.
pub const MAX_BYTES: usize = 64 << 20;
/// What an entry costs besides its identity and grants (map and queue slots, the `Arc`).
const ENTRY_OVERHEAD_BYTES: usize = 96;

/// Identity → grants, bounded.
#[derive(Debug)]
pub struct GrantsCache {
    /// The grants of requests whose requester is unknown (kept apart so that a lookup by
    /// `&str` allocates nothing); counted like an entry.
    anonymous: Option<(Arc<Grants>, usize)>,
    entries: HashMap<Box<str>, (Arc<Grants>, usize)>,
    order: VecDeque<Box<str>>,
    bytes: usize,
    max_entries: usize,
    max_bytes: usize,
}

impl GrantsCache {
    /// An empty cache of at most `max_entries` entries and `max_bytes` bytes.
    pub fn new(max_entries: usize, max_bytes: usize) -> GrantsCache {
        GrantsCache {
            anonymous: None,
            entries: HashMap::new(),
            order: VecDeque::new(),
            bytes: 0,
            max_entries,
            max_bytes,
        }
    }

    /// The cached grants of `identity`.
    pub fn get(&self, identity: Option<&str>) -> Option<Arc<Grants>> {
        let entry = match identity {
            Some(identity) => self.entries.get(identity),
            None => self.anonymous.as_ref(),
        };
        entry.map(|(grants, _)| grants.clone())
    }

    /// Caches `grants` for `identity`, dropping the oldest entries until both caps hold.
    pub fn insert(&mut self, identity: Option<&str>, grants: Arc<Grants>) {
        let cost = ENTRY_OVERHEAD_BYTES + identity.map_or(0, str::len) + grants.approx_bytes();
        if cost > self.max_bytes || self.max_entries == 0 || self.get(identity).is_some() {
            return;
        }
        while self.len() >= self.max_entries || self.bytes + cost > self.max_bytes {
            let freed = match self.order.pop_front() {
                Some(oldest) => self.entries.remove(&oldest),
                None => self.anonymous.take(),
            };
            let Some((_, freed)) = freed else {
                break;
            };
            self.bytes -= freed;
        }
        self.bytes += cost;
        match identity {
            Some(identity) => {
                self.order.push_back(Box::from(identity));
                self.entries.insert(Box::from(identity), (grants, cost));
            }
            None => self.anonymous = Some((grants, cost)),
        }
    }

    /// Forgets everything (a new policy is in force).
    pub fn clear(&mut self) {
        self.anonymous = None;
        self.entries.clear();
        self.order.clear();
        self.bytes = 0;
    }

    /// Identities cached.
    pub fn len(&self) -> usize {
        self.entries.len() + usize::from(self.anonymous.is_some())
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the cached entries are counted at.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests;
