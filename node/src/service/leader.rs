//! Leadership lifecycle, keyed by term. When Raft makes this node leader of term `t`, it
//! confirms leadership with a quorum, catches up on every committed entry, raises its HLC above
//! the stored versions, brings the replicated quota limits and device-bound settings in line
//! with its configuration and
//! only then takes the request subscription and runs leader duties (sweeps, notifications) for
//! term `t`. It gives them up at once when it is no longer leader, when the term changes, or
//! when no quorum has acknowledged it for longer than the quorum timeout (a leader cut off
//! from its peers: openraft keeps it leader until it hears a higher term, but it could commit
//! nothing). Duties come back only after a fresh quorum-confirmed take-over. A leader cut off
//! from the broker cannot receive requests at all: it hands leadership to another voter.
//!
//! [`decide`] is the pure rule; [`run`] applies it to the live Raft and MQTT session. Its
//! timing (quorum age, broker outage, hand-over spacing) runs on [`tokio::time::Instant`], the
//! clock openraft's own quorum acknowledgements are measured on.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use statestore_raft::Leadership;
use statestore_storage::devicebound::{DeviceCommand, DeviceboundSettings, read as device_read};
use statestore_storage::keyspace::{Limits, read};
use statestore_storage::machine::Mutation;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::mqtt::MqttHandle;
use crate::service::Service;
use crate::transport::Outbox;
use crate::verdict::Unavailable;

/// Timing of the leadership checks.
#[derive(Debug, Clone, Copy)]
pub struct LeaderTiming {
    /// A serving leader with no quorum acknowledgement for longer than this gives up.
    pub quorum_timeout: Duration,
    /// How often the quorum age is checked.
    pub check_interval: Duration,
    /// Longest a take-over may take before it is abandoned and retried.
    pub take_over_timeout: Duration,
    /// Before giving up, one quorum round may confirm the leader after all; this long.
    pub quorum_probe_timeout: Duration,
    /// A leader that has lost its broker connection for this long hands leadership to
    /// another voter (it cannot receive requests, the others may).
    pub broker_loss_timeout: Duration,
}

/// Which duties this node runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Duty {
    /// None: requests are not taken.
    Idle,
    /// Serving as the quorum-confirmed leader of `term`.
    Serving {
        /// The term the take-over confirmed.
        term: u64,
    },
}

/// Why duties were given up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseReason {
    /// Raft says another node leads (or none).
    NotLeader,
    /// Still leader, but of a later term than the one taken over (a new take-over is due).
    NewTerm,
    /// No quorum acknowledged this leader for longer than the quorum timeout.
    QuorumLost,
}

impl ReleaseReason {
    /// Metric label (one of [`crate::metrics::RELEASE_REASONS`]).
    pub fn label(self) -> &'static str {
        match self {
            ReleaseReason::NotLeader => "not_leader",
            ReleaseReason::NewTerm => "new_term",
            ReleaseReason::QuorumLost => "quorum_lost",
        }
    }
}

/// What to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Nothing changes.
    Stay,
    /// Confirm leadership of `term` with a quorum, then serve.
    TakeOver {
        /// The term to take over.
        term: u64,
    },
    /// Give up the subscription and duties.
    Release(ReleaseReason),
}

/// The rule. `quorum_age` is the time since a quorum last acknowledged this leader, as far
/// as this node knows (see [`QuorumAge`]).
pub fn decide(
    duty: Duty,
    leadership: Leadership,
    quorum_age: Duration,
    quorum_timeout: Duration,
) -> Step {
    match duty {
        Duty::Idle if leadership.is_leader => Step::TakeOver {
            term: leadership.term,
        },
        Duty::Idle => Step::Stay,
        Duty::Serving { .. } if !leadership.is_leader => Step::Release(ReleaseReason::NotLeader),
        Duty::Serving { term } if term != leadership.term => Step::Release(ReleaseReason::NewTerm),
        Duty::Serving { .. } if quorum_age > quorum_timeout => {
            Step::Release(ReleaseReason::QuorumLost)
        }
        Duty::Serving { .. } => Step::Stay,
    }
}

/// The freshest evidence that a quorum follows this leader: openraft's last quorum
/// acknowledgement (reported with its metrics, which can lag when nothing else changes) or this
/// module's own confirmations (the take-over, and probes made before giving up).
#[derive(Debug, Clone, Copy)]
pub struct QuorumAge {
    confirmed_at: Instant,
}

impl QuorumAge {
    /// Starts from a confirmation made now.
    pub fn confirmed_now() -> Self {
        QuorumAge {
            confirmed_at: Instant::now(),
        }
    }

    /// Records a confirmation made now.
    pub fn confirm(&mut self) {
        self.confirmed_at = Instant::now();
    }

    /// The age given openraft's report (`None`: nothing reported).
    pub fn age(&self, reported: Option<Duration>) -> Duration {
        let ours = self.confirmed_at.elapsed();
        reported.map_or(ours, |reported| reported.min(ours))
    }
}

/// Runs until the leadership watch closes or `stop` flips to true.
pub async fn run(
    service: Arc<Service<MqttHandle>>,
    mqtt: MqttHandle,
    serving: Arc<AtomicBool>,
    limits: Limits,
    device_settings: DeviceboundSettings,
    timing: LeaderTiming,
    mut stop: watch::Receiver<bool>,
) {
    let metrics = service.metrics().clone();
    let mut leadership = service.raft().leadership();
    let mut ticker = tokio::time::interval(timing.check_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut duty = Duty::Idle;
    let mut quorum = QuorumAge::confirmed_now();
    let session = mqtt.state();
    let mut broker_down_since: Option<Instant> = None;
    let mut last_hand_over: Option<Instant> = None;
    loop {
        if *stop.borrow() {
            return;
        }
        let current = *leadership.borrow_and_update();
        let connected = session.borrow().connected;
        broker_down_since = match (connected, broker_down_since) {
            (true, _) => None,
            (false, None) => Some(Instant::now()),
            (false, since) => since,
        };
        let broker_down_for = broker_down_since.map(|since| since.elapsed());
        if should_hand_over(current, broker_down_for, timing.broker_loss_timeout)
            && last_hand_over.is_none_or(|at| at.elapsed() > timing.broker_loss_timeout)
        {
            last_hand_over = Some(Instant::now());
            match service.raft().transfer_leadership().await {
                Ok(Some(to)) => tracing::warn!(
                    term = current.term,
                    to,
                    broker_down_ms = broker_down_for.unwrap_or_default().as_millis(),
                    "cut off from the broker: handing leadership over"
                ),
                Ok(None) => tracing::warn!(
                    "cut off from the broker, and no other voter to hand leadership to"
                ),
                Err(err) => tracing::warn!(error = %err, "leadership hand-over failed"),
            }
        }
        let age = quorum.age(service.raft().quorum_ack_age());
        metrics
            .service
            .leader_quorum_ack_age_seconds
            .set(match duty {
                Duty::Serving { .. } => age.as_secs_f64(),
                Duty::Idle => 0.0,
            });
        let mut step = decide(duty, current, age, timing.quorum_timeout);
        if step == Step::Release(ReleaseReason::QuorumLost)
            && quorum_still_follows(&service, timing.quorum_probe_timeout).await
        {
            // openraft's report was stale (nothing else changed): a fresh
            // round just confirmed the quorum.
            quorum.confirm();
            step = Step::Stay;
        }
        match step {
            Step::Stay => {}
            Step::Release(reason) => {
                serving.store(false, Ordering::SeqCst);
                duty = Duty::Idle;
                metrics
                    .service
                    .leader_releases_total
                    .with_label_values(&[reason.label()])
                    .inc();
                mqtt.set_request_subscription(false).await;
                match reason {
                    ReleaseReason::QuorumLost => tracing::warn!(
                        term = current.term,
                        quorum_ack_age_ms = age.as_millis(),
                        "no quorum acknowledged this leader in time: released the request subscription"
                    ),
                    _ => tracing::info!(
                        leader = ?current.leader,
                        term = current.term,
                        reason = reason.label(),
                        "released the request subscription"
                    ),
                }
                continue;
            }
            Step::TakeOver { term } => {
                match tokio::time::timeout(
                    timing.take_over_timeout,
                    take_over(&service, limits, device_settings),
                )
                .await
                {
                    Ok(Ok(())) if still_leader_of(&leadership, term) => {
                        serving.store(true, Ordering::SeqCst);
                        duty = Duty::Serving { term };
                        quorum.confirm();
                        metrics.service.leader_takeovers_total.inc();
                        mqtt.set_request_subscription(true).await;
                        tracing::info!(term, "leader: serving requests");
                        continue;
                    }
                    Ok(Ok(())) => continue,
                    Ok(Err(err)) => {
                        tracing::info!(term, error = %err, "leadership not confirmed yet; retrying");
                    }
                    Err(_) => {
                        tracing::info!(
                            term,
                            "leadership not confirmed within {:?}; retrying",
                            timing.take_over_timeout
                        );
                    }
                }
                tokio::select! {
                    _ = leadership.changed() => {}
                    _ = tokio::time::sleep(timing.check_interval) => {}
                    _ = stop.changed() => {}
                }
                continue;
            }
        }
        tokio::select! {
            changed = leadership.changed() => if changed.is_err() { return },
            _ = ticker.tick() => {}
            _ = stop.changed() => {}
        }
    }
}

/// True when a leader should hand leadership over because it has been cut off from the broker
/// for longer than `timeout` (`broker_down_for`: how long it has been disconnected, `None`
/// while connected).
pub fn should_hand_over(
    leadership: Leadership,
    broker_down_for: Option<Duration>,
    timeout: Duration,
) -> bool {
    leadership.is_leader && broker_down_for.is_some_and(|down| down > timeout)
}

/// One leadership round with the quorum, bounded by `deadline`; apply progress is not waited
/// for (a state machine behind under load is not a lost quorum).
async fn quorum_still_follows<O: Outbox>(service: &Service<O>, deadline: Duration) -> bool {
    matches!(
        tokio::time::timeout(deadline, service.raft().confirm_leadership()).await,
        Ok(Ok(()))
    )
}

fn still_leader_of(leadership: &watch::Receiver<Leadership>, term: u64) -> bool {
    let now = *leadership.borrow();
    now.is_leader && now.term == term
}

async fn take_over<O: Outbox>(
    service: &Service<O>,
    limits: Limits,
    device_settings: DeviceboundSettings,
) -> Result<(), Unavailable> {
    service.raft().ensure_linearizable().await?;
    service.catch_up_clock().await?;
    let replicated = read::meta(&service.raft().view())?.limits;
    if replicated != limits {
        service
            .propose_internal(Mutation::SetLimits(limits))
            .await?;
        tracing::info!(
            ?limits,
            "replicated quota limits updated from this node's configuration"
        );
    }
    let replicated = device_read::meta(&service.raft().view())?.settings;
    if replicated != device_settings {
        service
            .propose_internal(Mutation::Device(DeviceCommand::SetSettings(
                device_settings,
            )))
            .await?;
        tracing::info!(
            ?device_settings,
            "replicated device-bound settings updated from this node's configuration"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests;
