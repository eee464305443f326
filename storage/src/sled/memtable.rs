//! The write-back layer in front of the sled state tree.
//!
//! sled 0.34 copies a leaf and its page fragments on every insert: under sustained writes the
//! state machine spent about half of a follower's CPU inside `Tree::apply_batch` (see
//! BENCHMARKS.md). Applied writes now land here first, in an ordered map that later writes to
//! the same key overwrite; a background thread moves the whole map into sled as one atomic
//! batch once it holds [`MemtableConfig::flush_bytes`] or is [`MemtableConfig::flush_interval`]
//! old. Keys written many times (hot keys, the keyspace counters) and records that are written
//! and removed again within one interval (expired replies) reach sled once or never.
//!
//! Every batch holds the consensus records of the entries it covers, so sled always holds the
//! state after some prefix of the log: after a crash the node replays the log from there. While
//! a batch is being written ("frozen"), reads see it; new writes go to the next ("active") map.
//! If that one reaches [`MemtableConfig::max_bytes`] before the frozen one is written, the
//! writer waits: memory stays bounded.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Buffered writes: `None` removes the key.
pub type Writes = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// One buffered write: the key and its new value (`None`: removed).
pub type Write = (Vec<u8>, Option<Vec<u8>>);

/// Bytes a write is accounted at beyond its key and value (map node, vectors).
const ENTRY_OVERHEAD: usize = 64;

/// When the layer is written to sled, and how large it may grow.
#[derive(Debug, Clone, Copy)]
pub struct MemtableConfig {
    /// Freeze and write the active map once it holds this many bytes.
    pub flush_bytes: usize,
    /// ... or once its oldest write is this old.
    pub flush_interval: Duration,
    /// Writers wait while the active map holds this many bytes and a flush is still running.
    pub max_bytes: usize,
}

impl Default for MemtableConfig {
    fn default() -> Self {
        MemtableConfig {
            flush_bytes: 32 << 20,
            flush_interval: Duration::from_secs(15),
            max_bytes: 96 << 20,
        }
    }
}

fn entry_bytes(key: &[u8], value: &Option<Vec<u8>>) -> usize {
    key.len() + value.as_ref().map_or(0, Vec::len) + ENTRY_OVERHEAD
}

#[derive(Default)]
struct Layers {
    active: Writes,
    active_bytes: usize,
    /// When the first write of `active` arrived.
    active_since: Option<Instant>,
    frozen: Option<Arc<Writes>>,
    frozen_bytes: usize,
    stopped: bool,
    /// Writers currently waiting for room.
    waiting: usize,
    /// Times a writer had to wait for room.
    stalls: u64,
}

/// The two layers and the hand-over between the writer, the readers and the flush thread.
pub struct Memtable {
    layers: Mutex<Layers>,
    /// Signalled when a frozen map was written (writers waiting for room, `flush_all`).
    written: Condvar,
    /// Signalled when there is a frozen map to write, or on stop.
    to_write: Condvar,
    config: MemtableConfig,
}

/// What a reader found in the layers.
pub enum Lookup {
    /// The key's newest write (`None`: removed).
    Found(Option<Vec<u8>>),
    /// Not in memory: read sled.
    Absent,
}

impl Memtable {
    /// An empty memtable.
    pub fn new(config: MemtableConfig) -> Memtable {
        Memtable {
            layers: Mutex::default(),
            written: Condvar::new(),
            to_write: Condvar::new(),
            config,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Layers> {
        self.layers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds one transaction's writes. Freezes the active map when it is due, and waits while
    /// memory is full and the previous flush still runs.
    pub fn commit(&self, writes: Writes) {
        let mut layers = self.lock();
        if layers.frozen.is_some() && layers.active_bytes >= self.config.max_bytes {
            layers.stalls += 1;
            layers.waiting += 1;
            while layers.frozen.is_some() && layers.active_bytes >= self.config.max_bytes {
                layers = self.written.wait(layers).unwrap_or_else(|p| p.into_inner());
            }
            layers.waiting -= 1;
        }
        if layers.active_since.is_none() {
            layers.active_since = Some(Instant::now());
        }
        for (key, value) in writes {
            let added = entry_bytes(&key, &value);
            let new_value = value.as_ref().map_or(0, Vec::len);
            match layers.active.insert(key, value) {
                // The key is in there already: only the value's size changes.
                Some(old) => {
                    let old_value = old.as_ref().map_or(0, Vec::len);
                    layers.active_bytes = layers.active_bytes.saturating_sub(old_value) + new_value;
                }
                None => layers.active_bytes += added,
            }
        }
        if self.due(&layers) {
            self.freeze(&mut layers);
        }
    }

    fn due(&self, layers: &Layers) -> bool {
        layers.frozen.is_none()
            && !layers.active.is_empty()
            && (layers.active_bytes >= self.config.flush_bytes
                || layers
                    .active_since
                    .is_some_and(|since| since.elapsed() >= self.config.flush_interval))
    }

    fn freeze(&self, layers: &mut Layers) {
        layers.frozen = Some(Arc::new(std::mem::take(&mut layers.active)));
        layers.frozen_bytes = std::mem::take(&mut layers.active_bytes);
        layers.active_since = None;
        self.to_write.notify_all();
    }

    /// The newest write of `key` in memory.
    pub fn get(&self, key: &[u8]) -> Lookup {
        let layers = self.lock();
        if let Some(value) = layers.active.get(key) {
            return Lookup::Found(value.clone());
        }
        if let Some(value) = layers.frozen.as_ref().and_then(|f| f.get(key)) {
            return Lookup::Found(value.clone());
        }
        Lookup::Absent
    }

    /// The writes in memory with `start <= key < end`, newest layer winning, ascending.
    pub fn range(&self, start: &[u8], end: &[u8]) -> Vec<Write> {
        use std::ops::Bound::{Excluded, Included};
        let layers = self.lock();
        let bounds = (Included(start), Excluded(end));
        let mut merged: BTreeMap<&[u8], &Option<Vec<u8>>> = BTreeMap::new();
        if let Some(frozen) = &layers.frozen {
            merged.extend(
                frozen
                    .range::<[u8], _>(bounds)
                    .map(|(k, v)| (k.as_slice(), v)),
            );
        }
        merged.extend(
            layers
                .active
                .range::<[u8], _>(bounds)
                .map(|(k, v)| (k.as_slice(), v)),
        );
        merged
            .into_iter()
            .map(|(k, v)| (k.to_vec(), v.clone()))
            .collect()
    }

    /// Bytes held (both layers).
    pub fn bytes(&self) -> usize {
        let layers = self.lock();
        layers.active_bytes + layers.frozen_bytes
    }

    /// Times a writer had to wait because memory was full while a flush ran.
    pub fn stalls(&self) -> u64 {
        self.lock().stalls
    }

    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.lock().waiting
    }

    /// For the flush thread: waits until a frozen map is due (freezing the active map itself
    /// when it has aged past the interval) and returns it; `None` once stopped.
    pub fn next_to_write(&self) -> Option<Arc<Writes>> {
        let mut layers = self.lock();
        loop {
            if let Some(frozen) = &layers.frozen {
                return Some(frozen.clone());
            }
            if layers.stopped {
                return None;
            }
            if self.due(&layers) {
                self.freeze(&mut layers);
                continue;
            }
            let wait = layers
                .active_since
                .map_or(self.config.flush_interval, |since| {
                    self.config
                        .flush_interval
                        .saturating_sub(since.elapsed())
                        .max(Duration::from_millis(10))
                });
            layers = self
                .to_write
                .wait_timeout(layers, wait)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// For the flush thread: the frozen map is in sled now.
    pub fn written(&self) {
        let mut layers = self.lock();
        layers.frozen = None;
        layers.frozen_bytes = 0;
        self.written.notify_all();
    }

    /// Waits until every write committed so far is in sled (the flush thread must run).
    pub fn flush_all(&self) {
        let mut layers = self.lock();
        loop {
            if layers.frozen.is_none() {
                if layers.active.is_empty() {
                    return;
                }
                self.freeze(&mut layers);
            }
            layers = self.written.wait(layers).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Drops everything in memory (a snapshot replaces the state), after any running flush.
    pub fn discard(&self) {
        let mut layers = self.lock();
        while layers.frozen.is_some() {
            layers = self.written.wait(layers).unwrap_or_else(|p| p.into_inner());
        }
        layers.active.clear();
        layers.active_bytes = 0;
        layers.active_since = None;
    }

    /// Stops the flush thread once nothing is frozen.
    pub fn stop(&self) {
        self.lock().stopped = true;
        self.to_write.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writes(pairs: &[(&str, Option<&str>)]) -> Writes {
        pairs
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.map(|v| v.as_bytes().to_vec())))
            .collect()
    }

    fn found(lookup: Lookup) -> Option<Option<Vec<u8>>> {
        match lookup {
            Lookup::Found(value) => Some(value),
            Lookup::Absent => None,
        }
    }

    #[test]
    fn newest_write_wins_across_layers_and_removals_are_remembered() {
        let table = Memtable::new(MemtableConfig {
            flush_bytes: 1,
            flush_interval: Duration::from_secs(3600),
            max_bytes: 1 << 20,
        });
        table.commit(writes(&[("a", Some("1")), ("b", Some("2"))]));
        // flush_bytes 1: that commit froze the layer; the next goes to a fresh active map
        table.commit(writes(&[("a", Some("one")), ("b", None)]));
        assert_eq!(found(table.get(b"a")), Some(Some(b"one".to_vec())));
        assert_eq!(
            found(table.get(b"b")),
            Some(None),
            "a removal hides the older write"
        );
        assert!(found(table.get(b"c")).is_none(), "unknown keys go to sled");
        assert_eq!(
            table.range(b"a", b"z"),
            vec![
                (b"a".to_vec(), Some(b"one".to_vec())),
                (b"b".to_vec(), None)
            ]
        );
        let frozen = table.next_to_write().expect("a frozen layer");
        assert_eq!(frozen.get(&b"a"[..]), Some(&Some(b"1".to_vec())));
        table.written();
        assert_eq!(found(table.get(b"a")), Some(Some(b"one".to_vec())));
    }

    #[test]
    fn overwrites_do_not_grow_the_accounted_bytes() {
        let table = Memtable::new(MemtableConfig {
            flush_bytes: usize::MAX,
            flush_interval: Duration::from_secs(3600),
            max_bytes: usize::MAX,
        });
        table.commit(writes(&[("k", Some("0123456789"))]));
        let once = table.bytes();
        for _ in 0..100 {
            table.commit(writes(&[("k", Some("0123456789"))]));
        }
        assert_eq!(table.bytes(), once);
        table.commit(writes(&[("k", None)]));
        assert_eq!(table.bytes(), once - 10);
    }

    #[test]
    fn a_writer_waits_for_room_while_a_flush_runs() {
        let table = Arc::new(Memtable::new(MemtableConfig {
            flush_bytes: 100,
            flush_interval: Duration::from_secs(3600),
            max_bytes: 200,
        }));
        table.commit(writes(&[("first", Some(&"x".repeat(150)))])); // frozen at once
        table.commit(writes(&[("second", Some(&"y".repeat(250)))])); // over max: next waits
        let writer = {
            let table = table.clone();
            std::thread::spawn(move || table.commit(writes(&[("third", Some("z"))])))
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while table.waiting() == 0 {
            assert!(Instant::now() < deadline, "the writer never waited");
            std::thread::yield_now();
        }
        assert!(
            found(table.get(b"third")).is_none(),
            "a waiting writer has not committed"
        );
        let frozen = table.next_to_write().expect("frozen");
        assert!(frozen.contains_key(&b"first"[..]));
        table.written();
        writer.join().expect("writer");
        assert_eq!(found(table.get(b"third")), Some(Some(b"z".to_vec())));
        assert_eq!(table.stalls(), 1);
    }
}
