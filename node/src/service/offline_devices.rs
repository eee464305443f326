//! The devices found offline (a delivery's PUBACK 0x10: nobody subscribed) and their backoff,
//! 1 s doubling to 30 s, until the device publishes anything under its `messages/` topics.
//! Shared by the device push, which records and clears them, and the SEND path, which skips
//! the same-entry delivery for a device backing off. Bounded ([`MAX_BACKOFF_DEVICES`]) and
//! gauged (`statestore_devicebound_devices_in_backoff`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use prometheus::IntGauge;
use tokio::time::Instant;

/// First backoff of an offline device.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// Longest backoff of an offline device.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Devices tracked in backoff at once; beyond it an offline device is not backed off (its
/// deliveries are retried at the push's normal pace) and the overflow is counted.
pub const MAX_BACKOFF_DEVICES: usize = 100_000;
/// One device's backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Backoff {
    until: Instant,
    delay: Duration,
}

/// The offline devices' backoffs, bounded by `cap`.
#[derive(Debug)]
pub struct Backoffs {
    devices: HashMap<String, Backoff>,
    cap: usize,
}

impl Backoffs {
    /// Empty, holding at most `cap` devices.
    pub fn new(cap: usize) -> Self {
        Backoffs {
            devices: HashMap::new(),
            cap,
        }
    }

    /// The device was found offline at `now`: its backoff starts at 1 s or doubles (up to
    /// 30 s). False if the map is full (the device is not backed off).
    pub fn offline(&mut self, device: &str, now: Instant) -> bool {
        if let Some(backoff) = self.devices.get_mut(device) {
            backoff.delay = (backoff.delay * 2).min(MAX_BACKOFF);
            backoff.until = now + backoff.delay;
            return true;
        }
        if self.devices.len() >= self.cap {
            // Forget the devices whose backoff ran out long ago before refusing.
            self.devices
                .retain(|_, b| now.saturating_duration_since(b.until) < MAX_BACKOFF);
            if self.devices.len() >= self.cap {
                return false;
            }
        }
        self.devices.insert(
            device.to_owned(),
            Backoff {
                until: now + FIRST_BACKOFF,
                delay: FIRST_BACKOFF,
            },
        );
        true
    }

    /// The device showed up: no backoff any more. True if it had one.
    pub fn reset(&mut self, device: &str) -> bool {
        self.devices.remove(device).is_some()
    }

    /// True while `device` is backing off at `now`.
    pub fn blocked(&self, device: &str, now: Instant) -> bool {
        self.devices.get(device).is_some_and(|b| b.until > now)
    }

    /// When `device`'s backoff ends, if it has one.
    pub fn until(&self, device: &str) -> Option<Instant> {
        self.devices.get(device).map(|b| b.until)
    }

    /// Devices tracked.
    pub fn len(&self) -> usize {
        self.devices.len()
    }

    /// True when no device is tracked.
    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }
}

/// The node's [`Backoffs`], behind a lock, with their gauge.
#[derive(Debug)]
pub struct OfflineDevices {
    backoffs: Mutex<Backoffs>,
    gauge: IntGauge,
}

impl OfflineDevices {
    /// At most [`MAX_BACKOFF_DEVICES`] devices, their count in `gauge`.
    pub fn new(gauge: IntGauge) -> Self {
        OfflineDevices {
            backoffs: Mutex::new(Backoffs::new(MAX_BACKOFF_DEVICES)),
            gauge,
        }
    }

    /// Runs `f` on the backoffs and updates the gauge.
    pub fn with<R>(&self, f: impl FnOnce(&mut Backoffs) -> R) -> R {
        let mut backoffs = self
            .backoffs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let result = f(&mut backoffs);
        self.gauge
            .set(i64::try_from(backoffs.len()).unwrap_or(i64::MAX));
        result
    }
}

#[cfg(test)]
mod tests;
