//! The closed-loop load driver shared by every target: N connections, each running K workers
//! that issue one request after another (so exactly K are outstanding per connection), picking
//! operations and keys from the plan, and counting into per-connection [`CellStats`] that are
//! merged at the end. What a "connection" is (an MQTT client, an etcd client) is the
//! [`Requester`]'s business.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::stats::CellStats;
use crate::timeline::Timeline;
use crate::workload::{self, Mix, Op, Rng, Values};

/// How one request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The expected kind of reply; `received` is when it arrived.
    Ok {
        /// From just before sending to receipt.
        latency: Duration,
        /// Receipt time.
        received: Instant,
    },
    /// A wrong reply, or the request could not be sent.
    Error(String),
    /// No reply within the timeout.
    Timeout,
}

/// One connection to a target that can run requests concurrently (`&self`).
pub trait Requester: Send + Sync + 'static {
    /// Runs `op` on `key` (with `value` for writes) and reports how it ended.
    fn request(&self, op: Op, key: &[u8], value: &Bytes) -> impl Future<Output = Outcome> + Send;

    /// Closes the connection politely (default: nothing to do).
    fn close(&self) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// The longest fill a timeline covers (a 10M-key load takes ~15 min here); later outcomes are
/// left out of it.
pub const FILL_TIMELINE_LIMIT: Duration = Duration::from_secs(4 * 3600);

/// What the workers do.
#[derive(Debug, Clone)]
pub enum Plan {
    /// Random keys from `0..keys` with operations from `mix`; requests started before
    /// `window_start` are warm-up, none are started after `end`.
    Timed {
        /// Operation mix.
        mix: Mix,
        /// Key space.
        keys: u64,
        /// End of warm-up.
        window_start: Instant,
        /// End of the measurement window.
        end: Instant,
        /// Where outcomes are also bucketed per second of the window, if asked for.
        timeline: Option<Arc<Mutex<Timeline>>>,
    },
    /// SET every key of `0..keys` once, in order, shared by all workers.
    Fill {
        /// Next key to write.
        next: Arc<AtomicU64>,
        /// Keys to write.
        keys: u64,
        /// Where outcomes are also bucketed per second since the timeline was asked for.
        timeline: Option<Arc<Mutex<Timeline>>>,
    },
}

impl Plan {
    /// A timed plan whose warm-up starts now.
    pub fn timed(mix: Mix, keys: u64, warmup: Duration, duration: Duration) -> Plan {
        let window_start = Instant::now() + warmup;
        Plan::Timed {
            mix,
            keys: keys.max(1),
            window_start,
            end: window_start + duration,
            timeline: None,
        }
    }

    /// The same plan, also recording a per-second [`Timeline`] of its window (the timeline
    /// ends up in the [`CellStats`] that [`drive`] returns). A fill plan's timeline starts now
    /// and grows until the fill ends (at most [`FILL_TIMELINE_LIMIT`]).
    pub fn with_timeline(self) -> Plan {
        match self {
            Plan::Timed {
                mix,
                keys,
                window_start,
                end,
                timeline: _,
            } => Plan::Timed {
                mix,
                keys,
                window_start,
                end,
                timeline: Some(Arc::new(Mutex::new(Timeline::new(
                    window_start,
                    end.saturating_duration_since(window_start),
                )))),
            },
            Plan::Fill {
                next,
                keys,
                timeline: _,
            } => Plan::Fill {
                next,
                keys,
                timeline: Some(Arc::new(Mutex::new(Timeline::open_ended(
                    Instant::now(),
                    FILL_TIMELINE_LIMIT,
                )))),
            },
        }
    }

    /// The measurement window `[start, end)` of a timed plan.
    pub fn window(&self) -> Option<(Instant, Instant)> {
        match self {
            Plan::Timed {
                window_start, end, ..
            } => Some((*window_start, *end)),
            Plan::Fill { .. } => None,
        }
    }

    /// The plan's timeline, if it records one.
    fn timeline_handle(&self) -> Option<&Arc<Mutex<Timeline>>> {
        match self {
            Plan::Timed { timeline, .. } | Plan::Fill { timeline, .. } => timeline.as_ref(),
        }
    }

    /// Puts an outcome known at `at` into the timeline, if there is one.
    fn note(&self, outcome: &Outcome, at: Instant) {
        let Some(timeline) = self.timeline_handle() else {
            return;
        };
        let mut timeline = lock(timeline);
        match outcome {
            Outcome::Ok { latency, received } => timeline.record_ok(*received, *latency),
            Outcome::Error(_) => timeline.record_error(at),
            Outcome::Timeout => timeline.record_timeout(at),
        }
    }

    /// A copy of the timeline recorded so far.
    fn timeline(&self) -> Option<Timeline> {
        self.timeline_handle().map(|t| lock(t).clone())
    }

    /// A fill plan for `0..keys`.
    pub fn fill(keys: u64) -> Plan {
        Plan::Fill {
            next: Arc::new(AtomicU64::new(0)),
            keys,
            timeline: None,
        }
    }

    /// For a fill plan, the counter of keys handed out so far (for progress reports).
    pub fn fill_counter(&self) -> Option<Arc<AtomicU64>> {
        match self {
            Plan::Fill { next, .. } => Some(next.clone()),
            Plan::Timed { .. } => None,
        }
    }

    /// The next request, and whether it starts inside the window; `None` when done.
    fn next(&self, rng: &mut Rng) -> Option<(Op, Vec<u8>, bool)> {
        match self {
            Plan::Timed {
                mix,
                keys,
                window_start,
                end,
                ..
            } => {
                let now = Instant::now();
                if now >= *end {
                    return None;
                }
                let op = mix.pick(rng.next_u64());
                Some((op, workload::key(rng.below(*keys)), now >= *window_start))
            }
            Plan::Fill { next, keys, .. } => {
                let i = next.fetch_add(1, Ordering::Relaxed);
                (i < *keys).then(|| (Op::Set, workload::key(i), true))
            }
        }
    }

    /// Whether a reply received at `at` counts for throughput.
    fn in_window(&self, at: Instant) -> bool {
        match self {
            Plan::Timed {
                window_start, end, ..
            } => at >= *window_start && at < *end,
            Plan::Fill { .. } => true,
        }
    }
}

/// Locks a mutex, ignoring poisoning (the data are counters).
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs `plan` over `connections` with `in_flight` workers each, then closes them.
pub async fn drive<R: Requester>(
    connections: Vec<R>,
    in_flight: usize,
    plan: Plan,
    values: Values,
) -> anyhow::Result<CellStats> {
    let mut tasks = Vec::with_capacity(connections.len());
    for (index, connection) in connections.into_iter().enumerate() {
        let plan = plan.clone();
        let values = values.clone();
        tasks.push(tokio::spawn(async move {
            let stats = Mutex::new(CellStats::new());
            let workers = (0..in_flight.max(1)).map(|worker| {
                let mut rng = Rng::new(((index as u64) << 24) | worker as u64);
                let (stats, plan, values, connection) = (&stats, &plan, &values, &connection);
                async move {
                    while let Some((op, key, started_in_window)) = plan.next(&mut rng) {
                        let value = values.for_key(&key);
                        let outcome = connection.request(op, &key, &value).await;
                        plan.note(&outcome, Instant::now());
                        let mut stats = lock(stats);
                        match outcome {
                            Outcome::Ok { latency, received } => stats.record_ok(
                                latency,
                                started_in_window,
                                plan.in_window(received),
                            ),
                            Outcome::Error(kind) => stats.record_error(&kind),
                            Outcome::Timeout => stats.record_timeout(),
                        }
                    }
                }
            });
            futures::future::join_all(workers).await;
            connection.close().await;
            stats.into_inner().unwrap_or_else(|p| p.into_inner())
        }));
    }
    let mut total = CellStats::new();
    for task in tasks {
        total.merge(&task.await?);
    }
    total.timeline = plan.timeline();
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers every request after 1 ms; DEL is an error, GET of key 0 times out.
    struct Fake;

    impl Requester for Fake {
        fn request(&self, op: Op, key: &[u8], _: &Bytes) -> impl Future<Output = Outcome> + Send {
            let timeout = op == Op::Get && key == workload::key(0);
            async move {
                let start = Instant::now();
                tokio::time::sleep(Duration::from_millis(1)).await;
                match op {
                    Op::Del => Outcome::Error("-ERR nope".to_owned()),
                    _ if timeout => Outcome::Timeout,
                    _ => Outcome::Ok {
                        latency: start.elapsed(),
                        received: Instant::now(),
                    },
                }
            }
        }
    }

    #[tokio::test]
    async fn fill_writes_every_key_once() -> anyhow::Result<()> {
        let stats = drive(
            vec![Fake, Fake],
            3,
            Plan::fill(100),
            Values::Same(Bytes::new()),
        )
        .await?;
        assert_eq!(stats.succeeded, 100);
        assert_eq!(stats.completed_in_window, 100);
        assert_eq!(stats.histogram.len(), 100);
        assert_eq!(stats.errors + stats.timeouts, 0);
        Ok(())
    }

    #[tokio::test]
    async fn timed_plan_counts_errors_and_timeouts() -> anyhow::Result<()> {
        let plan = Plan::timed(
            Mix::Mixed,
            2,
            Duration::from_millis(20),
            Duration::from_millis(100),
        );
        let stats = drive(vec![Fake], 4, plan, Values::Same(Bytes::new())).await?;
        assert!(stats.succeeded > 0);
        assert!(stats.completed_in_window <= stats.succeeded);
        assert!(stats.histogram.len() <= stats.succeeded);
        assert!(stats.errors > 0, "DEL is 10 % of the mix");
        assert!(stats.timeouts > 0, "GET of key 0 is ~25 % of the mix");
        assert_eq!(stats.error_kinds.get("-ERR nope"), Some(&stats.errors));
        Ok(())
    }

    #[tokio::test]
    async fn timeline_counts_match_the_window() -> anyhow::Result<()> {
        let plan =
            Plan::timed(Mix::Mixed, 2, Duration::ZERO, Duration::from_secs(1)).with_timeline();
        assert!(plan.window().is_some());
        let stats = drive(vec![Fake, Fake], 4, plan, Values::Same(Bytes::new())).await?;
        let rows = stats.timeline_rows();
        assert_eq!(rows.len(), 1);
        assert!(rows[0].ops > 0);
        assert_eq!(rows[0].ops, stats.completed_in_window);
        assert!(rows[0].errors > 0 && rows[0].errors <= stats.errors);
        assert!(rows[0].timeouts <= stats.timeouts);
        let plain = drive(vec![Fake], 1, Plan::fill(3), Values::Same(Bytes::new())).await?;
        assert!(plain.timeline.is_none());
        assert!(Plan::fill(3).with_timeline().window().is_none());
        Ok(())
    }

    #[tokio::test]
    async fn a_fill_timeline_holds_every_reply() -> anyhow::Result<()> {
        let plan = Plan::fill(50).with_timeline();
        let stats = drive(vec![Fake, Fake], 3, plan, Values::Same(Bytes::new())).await?;
        let rows = stats.timeline_rows();
        assert!(
            !rows.is_empty(),
            "a 50-key fill answers within its first second"
        );
        assert_eq!(rows.iter().map(|r| r.ops).sum::<u64>(), 50);
        assert_eq!(rows.iter().map(|r| r.errors + r.timeouts).sum::<u64>(), 0);
        Ok(())
    }
}
