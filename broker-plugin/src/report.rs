//! What the plugin reports: counters (logged every `report_interval` seconds and at shutdown),
//! a rate limit on the per-drop log lines, and client-supplied text made safe for one log line.

use std::sync::atomic::{AtomicU64, Ordering};

/// At most this many drop lines are logged per second; the rest are counted and summed up in
/// the next line that is logged.
pub const DROP_LINES_PER_SECOND: u32 = 10;
/// Client-supplied text (client id, topic, response topic) is cut to this many characters in
/// a log line.
pub const MAX_LOGGED_CHARS: usize = 200;

/// The plugin's counters, since load.
#[derive(Debug, Default)]
pub struct Counters {
    /// Store requests passed on with the vouched identity.
    pub vouched: AtomicU64,
    /// Client-supplied copies of the property removed (a forgery, or a stale copy).
    pub forged_removed: AtomicU64,
    /// Requests dropped: response topic outside `clients/<client id>/`.
    pub refused_response_topic: AtomicU64,
    /// Requests dropped: no identity for the configured source.
    pub refused_no_identity: AtomicU64,
    /// Requests dropped because the plugin could not rewrite them (out of memory, an
    /// unreadable property, a panic caught at the boundary): it fails closed.
    pub errors: AtomicU64,
}

impl Counters {
    /// Adds one to `counter`.
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Adds `n` to `counter`.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// The report line.
    pub fn line(&self) -> String {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "statestore-plugin counters: vouched={} forged_removed={} refused_response_topic={} \
             refused_no_identity={} errors={}",
            get(&self.vouched),
            get(&self.forged_removed),
            get(&self.refused_response_topic),
            get(&self.refused_no_identity),
            get(&self.errors)
        )
    }
}

/// The rate limit on drop lines: [`DROP_LINES_PER_SECOND`] per wall-clock second.
#[derive(Debug, Default)]
pub struct DropLog {
    second: u64,
    logged: u32,
    suppressed: u64,
}

/// Whether to log one drop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// Log it, mentioning this many drops not logged since the last line.
    Log {
        /// Drops not logged before this one.
        suppressed: u64,
    },
    /// Do not log it (counted).
    Suppress,
}

impl DropLog {
    /// Decides for one drop at `now_s` (seconds, any monotonic-enough clock).
    pub fn admit(&mut self, now_s: u64) -> Admit {
        if now_s != self.second {
            self.second = now_s;
            self.logged = 0;
        }
        if self.logged < DROP_LINES_PER_SECOND {
            self.logged += 1;
            let suppressed = std::mem::take(&mut self.suppressed);
            Admit::Log { suppressed }
        } else {
            self.suppressed = self.suppressed.saturating_add(1);
            Admit::Suppress
        }
    }
}

/// When the counters are next due in the log.
#[derive(Debug)]
pub struct ReportClock {
    interval_s: u64,
    next_s: Option<u64>,
}

impl ReportClock {
    /// Every `interval_s` seconds; 0: never (only the shutdown line).
    pub fn new(interval_s: u64) -> ReportClock {
        ReportClock {
            interval_s,
            next_s: None,
        }
    }

    /// Whether a report is due at `now_s`; the first call starts the clock.
    pub fn due(&mut self, now_s: u64) -> bool {
        if self.interval_s == 0 {
            return false;
        }
        match self.next_s {
            None => {
                self.next_s = Some(now_s.saturating_add(self.interval_s));
                false
            }
            Some(next) if now_s >= next => {
                self.next_s = Some(now_s.saturating_add(self.interval_s));
                true
            }
            Some(_) => false,
        }
    }
}

/// `text` cut to `max` characters (with `…` when cut), control characters escaped, so one
/// client cannot flood or forge lines of the broker's log.
pub fn shorten(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max * 4));
    for (i, c) in text.chars().enumerate() {
        if i == max {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Like [`shorten`] for bytes that may not be UTF-8.
pub fn shorten_bytes(bytes: &[u8], max: usize) -> String {
    shorten(&String::from_utf8_lossy(bytes), max)
}

#[cfg(test)]
mod tests;
