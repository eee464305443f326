//! Client workloads for fault tests: writers that keep writing through the official SDK while
//! nodes are killed or paused, recording exactly which writes were acknowledged and when.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use azure_iot_operations_services::state_store::SetOptions;

use crate::sdk::SdkClient;

/// One acknowledged write.
#[derive(Debug, Clone)]
pub struct Ack {
    /// Key written.
    pub key: Vec<u8>,
    /// Value written.
    pub value: Vec<u8>,
    /// When the request was sent.
    pub sent: Instant,
    /// When the acknowledgement arrived.
    pub acked: Instant,
}

/// What a writer did.
#[derive(Debug, Default)]
pub struct WriterReport {
    /// Acknowledged writes, in order.
    pub acks: Vec<Ack>,
    /// Requests that failed or timed out, as (key, value, sent): their effect is unknown, and a
    /// later read may find any of them applied.
    pub unknown_outcome: Vec<(Vec<u8>, Vec<u8>, Instant)>,
}

/// A background writer.
pub struct Writer {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<WriterReport>,
}

/// How a writer chooses keys.
#[derive(Debug, Clone, Copy)]
pub enum KeyPattern {
    /// A fresh key per write: `<prefix>-<seq>` = `<seq>`.
    Unique,
    /// One key `<prefix>` overwritten with an increasing counter.
    Register,
    /// `n` keys `<prefix>-<seq mod n>` written in turn, so the state stays bounded however
    /// long the writer runs.
    Ring(u64),
}

impl Writer {
    /// Connects an SDK client `id` and writes until stopped, one request at a time, with
    /// `timeout` per request.
    pub async fn start(port: u16, id: &str, pattern: KeyPattern, timeout: Duration) -> Writer {
        Writer::start_sized(port, id, pattern, timeout, 0, u64::MAX).await
    }

    /// [`Writer::start`] with values of at least `value_bytes` bytes (the sequence number,
    /// padded), for workloads that must move many bytes (e.g. to fill log chunks); it stops
    /// on its own after `max_writes` requests (so a long run's state stays bounded).
    pub async fn start_sized(
        port: u16,
        id: &str,
        pattern: KeyPattern,
        timeout: Duration,
        value_bytes: usize,
        max_writes: u64,
    ) -> Writer {
        let sdk = SdkClient::connect(port, id).await;
        let stop = Arc::new(AtomicBool::new(false));
        let prefix = id.to_owned();
        let task = tokio::spawn({
            let stop = stop.clone();
            async move {
                let mut report = WriterReport::default();
                let mut seq: u64 = 0;
                while !stop.load(Ordering::SeqCst) && seq < max_writes {
                    seq += 1;
                    let key = match pattern {
                        KeyPattern::Unique => format!("{prefix}-{seq:08}").into_bytes(),
                        KeyPattern::Register => prefix.clone().into_bytes(),
                        KeyPattern::Ring(n) => {
                            format!("{prefix}-{:08}", seq % n.max(1)).into_bytes()
                        }
                    };
                    let value = format!("{seq:0>value_bytes$}", value_bytes = value_bytes.max(16))
                        .into_bytes();
                    let sent = Instant::now();
                    match sdk
                        .client
                        .set(
                            key.clone(),
                            value.clone(),
                            timeout,
                            None,
                            SetOptions::default(),
                        )
                        .await
                    {
                        Ok(response) if response.response => {
                            report.acks.push(Ack {
                                key,
                                value,
                                sent,
                                acked: Instant::now(),
                            });
                        }
                        _ => {
                            report.unknown_outcome.push((key, value, sent));
                            // A short pause so a dead broker route does not become a busy loop.
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                }
                sdk.shutdown().await;
                report
            }
        });
        Writer { stop, task }
    }

    /// Stops and returns the report.
    pub async fn finish(self) -> WriterReport {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.expect("writer task")
    }
}

/// Starts `count` writers of unique keys named `<prefix>-<i>`, each with `timeout` per request.
pub async fn start_writers(
    port: u16,
    prefix: &str,
    count: usize,
    timeout: Duration,
) -> Vec<Writer> {
    let mut writers = Vec::with_capacity(count);
    for i in 0..count {
        writers
            .push(Writer::start(port, &format!("{prefix}-{i}"), KeyPattern::Unique, timeout).await);
    }
    writers
}

/// Stops every writer and returns their reports, in order.
pub async fn finish_writers(writers: Vec<Writer>) -> Vec<WriterReport> {
    let mut reports = Vec::with_capacity(writers.len());
    for writer in writers {
        reports.push(writer.finish().await);
    }
    reports
}

/// Retries a SET of `key` through `sdk`, 1 s per attempt and a new value `v<attempt>` each
/// time, until one is acknowledged; returns that value. Panics (naming `what`) after `within`.
pub async fn set_until_acknowledged(
    sdk: &SdkClient,
    key: &[u8],
    within: Duration,
    what: &str,
) -> Vec<u8> {
    let deadline = Instant::now() + within;
    for attempt in 1u64.. {
        let value = format!("v{attempt}").into_bytes();
        let sent = Instant::now();
        let reply = sdk
            .client
            .set(
                key.to_vec(),
                value.clone(),
                Duration::from_secs(1),
                None,
                SetOptions::default(),
            )
            .await;
        if reply.is_ok_and(|r| r.response) {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: no write acknowledged within {within:?}"
        );
        // An error that came back at once (no session yet) must not become a busy loop.
        if sent.elapsed() < Duration::from_millis(100) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    unreachable!("the attempts never run out")
}

/// The first acknowledgement (over all reports) of a request sent after `since`, as a delay.
pub fn first_ack_after(reports: &[WriterReport], since: Instant) -> Option<Duration> {
    reports
        .iter()
        .flat_map(|r| r.acks.iter())
        .filter(|a| a.sent >= since)
        .map(|a| a.acked - since)
        .min()
}

/// Median and max of a list of durations.
pub fn median_and_max(mut values: Vec<Duration>) -> (Duration, Duration) {
    values.sort();
    let median = values.get(values.len() / 2).copied().unwrap_or_default();
    let max = values.last().copied().unwrap_or_default();
    (median, max)
}

/// What a key may hold after `reports` ran: its last acknowledged value, or the value of any
/// write to it whose outcome is unknown (a request that got no answer may take effect at any
/// moment after it was sent, even after a later write's acknowledgement). Returns, per key
/// with an acknowledged write, the last acknowledgement and those other values.
pub fn allowed_values(reports: &[WriterReport]) -> BTreeMap<Vec<u8>, (&Ack, Vec<&[u8]>)> {
    let mut last: BTreeMap<Vec<u8>, (&Ack, Vec<&[u8]>)> = BTreeMap::new();
    for ack in reports.iter().flat_map(|r| r.acks.iter()) {
        let entry = last.entry(ack.key.clone()).or_insert((ack, Vec::new()));
        if ack.acked >= entry.0.acked {
            entry.0 = ack;
        }
    }
    for (key, value, _) in reports.iter().flat_map(|r| r.unknown_outcome.iter()) {
        if let Some((_, unknown)) = last.get_mut(key) {
            unknown.push(value);
        }
    }
    last
}

/// Reads back every key with an acknowledged write in `reports` through the broker on `port`
/// and panics on the first that holds neither its last acknowledged value nor that of a write
/// of unknown outcome (see [`allowed_values`]); returns how many acknowledgements that covered.
pub async fn verify_acked(port: u16, reports: &[WriterReport]) -> usize {
    let reader = SdkClient::connect(port, "ack-verifier").await;
    for (key, (ack, unknown)) in allowed_values(reports) {
        let got = reader
            .client
            .get(key.clone(), crate::sdk::TIMEOUT)
            .await
            .expect("get")
            .response;
        let holds = got.as_deref();
        assert!(
            holds == Some(&ack.value[..]) || unknown.iter().any(|v| holds == Some(*v)),
            "acknowledged write to {:?} lost: it holds {:?}, acknowledged {:?} ({} writes of unknown outcome)",
            String::from_utf8_lossy(&key),
            holds.map(|v| String::from_utf8_lossy(&v[..v.len().min(40)]).into_owned()),
            String::from_utf8_lossy(&ack.value[..ack.value.len().min(40)]),
            unknown.len(),
        );
    }
    reader.shutdown().await;
    reports.iter().map(|r| r.acks.len()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack(key: &str, value: &str, sent: Instant, acked: Instant) -> Ack {
        Ack {
            key: key.into(),
            value: value.into(),
            sent,
            acked,
        }
    }

    #[test]
    fn a_key_may_hold_its_last_acknowledgement_or_any_write_of_unknown_outcome() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let report = WriterReport {
            acks: vec![
                ack("k0", "1", at(0), at(1)),
                ack("k1", "2", at(2), at(3)),
                ack("k0", "3", at(4), at(5)),
            ],
            unknown_outcome: vec![
                // Sent before k0's last acknowledgement, but it may still take effect.
                (b"k0".to_vec(), b"0".to_vec(), at(1)),
                (b"k0".to_vec(), b"4".to_vec(), at(6)),
                // A key never acknowledged owes nothing.
                (b"k2".to_vec(), b"5".to_vec(), at(8)),
            ],
        };
        let allowed = allowed_values(std::slice::from_ref(&report));
        assert_eq!(allowed.len(), 2);
        let (last, unknown) = &allowed[&b"k0".to_vec()];
        assert_eq!(last.value, b"3");
        assert_eq!(unknown, &vec![&b"0"[..], &b"4"[..]]);
        let (last, unknown) = &allowed[&b"k1".to_vec()];
        assert_eq!(last.value, b"2");
        assert!(unknown.is_empty());
    }
}
