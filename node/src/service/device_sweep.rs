//! The leader's device-bound sweeper (devicebound.md §1, §4): asks the replicated state when
//! work is next due (`read::next_*`, no scans), sleeps until then (at most a second), and
//! proposes bounded batches of `ExpireLocks`, `ExpireMessages`, `CutFeedbackBatch`,
//! `ExpireFeedbackLocks` and `ExpireFeedbackBatches`. Enqueued feedback batches are locked
//! (`DeliverFeedback`) and, once committed, published QoS 1 to
//! `messages/servicebound/feedback`; a PUBACK 0x10 gives the batch back
//! (`UndeliverFeedback`, see [`super::device_push`]) and pauses feedback publishing a moment.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use statestore_storage::devicebound::{
    DeviceCommand, DeviceResult, FeedbackDelivery, read as device_read,
};
use statestore_storage::machine::Outcome;
use tokio::sync::watch;

use crate::service::Service;
use crate::service::device_push::DevicePush;
use crate::transport::{OutboundKind, OutboundMessage, Outbox};
use crate::verdict::Unavailable;
use statestore_protocol::devicebound::{
    FEEDBACK_CONTENT_TYPE, FEEDBACK_TOPIC, FeedbackRecord, encode_feedback_batch,
    feedback_user_properties, message_expiry_interval_secs,
};

/// Work one sweep entry may do.
const BATCH: u32 = 256;
/// Entries of one kind per sweep round (the rest waits for the next round).
const MAX_ENTRIES_PER_ROUND: usize = 16;
/// Feedback batches locked per `DeliverFeedback`.
const FEEDBACK_PER_DELIVERY: u32 = 16;
/// Longest sleep between rounds (new work of a new SEND is noticed within it).
const MAX_SLEEP: Duration = Duration::from_secs(1);
/// Shortest sleep between rounds.
const MIN_SLEEP: Duration = Duration::from_millis(20);

/// Runs until `stop` flips to true.
pub async fn run<O: Outbox>(push: Arc<DevicePush<O>>, mut stop: watch::Receiver<bool>) {
    let service = push.service().clone();
    loop {
        if *stop.borrow() {
            return;
        }
        let wait = if service.is_serving() {
            match sweep(&service, &push).await {
                Ok(wait) => wait,
                Err(err) => {
                    tracing::debug!(error = %err, "device-bound sweep failed; retrying");
                    MAX_SLEEP
                }
            }
        } else {
            MAX_SLEEP
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.changed() => {}
        }
    }
}

/// When each kind of sweep is next due (ms since the epoch), on the current state.
fn next_due<O: Outbox>(service: &Service<O>) -> Result<[(Option<u64>, Step); 5], Unavailable> {
    let view = service.raft().view();
    let meta = device_read::meta(&view)?;
    let (locks, messages) =
        service.read_device_index(|index| (index.next_lock_expiry(), index.next_message_expiry()));
    Ok([
        (locks, Step::Locks),
        (messages, Step::Messages),
        (device_read::next_feedback_cut(&meta), Step::Cut),
        (
            device_read::next_feedback_lock_expiry(&view)?,
            Step::FeedbackLocks,
        ),
        (
            device_read::next_feedback_expiry(&view)?,
            Step::FeedbackBatches,
        ),
    ])
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Locks,
    Messages,
    Cut,
    FeedbackLocks,
    FeedbackBatches,
}

impl Step {
    fn command(self) -> DeviceCommand {
        match self {
            Step::Locks => DeviceCommand::ExpireLocks { max: BATCH },
            Step::Messages => DeviceCommand::ExpireMessages { max: BATCH },
            Step::Cut => DeviceCommand::CutFeedbackBatch,
            Step::FeedbackLocks => DeviceCommand::ExpireFeedbackLocks { max: BATCH },
            Step::FeedbackBatches => DeviceCommand::ExpireFeedbackBatches { max: BATCH },
        }
    }

    /// True if the entry did a full batch (more may be due).
    fn full(result: &DeviceResult) -> bool {
        match result {
            DeviceResult::LocksExpired { count } | DeviceResult::Expired { count } => {
                *count >= BATCH
            }
            DeviceResult::FeedbackCut { records } => *records > 0,
            _ => false,
        }
    }
}

/// One round: every due step, then feedback publishing. Returns how long to sleep.
async fn sweep<O: Outbox>(
    service: &Service<O>,
    push: &DevicePush<O>,
) -> Result<Duration, Unavailable> {
    let now = service.wall_ms();
    for (due, step) in next_due(service)? {
        if due.is_none_or(|at| at > now) {
            continue;
        }
        for _ in 0..MAX_ENTRIES_PER_ROUND {
            if !service.is_serving() {
                return Ok(MAX_SLEEP);
            }
            let outcome = service.propose_device(None, None, step.command()).await?;
            let Outcome::Device(outcome) = outcome else {
                break;
            };
            if !Step::full(&outcome.result) {
                break;
            }
        }
    }
    if !push.feedback_paused() {
        deliver_feedback(service).await?;
    }
    let now = service.wall_ms();
    let next = next_due(service)?
        .iter()
        .filter_map(|(due, _)| *due)
        .min()
        .map_or(MAX_SLEEP, |at| {
            Duration::from_millis(at.saturating_sub(now))
        });
    Ok(next.clamp(MIN_SLEEP, MAX_SLEEP))
}

/// Locks Enqueued feedback batches and publishes them after commit.
async fn deliver_feedback<O: Outbox>(service: &Service<O>) -> Result<(), Unavailable> {
    for _ in 0..MAX_ENTRIES_PER_ROUND {
        if !service.is_serving() || !device_read::feedback_deliverable(&service.raft().view())? {
            return Ok(());
        }
        let outcome = service
            .propose_device(
                None,
                None,
                DeviceCommand::DeliverFeedback {
                    max: FEEDBACK_PER_DELIVERY,
                },
            )
            .await?;
        let Outcome::Device(outcome) = outcome else {
            return Ok(());
        };
        let DeviceResult::FeedbackDelivered { batches } = outcome.result else {
            return Ok(());
        };
        if batches.is_empty() {
            return Ok(());
        }
        for batch in batches {
            if service.is_serving() {
                service
                    .outbox()
                    .publish(feedback_message(batch, service.wall_ms()))
                    .await;
            }
        }
    }
    Ok(())
}

/// The publish of one locked feedback batch (§4).
pub fn feedback_message(batch: FeedbackDelivery, now_ms: u64) -> OutboundMessage {
    let texts: Vec<(String, String, Option<String>)> = batch
        .records
        .iter()
        .map(|r| {
            (
                String::from_utf8_lossy(&r.original_message_id).into_owned(),
                String::from_utf8_lossy(&r.device).into_owned(),
                r.generation
                    .as_ref()
                    .map(|g| String::from_utf8_lossy(g).into_owned()),
            )
        })
        .collect();
    let records: Vec<FeedbackRecord<'_>> = batch
        .records
        .iter()
        .zip(&texts)
        .map(
            |(record, (message_id, device, generation))| FeedbackRecord {
                original_message_id: message_id,
                outcome_at_ms: record.time_ms,
                status: record.status,
                device_id: device,
                device_generation_id: generation.as_deref(),
            },
        )
        .collect();
    OutboundMessage {
        topic: FEEDBACK_TOPIC.to_owned(),
        payload: Bytes::from(encode_feedback_batch(&records)),
        correlation_data: None,
        response_topic: None,
        message_expiry_secs: Some(message_expiry_interval_secs(batch.expires_at_ms, now_ms)),
        content_type: Some(FEEDBACK_CONTENT_TYPE),
        user_properties: feedback_user_properties(&batch.token, batch.cut_ms)
            .into_iter()
            .map(|(name, value)| (Cow::Owned(name), value))
            .collect(),
        kind: OutboundKind::Feedback { token: batch.token },
    }
}
