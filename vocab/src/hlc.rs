//! Hybrid logical clocks (protocol §3): the version of every key and every fencing token.
//!
//! Owns the [`Hlc`] value type (text form, parsing, total order), the [`HlcClock`] the leader
//! stamps writes with (update rule, skew check) and the [`WallClock`] abstraction that lets
//! tests inject time. Pure: the only clock read happens inside a [`WallClock`] implementation.

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};

use serde::{Deserialize, Serialize};

/// How far ahead of the local wall clock a request `__ts` or `__ft` may be (protocol §3, §4).
pub const MAX_CLOCK_DRIFT_MS: u64 = 60_000;

/// Counters stay below this so .NET clients (which parse the counter as `Int32`) accept every
/// version we send (protocol §3). When a counter would pass it the clock moves to the next
/// millisecond instead, which keeps the order strict.
pub const MAX_COUNTER: u64 = i32::MAX as u64;

/// A hybrid logical clock timestamp `{ms}:{counter}:{node}`.
///
/// Ordered by `(ms, counter)` and then by node id as a string (protocol §3).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Hlc {
    /// Milliseconds since the Unix epoch.
    pub ms: u64,
    /// Logical counter within one millisecond.
    pub counter: u64,
    /// Id of the node that issued it; non-empty, without `:`.
    pub node: String,
}

/// Why a text is not an HLC (answered as `malformed timestamp`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed hybrid logical clock: {0}")]
pub struct HlcParseError(&'static str);

/// A timestamp further in the future than the allowed drift.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("timestamp {ahead_ms} ms ahead of the local clock")]
pub struct ClockSkew {
    /// How far ahead of the wall clock the rejected timestamp was.
    pub ahead_ms: u64,
}

impl Hlc {
    /// Builds an HLC; `node` must be non-empty and free of `:` (see [`Hlc::valid_node_id`]).
    pub fn new(ms: u64, counter: u64, node: impl Into<String>) -> Self {
        Hlc {
            ms,
            counter,
            node: node.into(),
        }
    }

    /// True if `node` can appear as the third field of an HLC.
    pub fn valid_node_id(node: &str) -> bool {
        !node.is_empty() && !node.contains(':')
    }

    /// Parses `{ms}:{counter}:{node}`; padded or unpadded decimal numbers are accepted.
    pub fn parse(text: &str) -> Result<Self, HlcParseError> {
        let mut fields = text.split(':');
        let (Some(ms), Some(counter), Some(node), None) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return Err(HlcParseError("expected exactly three ':'-separated fields"));
        };
        let ms = parse_decimal(ms).ok_or(HlcParseError("milliseconds are not a decimal u64"))?;
        let counter =
            parse_decimal(counter).ok_or(HlcParseError("counter is not a decimal u64"))?;
        if node.is_empty() {
            return Err(HlcParseError("node id is empty"));
        }
        Ok(Hlc {
            ms,
            counter,
            node: node.to_owned(),
        })
    }

    /// The smallest HLC greater than `self`, issued by `node`.
    ///
    /// Bumps the counter; if the counter would pass [`MAX_COUNTER`] it moves to the next
    /// millisecond with counter 0.
    pub fn successor(&self, node: &str) -> Hlc {
        if self.counter >= MAX_COUNTER {
            Hlc {
                ms: self.ms.saturating_add(1),
                counter: 0,
                node: node.to_owned(),
            }
        } else {
            Hlc {
                ms: self.ms,
                counter: self.counter + 1,
                node: node.to_owned(),
            }
        }
    }
}

/// Digits only: no sign, no spaces, no empty string.
fn parse_decimal(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

impl fmt::Display for Hlc {
    /// The padded wire form: 15-digit ms, 5-digit counter (protocol §3).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:015}:{:05}:{}", self.ms, self.counter, self.node)
    }
}

impl Ord for Hlc {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.ms, self.counter, self.node.as_str()).cmp(&(
            other.ms,
            other.counter,
            other.node.as_str(),
        ))
    }
}

impl PartialOrd for Hlc {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A source of wall-clock time in milliseconds since the Unix epoch.
pub trait WallClock: Send + Sync + 'static {
    /// Current wall-clock time.
    fn now_ms(&self) -> u64;
}

/// The operating system's real-time clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl WallClock for SystemClock {
    fn now_ms(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    }
}

/// A clock that only moves when told to; for tests.
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock showing `ms`.
    pub fn new(ms: u64) -> Self {
        ManualClock(Arc::new(AtomicU64::new(ms)))
    }
    /// Moves the clock to `ms` (it may go backwards, like a badly synchronised host).
    pub fn set(&self, ms: u64) {
        self.0.store(ms, AtomicOrdering::SeqCst);
    }
    /// Moves the clock forward by `ms`.
    pub fn advance(&self, ms: u64) {
        self.0.fetch_add(ms, AtomicOrdering::SeqCst);
    }
}

impl WallClock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(AtomicOrdering::SeqCst)
    }
}

/// A shared clock (`Arc<dyn WallClock>` lets a service pick its clock at run time).
impl<C: WallClock + ?Sized> WallClock for Arc<C> {
    fn now_ms(&self) -> u64 {
        (**self).now_ms()
    }
}

/// The leader's clock: issues HLCs that never go backwards and merges remote ones.
#[derive(Debug)]
pub struct HlcClock<C: WallClock> {
    wall: C,
    node: String,
    last: Hlc,
    max_drift_ms: u64,
}

impl<C: WallClock> HlcClock<C> {
    /// A clock for `node` (its configured name) reading `wall`.
    pub fn new(node: impl Into<String>, wall: C) -> Self {
        let node = node.into();
        HlcClock {
            wall,
            last: Hlc::new(0, 0, node.clone()),
            node,
            max_drift_ms: MAX_CLOCK_DRIFT_MS,
        }
    }

    /// The node id written into issued HLCs.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The wall clock behind this HLC.
    pub fn wall_ms(&self) -> u64 {
        self.wall.now_ms()
    }

    /// Refuses a timestamp more than the allowed drift ahead of the wall clock.
    pub fn check_drift(&self, remote: &Hlc) -> Result<(), ClockSkew> {
        let limit = self.wall.now_ms().saturating_add(self.max_drift_ms);
        if remote.ms > limit {
            Err(ClockSkew {
                ahead_ms: remote.ms - self.wall.now_ms(),
            })
        } else {
            Ok(())
        }
    }

    /// Issues a new HLC greater than every one issued or observed before.
    pub fn now(&mut self) -> Hlc {
        let wall = self.wall.now_ms();
        let next = if wall > self.last.ms {
            Hlc::new(wall, 0, self.node.clone())
        } else {
            self.last.successor(&self.node)
        };
        self.last = next.clone();
        next
    }

    /// The HLC update rule on receiving `remote`: the result is greater than `remote` and than
    /// everything issued before. Fails without changing the clock when `remote` is too far ahead.
    pub fn update(&mut self, remote: &Hlc) -> Result<Hlc, ClockSkew> {
        self.check_drift(remote)?;
        self.observe(remote);
        Ok(self.now())
    }

    /// Raises the clock so the next HLC issued is greater than `seen` (no drift check; used
    /// with versions already in the store, e.g. when a node becomes leader).
    pub fn observe(&mut self, seen: &Hlc) {
        if (seen.ms, seen.counter) >= (self.last.ms, self.last.counter) {
            self.last = Hlc::new(seen.ms, seen.counter, self.node.clone());
        }
    }
}

#[cfg(test)]
mod tests;
