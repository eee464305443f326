//! Leadership lifecycle: when this node becomes leader it confirms leadership with a quorum,
//! catches up on every committed entry, raises its HLC above the stored versions, brings the
//! replicated quota limits in line with its configuration and only then takes the request
//! subscription. When it stops being leader it releases the subscription at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use statestore_storage::keyspace::{Limits, Mutation, read};
use tokio::sync::watch;

use crate::mqtt::MqttHandle;
use crate::service::Service;

/// Runs until the leadership watch closes or `stop` flips to true.
pub async fn run(
    service: Arc<Service<MqttHandle>>,
    mqtt: MqttHandle,
    serving: Arc<AtomicBool>,
    limits: Limits,
    mut stop: watch::Receiver<bool>,
) {
    let mut leadership = service.raft().leadership();
    loop {
        if *stop.borrow() {
            return;
        }
        let current = *leadership.borrow_and_update();
        let serving_now = serving.load(Ordering::SeqCst);
        if current.is_leader && !serving_now {
            match take_over(&service, limits).await {
                Ok(()) => {
                    serving.store(true, Ordering::SeqCst);
                    mqtt.set_request_subscription(true).await;
                    tracing::info!(term = current.term, "leader: serving requests");
                }
                Err(err) => {
                    tracing::info!(error = %err, "leadership not established yet; retrying");
                    tokio::select! {
                        _ = leadership.changed() => {}
                        _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                        _ = stop.changed() => {}
                    }
                    continue;
                }
            }
        } else if !current.is_leader && serving_now {
            serving.store(false, Ordering::SeqCst);
            mqtt.set_request_subscription(false).await;
            tracing::info!(leader = ?current.leader, term = current.term, "no longer leader: released the request subscription");
        }
        tokio::select! {
            changed = leadership.changed() => if changed.is_err() { return },
            _ = stop.changed() => {}
        }
    }
}

async fn take_over(service: &Service<MqttHandle>, limits: Limits) -> Result<(), String> {
    service
        .raft()
        .ensure_linearizable()
        .await
        .map_err(|e| e.to_string())?;
    service.catch_up_clock().await?;
    let replicated = read::meta(&service.raft().view())
        .map_err(|e| e.to_string())?
        .limits;
    if replicated != limits {
        service
            .propose_internal(Mutation::SetLimits(limits))
            .await?;
        tracing::info!(
            ?limits,
            "replicated quota limits updated from this node's configuration"
        );
    }
    Ok(())
}
