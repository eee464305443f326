//! Following files that change while the node runs (the broker TLS files, the policy file):
//! a check on the blocking pool every interval until the node stops, each outcome handed to
//! the caller. Checks never overlap: the next tick waits for the last check (missed ticks are
//! delayed, not bunched).

use std::time::Duration;

use tokio::sync::watch;

/// The shortest interval between checks, whatever the setting says.
const MIN_INTERVAL: Duration = Duration::from_millis(10);

/// Runs `check` on the blocking pool every `interval` (the first one `interval` from now)
/// until `stop` turns true, and passes each outcome to `outcome`. A check that panics is
/// skipped.
pub async fn check_every<T: Send + 'static>(
    interval: Duration,
    mut stop: watch::Receiver<bool>,
    check: impl Fn() -> T + Clone + Send + 'static,
    mut outcome: impl FnMut(T),
) {
    let mut ticks = tokio::time::interval(interval.max(MIN_INTERVAL));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
        if let Ok(result) = tokio::task::spawn_blocking(check.clone()).await {
            outcome(result);
        }
    }
}

#[cfg(test)]
mod tests;
