//! The leader's expiry sweeper (§8): finds keys past their expiry through the expiry index and
//! proposes their removal in bounded batches. Apply removes only keys still due at the entry's
//! time, so a key renewed after the scan survives.

use std::sync::Arc;
use std::time::Duration;

use statestore_storage::keyspace::read;
use statestore_storage::machine::read as machine_read;
use statestore_storage::machine::{Mutation, Outcome};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::service::Service;
use crate::transport::Outbox;
use crate::verdict::Unavailable;

/// Runs until `stop` flips to true.
pub async fn run<O: Outbox>(
    service: Arc<Service<O>>,
    interval: Duration,
    batch: usize,
    mut stop: watch::Receiver<bool>,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
        if !service.is_serving() {
            continue;
        }
        // Drain the backlog batch by batch, then wait for the next tick.
        loop {
            match sweep_once(&service, batch).await {
                Ok(removed_full_batch) if removed_full_batch => continue,
                Ok(_) => break,
                Err(err) => {
                    tracing::debug!(error = %err, "expiry sweep failed; retrying next tick");
                    break;
                }
            }
        }
    }
}

/// One batch. Returns true if the batch was full (more may be due).
async fn sweep_once<O: Outbox>(service: &Service<O>, batch: usize) -> Result<bool, Unavailable> {
    let started = Instant::now();
    let metrics = &service.metrics().store;
    let view = service.raft().view();
    let meta = read::meta(&view)?;
    let time = machine_read::read_time(&meta, service.wall_ms());
    let due = read::due_keys(&view, time, batch)?;
    metrics
        .due_keys
        .set(i64::try_from(due.len()).unwrap_or(i64::MAX));
    if due.is_empty() {
        return Ok(false);
    }
    let full = due.len() == batch;
    let keys = due
        .into_iter()
        .map(statestore_storage::machine::ByteBuf::from)
        .collect();
    let outcome = service.propose_internal(Mutation::Expire { keys }).await?;
    if let Outcome::Expired { keys } = outcome {
        metrics.keys_expired_total.inc_by(u64::from(keys));
        tracing::debug!(keys, "expired keys removed");
    }
    metrics
        .sweep_duration_seconds
        .observe(started.elapsed().as_secs_f64());
    Ok(full)
}
