//! The drain phase of `devicebound`, the parts that are not MQTT plumbing: filling every
//! offline device's queue in order (each device's SENDs one after another, so commit order is
//! sequence order; many devices at once), judging what each device received against what was
//! enqueued (exactly the sequence numbers `0..n`, in order, no duplicates), and the per-device
//! time quantiles.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::device_send::{self, DeviceIds, Kind, MessageId};
use crate::driver::{Outcome, lock};
use crate::mqtt_load::Connection;
use crate::stats::CellStats;
use crate::workload;

/// What one device received, judged against the `expected` messages `0..expected`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DeviceCheck {
    /// Deliveries (redeliveries included).
    pub received: usize,
    /// Sequence numbers of `0..expected` never delivered.
    pub missing: usize,
    /// Deliveries of a sequence number already delivered.
    pub duplicates: usize,
    /// Deliveries of a sequence number that was not enqueued.
    pub unexpected: usize,
    /// The first deliveries did not come in sequence order.
    pub out_of_order: bool,
}

impl DeviceCheck {
    /// Exactly the expected messages, once each, in order.
    pub fn passed(&self) -> bool {
        self.missing == 0 && self.duplicates == 0 && self.unexpected == 0 && !self.out_of_order
    }

    /// What is wrong, e.g. `3 missing, 1 duplicate, out of order`.
    pub fn problems(&self) -> String {
        let mut parts = Vec::new();
        if self.missing > 0 {
            parts.push(format!("{} missing", self.missing));
        }
        if self.duplicates > 0 {
            parts.push(format!("{} duplicates", self.duplicates));
        }
        if self.unexpected > 0 {
            parts.push(format!("{} not enqueued", self.unexpected));
        }
        if self.out_of_order {
            parts.push("out of order".to_owned());
        }
        if parts.is_empty() {
            "ok".to_owned()
        } else {
            parts.join(", ")
        }
    }
}

/// Judges `seqs` (sequence numbers in arrival order) against the messages `0..expected`.
pub fn check_sequence(seqs: &[u64], expected: u64) -> DeviceCheck {
    let slots = usize::try_from(expected).unwrap_or(usize::MAX);
    let mut seen = vec![false; slots];
    let mut check = DeviceCheck {
        received: seqs.len(),
        missing: 0,
        duplicates: 0,
        unexpected: 0,
        out_of_order: false,
    };
    let mut next_first: u64 = 0;
    for &seq in seqs {
        if seq >= expected {
            check.unexpected += 1;
            continue;
        }
        let Some(slot) = usize::try_from(seq).ok().and_then(|i| seen.get_mut(i)) else {
            check.unexpected += 1;
            continue;
        };
        if *slot {
            check.duplicates += 1;
            continue;
        }
        *slot = true;
        if seq != next_first {
            check.out_of_order = true;
        }
        next_first = seq + 1;
    }
    let delivered = seen.iter().filter(|s| **s).count();
    check.missing = slots.saturating_sub(delivered);
    check
}

/// p50, p99 and max of a set of durations, ms.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Quantiles {
    /// Values.
    pub n: usize,
    /// Median (nearest rank), ms.
    pub p50_ms: f64,
    /// 99th percentile (nearest rank), ms.
    pub p99_ms: f64,
    /// Largest, ms.
    pub max_ms: f64,
}

impl Quantiles {
    /// Of `values`; `None` when empty.
    pub fn of(values: &[Duration]) -> Option<Quantiles> {
        let mut ms: Vec<f64> = values.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
        if ms.is_empty() {
            return None;
        }
        ms.sort_by(f64::total_cmp);
        let rank = |q: f64| {
            let index = ((q * ms.len() as f64).ceil() as usize).clamp(1, ms.len()) - 1;
            ms[index]
        };
        Some(Quantiles {
            n: ms.len(),
            p50_ms: rank(0.50),
            p99_ms: rank(0.99),
            max_ms: ms[ms.len() - 1],
        })
    }
}

/// Publishes of one fill SEND at most: an unanswered SEND is sent again with the same
/// correlation data (it takes effect once), so the queues fill even if the leader drops some
/// requests under load.
pub const FILL_ATTEMPTS: usize = 5;

/// What the fill did.
#[derive(Debug)]
pub struct Filled {
    /// Replies: `+OK` counts, errors, timeouts (unanswered after [`FILL_ATTEMPTS`] publishes).
    pub replies: CellStats,
    /// SENDs published again after going unanswered.
    pub retries: u64,
    /// Per device: how many SENDs were answered `+OK` (the first failure stops the device).
    pub enqueued: Vec<u64>,
    /// From the first SEND to the last reply.
    pub elapsed: Duration,
}

/// Sends `d:0` .. `d:{per_device - 1}` to every device of `devices`: `workers` workers over
/// `connections` (worker `w` uses connection `w % connections`), each taking the next device
/// and sending its messages one after another, waiting for each reply (retrying an unanswered
/// one, see [`FILL_ATTEMPTS`]). A device whose SEND fails gets no more messages. Progress goes
/// to stderr every 10 s.
pub async fn fill(
    connections: &[Arc<Connection>],
    devices: &Arc<DeviceIds>,
    per_device: u64,
    workers: usize,
    body_size: usize,
) -> Filled {
    let start = Instant::now();
    let next_device = Arc::new(AtomicUsize::new(0));
    let enqueued: Arc<Vec<AtomicU64>> =
        Arc::new((0..devices.len()).map(|_| AtomicU64::new(0)).collect());
    let replies = Arc::new(std::sync::Mutex::new(CellStats::new()));
    let body = workload::value(body_size);
    let total = per_device * devices.len() as u64;
    let done = Arc::new(AtomicU64::new(0));
    let retries = Arc::new(AtomicU64::new(0));
    let progress = {
        let done = done.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(10)).await;
                let n = done.load(Ordering::Relaxed);
                let secs = start.elapsed().as_secs_f64();
                eprintln!(
                    "   drain fill: {n} / {total} SENDs answered after {secs:.0} s ({:.0}/s)",
                    n as f64 / secs
                );
            }
        })
    };
    let mut tasks = tokio::task::JoinSet::new();
    if !connections.is_empty() {
        for w in 0..workers.max(1).min(devices.len()) {
            let connection = connections[w % connections.len()].clone();
            let (devices, next_device, enqueued, replies, body, done, retries) = (
                devices.clone(),
                next_device.clone(),
                enqueued.clone(),
                replies.clone(),
                body.clone(),
                done.clone(),
                retries.clone(),
            );
            tasks.spawn(async move {
                loop {
                    let d = next_device.fetch_add(1, Ordering::Relaxed);
                    if d >= devices.len() {
                        return;
                    }
                    for seq in 0..per_device {
                        let id = MessageId {
                            kind: Kind::Drain,
                            seq,
                        };
                        let (outcome, publishes) = device_send::send_retrying(
                            &connection,
                            devices.get(d),
                            id,
                            &body,
                            FILL_ATTEMPTS,
                        )
                        .await;
                        done.fetch_add(1, Ordering::Relaxed);
                        retries.fetch_add(publishes.saturating_sub(1) as u64, Ordering::Relaxed);
                        let ok = matches!(outcome, Outcome::Ok { .. });
                        {
                            let mut replies = lock(&replies);
                            match outcome {
                                Outcome::Ok { latency, .. } => {
                                    replies.record_ok(latency, true, true)
                                }
                                Outcome::Error(kind) => replies.record_error(&kind),
                                Outcome::Timeout => replies.record_timeout(),
                            }
                        }
                        if !ok {
                            break;
                        }
                        enqueued[d].fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    }
    while tasks.join_next().await.is_some() {}
    progress.abort();
    let elapsed = start.elapsed();
    let replies = lock(&replies).clone();
    Filled {
        replies,
        retries: retries.load(Ordering::Relaxed),
        enqueued: enqueued.iter().map(|n| n.load(Ordering::Relaxed)).collect(),
        elapsed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_are_judged() {
        let check = |received, missing, duplicates, unexpected, out_of_order| DeviceCheck {
            received,
            missing,
            duplicates,
            unexpected,
            out_of_order,
        };
        // (arrivals, expected, verdict)
        let cases: &[(&[u64], u64, DeviceCheck)] = &[
            (&[0, 1, 2, 3, 4], 5, check(5, 0, 0, 0, false)),
            (&[], 0, check(0, 0, 0, 0, false)),
            (&[], 3, check(0, 3, 0, 0, false)),
            (&[0, 1, 3, 4], 5, check(4, 1, 0, 0, true)),
            (&[0, 1, 2], 5, check(3, 2, 0, 0, false)),
            (&[0, 1, 1, 2], 3, check(4, 0, 1, 0, false)),
            (&[0, 2, 1], 3, check(3, 0, 0, 0, true)),
            (&[0, 1, 2, 0], 3, check(4, 0, 1, 0, false)),
            (&[0, 1, 2, 3], 3, check(4, 0, 0, 1, false)),
            (&[1, 0], 2, check(2, 0, 0, 0, true)),
        ];
        for (arrivals, expected, verdict) in cases {
            let got = check_sequence(arrivals, *expected);
            assert_eq!(got, *verdict, "{arrivals:?} of {expected}");
            assert_eq!(
                got.passed(),
                verdict.missing + verdict.duplicates + verdict.unexpected == 0
                    && !verdict.out_of_order
            );
        }
        assert_eq!(check_sequence(&[0, 1], 2).problems(), "ok");
        assert_eq!(
            check_sequence(&[0, 2, 2], 4).problems(),
            "2 missing, 1 duplicates, out of order"
        );
    }

    #[test]
    fn quantiles_by_nearest_rank() {
        let ms = |n: u64| Duration::from_millis(n);
        assert_eq!(Quantiles::of(&[]), None);
        let one = Quantiles::of(&[ms(7)]).expect("one value");
        assert_eq!(
            (one.n, one.p50_ms, one.p99_ms, one.max_ms),
            (1, 7.0, 7.0, 7.0)
        );
        let hundred: Vec<Duration> = (1..=100).rev().map(ms).collect();
        let q = Quantiles::of(&hundred).expect("values");
        assert_eq!(
            (q.n, q.p50_ms, q.p99_ms, q.max_ms),
            (100, 50.0, 99.0, 100.0)
        );
        let q = Quantiles::of(&[ms(1), ms(2), ms(3), ms(1000)]).expect("values");
        assert_eq!((q.p50_ms, q.p99_ms, q.max_ms), (2.0, 1000.0, 1000.0));
    }
}
