//! What the benchmark's devices received, shared by every device task: deliveries of the
//! closed-loop phase (counted per 100 ms), of the open-loop phase (send-to-delivery latency = receipt
//! instant − the send instant stamped in the body, into an HdrHistogram and a per-second
//! timeline, with every sequence number's delivery count so duplicates and undelivered
//! messages are known), and of the drain (per device: the sequence numbers in arrival order,
//! the first delivery and the last completion).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rumqttc::v5::mqttbytes::v5::PublishProperties;

use crate::device_send::{Kind, MessageId, body_stamp};
use crate::driver::lock;
use crate::timeline::Timeline;

/// Highest latency held exactly (60 s, in µs); larger values saturate.
const HIGHEST_US: u64 = 60_000_000;
/// Closed-loop deliveries are counted per tick of this length since the origin.
const TICK: Duration = Duration::from_millis(100);

/// The `$.mid` and `$.lt` user properties of a delivery (devicebound.md §3).
pub fn delivery_fields(properties: Option<&PublishProperties>) -> Option<(&str, &str)> {
    let user = &properties?.user_properties;
    let find = |name: &str| {
        user.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    Some((find("$.mid")?, find("$.lt")?))
}

/// The open-loop phase as the devices saw it.
#[derive(Debug, Clone)]
pub struct OpenLog {
    /// Deliveries per sequence number (saturating at 255).
    seen: Vec<u8>,
    /// Send-to-delivery latency of first deliveries, µs.
    pub histogram: Histogram<u64>,
    /// Per second of the sending window: deliveries and their latency.
    pub timeline: Option<Timeline>,
    /// First deliveries.
    pub delivered: u64,
    /// Deliveries of a sequence number already delivered.
    pub duplicates: u64,
    /// Open-loop deliveries with a sequence number outside the schedule or without a stamp.
    pub unexpected: u64,
}

impl OpenLog {
    /// For `count` scheduled sends; the timeline covers `window` from `start`.
    pub fn new(count: usize, start: Instant, window: Duration) -> OpenLog {
        OpenLog {
            seen: vec![0; count],
            histogram: Histogram::new_with_bounds(1, HIGHEST_US, 3)
                .expect("constant bounds 1 µs..60 s at 3 digits are valid"),
            timeline: Some(Timeline::new(start, window)),
            delivered: 0,
            duplicates: 0,
            unexpected: 0,
        }
    }

    /// Delivery of `seq` at `at`, `latency` after it was due to be sent (`None`: no stamp).
    pub fn record(&mut self, seq: u64, latency: Option<Duration>, at: Instant) {
        let slot = usize::try_from(seq).ok().and_then(|i| self.seen.get_mut(i));
        let (Some(slot), Some(latency)) = (slot, latency) else {
            self.unexpected += 1;
            return;
        };
        *slot = slot.saturating_add(1);
        if *slot > 1 {
            self.duplicates += 1;
            return;
        }
        self.delivered += 1;
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.histogram.saturating_record(us.clamp(1, HIGHEST_US));
        if let Some(timeline) = &mut self.timeline {
            timeline.record_ok(at, latency);
        }
    }

    /// Of the sequence numbers flagged in `answered_ok`, how many were never delivered; and how
    /// many delivered ones were not answered `+OK` (e.g. their reply timed out).
    pub fn undelivered(&self, answered_ok: &[bool]) -> (u64, u64) {
        let mut undelivered = 0;
        let mut unanswered = 0;
        for (i, seen) in self.seen.iter().enumerate() {
            let ok = answered_ok.get(i).copied().unwrap_or(false);
            match (ok, *seen > 0) {
                (true, false) => undelivered += 1,
                (false, true) => unanswered += 1,
                _ => {}
            }
        }
        (undelivered, unanswered)
    }
}

/// One drain device as it saw its deliveries.
#[derive(Debug, Clone, Default)]
pub struct DrainLog {
    /// Sequence numbers in arrival order (redeliveries included).
    pub seqs: Vec<u64>,
    /// First delivery.
    pub first_delivery: Option<Instant>,
    /// Last completion handed to the client.
    pub last_completion: Option<Instant>,
}

/// What every device received.
pub struct Recorder {
    origin: Instant,
    closed: AtomicU64,
    /// Closed-loop deliveries per [`TICK`] since `origin`.
    closed_ticks: Mutex<Vec<u64>>,
    unrecognised: AtomicU64,
    open: Mutex<Option<OpenLog>>,
    drain: Vec<Mutex<DrainLog>>,
    drain_total: AtomicU64,
}

impl Recorder {
    /// For devices `0..devices`; send stamps are offsets from now.
    pub fn new(devices: usize) -> Recorder {
        Recorder {
            origin: Instant::now(),
            closed: AtomicU64::new(0),
            closed_ticks: Mutex::default(),
            unrecognised: AtomicU64::new(0),
            open: Mutex::new(None),
            drain: (0..devices).map(|_| Mutex::default()).collect(),
            drain_total: AtomicU64::new(0),
        }
    }

    /// The instant send stamps are offsets from.
    pub fn origin(&self) -> Instant {
        self.origin
    }

    /// Device `device` received message `message_id` with `body` at `at`; returns its phase
    /// (`None`: not a message id of this benchmark). Every delivery is completed regardless.
    pub fn delivered(
        &self,
        device: usize,
        message_id: &str,
        body: &[u8],
        at: Instant,
    ) -> Option<Kind> {
        let Some(id) = MessageId::parse(message_id) else {
            self.unrecognised.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        match id.kind {
            Kind::Closed => {
                self.closed.fetch_add(1, Ordering::Relaxed);
                let tick = self.tick(at);
                let mut ticks = lock(&self.closed_ticks);
                if ticks.len() <= tick {
                    ticks.resize(tick + 1, 0);
                }
                ticks[tick] += 1;
            }
            Kind::Open => {
                let latency =
                    body_stamp(body).map(|stamp| at.saturating_duration_since(self.origin + stamp));
                match lock(&self.open).as_mut() {
                    Some(log) => log.record(id.seq, latency, at),
                    None => {
                        self.unrecognised.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Kind::Drain => {
                let Some(log) = self.drain.get(device) else {
                    self.unrecognised.fetch_add(1, Ordering::Relaxed);
                    return None;
                };
                let mut log = lock(log);
                log.seqs.push(id.seq);
                log.first_delivery.get_or_insert(at);
                self.drain_total.fetch_add(1, Ordering::Relaxed);
            }
        }
        Some(id.kind)
    }

    /// Device `device` handed the completion of a drain message to its client at `at`.
    pub fn drain_completed(&self, device: usize, at: Instant) {
        if let Some(log) = self.drain.get(device) {
            lock(log).last_completion = Some(at);
        }
    }

    /// Closed-loop deliveries so far.
    pub fn closed(&self) -> u64 {
        self.closed.load(Ordering::Relaxed)
    }

    /// The tick `at` falls in.
    fn tick(&self, at: Instant) -> usize {
        let since = at.saturating_duration_since(self.origin);
        usize::try_from(since.as_millis() / TICK.as_millis()).unwrap_or(usize::MAX)
    }

    /// Closed-loop deliveries from `start` to `end`, to the nearest 100 ms.
    pub fn closed_between(&self, start: Instant, end: Instant) -> u64 {
        let (from, to) = (self.tick(start), self.tick(end));
        let ticks = lock(&self.closed_ticks);
        ticks.iter().take(to).skip(from).sum()
    }

    /// Deliveries whose message id this benchmark did not write (or came out of their phase).
    pub fn unrecognised(&self) -> u64 {
        self.unrecognised.load(Ordering::Relaxed)
    }

    /// Starts recording the open-loop phase.
    pub fn start_open(&self, log: OpenLog) {
        *lock(&self.open) = Some(log);
    }

    /// Runs `f` on the open-loop log (`None` before [`Recorder::start_open`]).
    pub fn with_open<R>(&self, f: impl FnOnce(&OpenLog) -> R) -> Option<R> {
        lock(&self.open).as_ref().map(f)
    }

    /// Stops recording the open-loop phase and returns what was recorded.
    pub fn take_open(&self) -> Option<OpenLog> {
        lock(&self.open).take()
    }

    /// Drain deliveries so far, every device.
    pub fn drain_total(&self) -> u64 {
        self.drain_total.load(Ordering::Relaxed)
    }

    /// A copy of every drain device's log.
    pub fn drain_logs(&self) -> Vec<DrainLog> {
        self.drain.iter().map(|log| lock(log).clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_fields_of_a_delivery() {
        let props = |pairs: &[(&str, &str)]| PublishProperties {
            user_properties: pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..Default::default()
        };
        let full = props(&[("$.mid", "d:3"), ("$.lt", "tok"), ("$.exp", "x")]);
        assert_eq!(delivery_fields(Some(&full)), Some(("d:3", "tok")));
        assert_eq!(delivery_fields(Some(&props(&[("$.mid", "d:3")]))), None);
        assert_eq!(delivery_fields(Some(&props(&[("$.lt", "t")]))), None);
        assert_eq!(delivery_fields(None), None);
    }

    #[test]
    fn open_loop_latency_duplicates_and_undelivered() {
        let start = Instant::now();
        let mut log = OpenLog::new(4, start, Duration::from_secs(1));
        log.record(0, Some(ms(2)), start + ms(10));
        log.record(1, Some(ms(40)), start + ms(50));
        log.record(1, Some(ms(900)), start + ms(950)); // redelivery: not a latency sample
        log.record(3, Some(ms(5)), start + ms(60));
        log.record(9, Some(ms(1)), start + ms(60)); // not scheduled
        log.record(2, None, start + ms(60)); // no stamp
        assert_eq!((log.delivered, log.duplicates, log.unexpected), (3, 1, 2));
        assert_eq!(log.histogram.len(), 3);
        assert!((log.histogram.max() as f64 - 40_000.0).abs() < 50.0);
        // 0, 1 and 2 answered +OK; 3 delivered although its reply never came
        assert_eq!(log.undelivered(&[true, true, true, false]), (1, 1));
        let rows = log
            .timeline
            .as_ref()
            .map(Timeline::seconds)
            .unwrap_or_default();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].ops, 3);
    }

    #[test]
    fn the_recorder_sorts_deliveries_by_phase() {
        let recorder = Recorder::new(2);
        let t = recorder.origin() + ms(100);
        assert_eq!(recorder.delivered(0, "c:1", b"", t), Some(Kind::Closed));
        assert_eq!(recorder.delivered(0, "nonsense", b"", t), None);
        assert_eq!(
            recorder.delivered(0, "o:0", &crate::device_send::stamped_body(ms(90), 16), t),
            Some(Kind::Open)
        );
        assert_eq!(recorder.unrecognised(), 2, "open-loop before it started");
        recorder.start_open(OpenLog::new(1, recorder.origin(), Duration::from_secs(1)));
        let body = crate::device_send::stamped_body(ms(90), 16);
        recorder.delivered(1, "o:0", &body, t);
        let latency = recorder.with_open(|log| log.histogram.max());
        assert!(
            latency.is_some_and(|us| (9_990..=10_010).contains(&us)),
            "{latency:?}"
        );
        recorder.delivered(1, "d:0", b"", t);
        recorder.delivered(1, "d:1", b"", t + ms(1));
        recorder.drain_completed(1, t + ms(2));
        assert_eq!(recorder.delivered(7, "d:0", b"", t), None, "no such device");
        assert_eq!(recorder.drain_total(), 2);
        let logs = recorder.drain_logs();
        assert_eq!(logs[1].seqs, [0, 1]);
        assert_eq!(logs[1].first_delivery, Some(t));
        assert_eq!(logs[1].last_completion, Some(t + ms(2)));
        assert!(logs[0].seqs.is_empty());
        assert_eq!(recorder.closed(), 1);
        let origin = recorder.origin();
        recorder.delivered(0, "c:2", b"", origin + ms(250));
        recorder.delivered(0, "c:3", b"", origin + ms(1_050));
        assert_eq!(recorder.closed_between(origin, origin + ms(1_000)), 2);
        assert_eq!(
            recorder.closed_between(origin + ms(200), origin + ms(2_000)),
            2
        );
        assert_eq!(
            recorder.closed_between(origin + ms(1_000), origin + ms(9_000)),
            1
        );
        assert_eq!(
            recorder.closed_between(origin + ms(300), origin + ms(1_000)),
            0
        );
        assert!(recorder.take_open().is_some());
        assert!(recorder.take_open().is_none());
    }
}
