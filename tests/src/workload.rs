//! Client workloads for fault tests: writers that keep writing through the official SDK while
//! nodes are killed or paused, recording exactly which writes were acknowledged and when.

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
    /// Requests that failed or timed out (their effect is unknown).
    pub failures: Vec<Instant>,
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
                            report.failures.push(sent);
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

/// Reads back every acknowledged write of `reports` through the broker on `port` and panics on
/// the first one that is not there with its value; returns how many were checked.
pub async fn verify_acked(port: u16, reports: &[WriterReport]) -> usize {
    let reader = SdkClient::connect(port, "ack-verifier").await;
    let mut checked = 0;
    for ack in reports.iter().flat_map(|r| r.acks.iter()) {
        let got = reader
            .client
            .get(ack.key.clone(), crate::sdk::TIMEOUT)
            .await
            .expect("get");
        assert_eq!(
            got.response.as_deref(),
            Some(&ack.value[..]),
            "acknowledged write to {:?} lost",
            String::from_utf8_lossy(&ack.key)
        );
        checked += 1;
    }
    reader.shutdown().await;
    checked
}
