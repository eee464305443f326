//! Pre-images: what fjall held when a snapshot export began, for the rows the flush thread
//! overwrites or removes while the export still has to read them.
//!
//! A snapshot export reads fjall in key order under the memtable layers of its start (see
//! [`Memtable::begin_export`](crate::store::memtable::Memtable::begin_export)). The flush
//! thread does not wait for it: before it writes a row of a layer frozen after the export
//! began into fjall, it keeps the row's value as fjall has it then (`None`: absent) here, unless
//! the export has read past that key already or a pre-image of it is kept (rows of the layers
//! in the export's view need none: the export reads them from those layers). The export reads
//! fjall and lets a kept pre-image win ([`Exported`]), so it sees fjall exactly as it was at its
//! start while fjall moves on; pre-images are dropped as soon as the export's position passes
//! their keys (a range it finished or skipped counts as passed: ranges are read in key order).
//! So apply never waits for an export to finish, and the memtable does not hold back what fjall
//! could take.
//!
//! Memory is bounded: pre-images hold at most the cap given to [`Preimages::new`] (keys,
//! values and a fixed overhead per row). At the cap the flush thread waits until the export has
//! read past some kept rows (or has ended), and writers then wait for memtable room as they
//! would without an export; the waits are counted ([`Preimages::cap_waits`]).
//!
//! Why this is exact, whatever fjall's iterator shows of the writes made since the export began
//! (it reads the keyspace as of its creation, which comes after the export's start): every
//! pre-image is kept (under the lock) before its row is written, and the export checks the kept
//! rows (under the same lock) after it read a row from fjall. A row the export finds in fjall is
//! either unchanged since the start or has its start value kept; a row fjall no longer shows but
//! held at the start was removed after its pre-image was kept; a row new since the start has a
//! pre-image of `None`.

use std::collections::BTreeMap;
use std::ops::Bound::{Excluded, Included};
use std::sync::{Condvar, Mutex, MutexGuard};

use crate::engine::KvPair;
use crate::error::{Result, StorageError};
use crate::store::tree::Tree;

/// Bytes a kept row is accounted at beyond its key and value.
const ROW_OVERHEAD: usize = 64;

/// How far an export has read: every key below `key`, and `key` itself when `inclusive`.
struct Position {
    key: Vec<u8>,
    inclusive: bool,
}

impl Position {
    fn covers(&self, key: &[u8]) -> bool {
        key < self.key.as_slice() || (self.inclusive && key == self.key.as_slice())
    }
}

/// The export being tracked.
struct Tracking {
    /// Layers numbered below this are in the export's view: their writes need no pre-image
    /// (the export reads them from the layers).
    first_after: u64,
    /// How far the export has read (`None`: nothing yet).
    position: Option<Position>,
    /// Pre-images of keys ahead of the position written since the start.
    rows: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    bytes: usize,
}

impl Tracking {
    fn is_behind(&self, key: &[u8]) -> bool {
        self.position.as_ref().is_some_and(|p| p.covers(key))
    }

    /// Moves the position forward to `key` (never back) and drops the pre-images behind it.
    fn advance(&mut self, key: &[u8], inclusive: bool) {
        let forward = match &self.position {
            None => true,
            Some(p) => key > p.key.as_slice() || (key == p.key.as_slice() && inclusive),
        };
        if !forward {
            return;
        }
        let mut ahead = self.rows.split_off(key);
        if inclusive && let Some(value) = ahead.remove(key) {
            self.bytes = self.bytes.saturating_sub(row_bytes(key, &value));
        }
        for (dropped, value) in std::mem::replace(&mut self.rows, ahead) {
            self.bytes = self.bytes.saturating_sub(row_bytes(&dropped, &value));
        }
        self.position = Some(Position {
            key: key.to_vec(),
            inclusive,
        });
    }

    /// Removes the kept row of `key`, if any, and returns it.
    fn take(&mut self, key: &[u8]) -> Option<Option<Vec<u8>>> {
        let value = self.rows.remove(key)?;
        self.bytes = self.bytes.saturating_sub(row_bytes(key, &value));
        Some(value)
    }
}

fn row_bytes(key: &[u8], value: &Option<Vec<u8>>) -> usize {
    key.len() + value.as_ref().map_or(0, Vec::len) + ROW_OVERHEAD
}

#[derive(Default)]
struct State {
    tracking: Option<Tracking>,
    /// Times the flush thread waited at the cap.
    cap_waits: u64,
}

/// The pre-images of the export in progress (one at a time), shared by the flush thread and
/// the export.
pub struct Preimages {
    state: Mutex<State>,
    /// Signalled when kept rows were dropped or the export ended.
    moved: Condvar,
    cap_bytes: usize,
}

impl Preimages {
    /// No export yet; pre-images will hold at most `cap_bytes`.
    pub fn new(cap_bytes: usize) -> Preimages {
        Preimages {
            state: Mutex::new(State::default()),
            moved: Condvar::new(),
            cap_bytes,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An export begins; its view holds the memtable layers numbered below `first_after`. Call
    /// before the flush thread may write a newer layer (under the memtable's lock).
    pub fn begin(&self, first_after: u64) {
        self.lock().tracking = Some(Tracking {
            first_after,
            position: None,
            rows: BTreeMap::new(),
            bytes: 0,
        });
    }

    /// The export ended: its pre-images are dropped and a waiting flush thread goes on.
    pub fn end(&self) {
        self.lock().tracking = None;
        self.moved.notify_all();
    }

    /// For the flush thread, before it writes `key` of layer `seq` into `tree`: keeps the row's
    /// value in fjall if the export still has to read it. Waits while the pre-images are at
    /// their cap.
    pub fn keep(&self, tree: &Tree, seq: u64, key: &[u8]) -> Result<()> {
        let mut state = self.lock();
        let mut waited = false;
        loop {
            let Some(tracking) = state.tracking.as_ref() else {
                return Ok(());
            };
            if seq < tracking.first_after
                || tracking.is_behind(key)
                || tracking.rows.contains_key(key)
            {
                return Ok(());
            }
            if tracking.bytes < self.cap_bytes {
                break;
            }
            if !waited {
                waited = true;
                state.cap_waits += 1;
            }
            state = self.moved.wait(state).unwrap_or_else(|p| p.into_inner());
        }
        // Read under the lock: the export cannot pass the key meanwhile.
        let value = tree.get(key)?;
        if let Some(tracking) = state.tracking.as_mut() {
            tracking.bytes += row_bytes(key, &value);
            tracking.rows.insert(key.to_vec(), value);
        }
        Ok(())
    }

    /// Bytes of the pre-images kept now.
    pub fn bytes(&self) -> usize {
        self.lock().tracking.as_ref().map_or(0, |t| t.bytes)
    }

    /// Times the flush thread waited because the pre-images were at their cap.
    pub fn cap_waits(&self) -> u64 {
        self.lock().cap_waits
    }

    /// `key` as fjall held it at the export's start, for a key the export has not read past.
    pub fn get(&self, tree: &Tree, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let state = self.lock();
        if let Some(tracking) = state.tracking.as_ref() {
            if tracking.is_behind(key) {
                return Err(behind());
            }
            if let Some(value) = tracking.rows.get(key) {
                return Ok(value.clone());
            }
        }
        // Under the lock: the flush thread keeps a pre-image before it writes the key.
        tree.get(key)
    }
}

fn behind() -> StorageError {
    StorageError::Io(std::io::Error::other(
        "a snapshot export read a key it had already read past",
    ))
}

/// fjall's rows of a range as they were at the export's start: fjall's current rows, with the
/// kept pre-images winning (and supplying the rows removed since). Reads in key order, once.
pub struct Exported<'a, I: Iterator<Item = Result<KvPair>>> {
    stored: std::iter::Peekable<I>,
    preimages: &'a Preimages,
    /// Inclusive start of the range.
    start: Vec<u8>,
    /// True until the position was checked (a range behind the export's position cannot be
    /// read as it was).
    unchecked: bool,
    /// True once the end was reached (the iterator need not be fused: sled's, before fjall,
    /// handed out a row written after it had reported its end).
    ended: bool,
    /// Exclusive end of the range (for rows fjall no longer holds).
    end: Vec<u8>,
}

impl<'a, I: Iterator<Item = Result<KvPair>>> Exported<'a, I> {
    /// `stored` iterates fjall's rows with `start <= key < end`. Ranges must be read in key
    /// order, each after the one before it: reading one that starts at or before a key an
    /// earlier range reached is an error.
    pub fn new(stored: I, preimages: &'a Preimages, start: &[u8], end: &[u8]) -> Self {
        Exported {
            stored: stored.peekable(),
            preimages,
            start: start.to_vec(),
            unchecked: true,
            ended: false,
            end: end.to_vec(),
        }
    }
}

impl<I: Iterator<Item = Result<KvPair>>> Iterator for Exported<'_, I> {
    type Item = Result<KvPair>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.ended {
            return None;
        }
        loop {
            let next_stored = match self.stored.peek() {
                Some(Err(_)) => return self.stored.next(),
                Some(Ok((key, _))) => Some(key.clone()),
                None => None,
            };
            let mut state = self.preimages.lock();
            let Some(tracking) = state.tracking.as_mut() else {
                return Some(Err(StorageError::Io(std::io::Error::other(
                    "a snapshot export read after it ended",
                ))));
            };
            if std::mem::take(&mut self.unchecked) {
                if tracking.is_behind(&self.start) {
                    return Some(Err(behind()));
                }
                // Ranges are read in key order: nothing below this one is read any more.
                tracking.advance(&self.start, false);
            }
            // A row the iterator hands out at or behind the position (sled's did, its view of
            // a leaf lagging; skipped whatever the iterator): read already, or new since the
            // start.
            if next_stored
                .as_deref()
                .is_some_and(|key| tracking.is_behind(key))
            {
                drop(state);
                self.stored.next();
                continue;
            }
            // The first kept row ahead of the position (within the range: the position is at
            // least the range's start), up to fjall's next row (or the end).
            let upper = match &next_stored {
                Some(key) => Included(key.as_slice()),
                None => Excluded(self.end.as_slice()),
            };
            let kept = tracking
                .rows
                .range::<[u8], _>((Included(self.start.as_slice()), upper))
                .next()
                .map(|(key, _)| key.clone());
            let row = match kept {
                Some(key) => {
                    let value = tracking.take(&key).flatten();
                    if next_stored.as_ref() == Some(&key) {
                        self.stored.next(); // fjall's newer value is shadowed
                    }
                    tracking.advance(&key, true);
                    value.map(|value| (key, value))
                }
                None => match self.stored.next() {
                    Some(Ok((key, value))) => {
                        tracking.advance(&key, true);
                        Some((key, value))
                    }
                    Some(Err(err)) => return Some(Err(err)),
                    None => {
                        // The whole range is read.
                        tracking.advance(&self.end, false);
                        drop(state);
                        self.preimages.moved.notify_all();
                        self.ended = true;
                        return None;
                    }
                },
            };
            drop(state);
            self.preimages.moved.notify_all();
            if let Some(row) = row {
                return Some(Ok(row));
            }
        }
    }
}

#[cfg(test)]
mod tests;
