//! The fencing-token audit of a recorded history: the versions (`__ts`) of applied writes
//! follow real time.
//!
//! Clients use a write's version as a fencing token (protocol §4: the `__ts` of a lock's SET
//! is the token a holder presents), so the store must never issue a version that is not
//! greater than one it already acknowledged, whatever happens to leaders and clocks in
//! between (protocol §3). For two applied writes `a` and `b` where `a`'s reply arrived before
//! `b` was sent, the audit requires `version(a) < version(b)`. It also checks that no version
//! runs more than the protocol's 60 s ahead of the wall clock of the machine that received it.
//!
//! Only writes that created a version are audited: an applied SET (`+OK`), a DEL or VDEL that
//! removed the key (`:1`). A failed NX/NEX SET returns the *stored* version, and a GET the
//! version of the value read, neither of which is new.

use std::fmt;

/// A version as the protocol orders it: milliseconds, counter, node id (protocol §3).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// Milliseconds since the Unix epoch.
    pub ms: u64,
    /// Logical counter.
    pub counter: u64,
    /// Node that issued it.
    pub node: String,
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:015}:{:05}:{}", self.ms, self.counter, self.node)
    }
}

/// One applied write and the version its reply carried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionedWrite {
    /// Recording client.
    pub client: u64,
    /// When it was sent (ns on the history's clock).
    pub call: u64,
    /// When its reply arrived (ns on the history's clock).
    pub ret: u64,
    /// Wall clock of the recording machine when the reply arrived (ms since the epoch).
    pub ret_wall_ms: u64,
    /// The reply's `__ts`.
    pub version: Version,
}

/// What a passing audit covered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditSummary {
    /// Writes audited.
    pub writes: usize,
    /// Pairs in real-time order that the audit compared (one per write that had a
    /// predecessor: its latest-ending predecessor's maximum).
    pub ordered_pairs: usize,
    /// Largest lead of a version over the wall clock at its arrival (ms; 0 if none led).
    pub max_lead_ms: u64,
}

/// Checks `writes` (any order): versions increase along real time, and none leads the
/// receiving wall clock by more than `max_lead_ms`. `Err` names the first offending pair.
pub fn audit(writes: &[VersionedWrite], max_lead_ms: u64) -> Result<AuditSummary, String> {
    let mut max_lead = 0;
    for w in writes {
        let lead = w.version.ms.saturating_sub(w.ret_wall_ms);
        if lead > max_lead_ms {
            return Err(format!(
                "version {} of client {} runs {lead} ms ahead of the wall clock \
                 (allowed {max_lead_ms} ms)",
                w.version, w.client
            ));
        }
        max_lead = max_lead.max(lead);
    }
    // Writes by reply time, with the running maximum version (and which write holds it).
    let mut by_ret: Vec<&VersionedWrite> = writes.iter().collect();
    by_ret.sort_by_key(|w| w.ret);
    let mut prefix_max: Vec<&VersionedWrite> = Vec::with_capacity(by_ret.len());
    for w in &by_ret {
        let best = match prefix_max.last() {
            Some(best) if best.version >= w.version => *best,
            _ => *w,
        };
        prefix_max.push(best);
    }
    let mut ordered_pairs = 0;
    for b in writes {
        // Writes whose reply arrived strictly before `b` was sent.
        let before = by_ret.partition_point(|a| a.ret < b.call);
        let Some(a) = before.checked_sub(1).map(|i| prefix_max[i]) else {
            continue;
        };
        ordered_pairs += 1;
        if a.version >= b.version {
            return Err(format!(
                "version went backwards: client {}'s write acknowledged at {} ns got {}, \
                 yet client {}'s later write (sent at {} ns) got {}",
                a.client, a.ret, a.version, b.client, b.call, b.version
            ));
        }
    }
    Ok(AuditSummary {
        writes: writes.len(),
        ordered_pairs,
        max_lead_ms: max_lead,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(
        client: u64,
        call: u64,
        ret: u64,
        ms: u64,
        counter: u64,
        node: &str,
    ) -> VersionedWrite {
        VersionedWrite {
            client,
            call,
            ret,
            ret_wall_ms: 1_000,
            version: Version {
                ms,
                counter,
                node: node.to_owned(),
            },
        }
    }

    #[test]
    fn increasing_versions_along_real_time_pass() {
        let writes = [
            write(0, 0, 10, 1_000, 0, "n1"),
            write(1, 20, 30, 1_000, 1, "n1"),
            write(0, 40, 50, 1_001, 0, "n2"),
        ];
        let summary = audit(&writes, 60_000).expect("ordered");
        assert_eq!(summary.writes, 3);
        assert_eq!(summary.ordered_pairs, 2);
        assert_eq!(summary.max_lead_ms, 1);
    }

    #[test]
    fn concurrent_writes_may_get_versions_in_either_order() {
        // Overlapping in time: no order required between them.
        let writes = [
            write(0, 0, 30, 1_000, 5, "n1"),
            write(1, 10, 20, 1_000, 3, "n1"),
        ];
        assert_eq!(audit(&writes, 60_000).expect("concurrent").ordered_pairs, 0);
    }

    #[test]
    fn a_later_write_with_a_lower_version_fails() {
        // A new leader whose clock is behind issued a lower version after an acknowledged one.
        let writes = [
            write(0, 0, 10, 2_000, 0, "n1"),
            write(1, 20, 30, 1_999, 9, "n2"),
        ];
        let err = audit(&writes, 60_000).expect_err("went backwards");
        assert!(err.contains("went backwards"), "{err}");
    }

    #[test]
    fn an_equal_version_fails_and_the_running_maximum_is_used() {
        // The highest earlier version is not the latest-ending one.
        let writes = [
            write(0, 0, 10, 5_000, 0, "n1"),
            write(1, 0, 12, 1_000, 0, "n1"),
            write(2, 20, 30, 5_000, 0, "n1"),
        ];
        assert!(audit(&writes, 60_000).is_err());
    }

    #[test]
    fn a_version_far_ahead_of_the_wall_clock_fails() {
        let writes = [write(0, 0, 10, 1_000 + 60_001, 0, "n1")];
        let err = audit(&writes, 60_000).expect_err("too far ahead");
        assert!(err.contains("ahead of the wall clock"), "{err}");
        assert!(audit(&[write(0, 0, 10, 61_000, 0, "n1")], 60_000).is_ok());
    }
}
