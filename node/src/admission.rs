//! The request budget: bytes of requests a node holds at once, from the moment a PUBLISH is
//! read until its reply is queued (or it is dropped).
//!
//! The budget has two equal halves. A request read from the broker first takes room in the
//! *waiting* half, without waiting: if there is none, it is refused at once (PUBACK 0x97
//! Quota exceeded, counted as dropped `overloaded`), because its payload is already in this
//! process's memory. It then waits for room in the *admitted* half, and only then gets its
//! PUBACK. So while requests wait, the broker's flow control (our `receive_maximum`) holds
//! further requests at the broker, and the bytes of requests in this process never exceed the
//! whole budget, whatever their size or number.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use crate::transport::{Admitted, InboundMessage};

/// Fixed cost charged per request on top of its payload: topic, properties, task and reply.
pub const REQUEST_OVERHEAD_BYTES: usize = 1024;

/// A shared budget of request bytes.
#[derive(Clone)]
pub struct RequestBudget {
    semaphore: Arc<Semaphore>,
    total: usize,
    used: prometheus::IntGauge,
}

/// A request's share of the budget; given back when dropped.
pub struct Admission {
    _permit: OwnedSemaphorePermit,
    bytes: usize,
    used: prometheus::IntGauge,
}

impl RequestBudget {
    /// A budget of `total_bytes` (at least one request's overhead), reported in `used`.
    pub fn new(total_bytes: usize, used: prometheus::IntGauge) -> Self {
        let total = total_bytes.clamp(REQUEST_OVERHEAD_BYTES, Semaphore::MAX_PERMITS);
        RequestBudget {
            semaphore: Arc::new(Semaphore::new(total)),
            total,
            used,
        }
    }

    /// What a request of `payload_bytes` is charged: its payload plus the overhead, and never
    /// more than the whole budget (a request larger than the budget runs alone).
    pub fn cost(&self, payload_bytes: usize) -> usize {
        payload_bytes
            .saturating_add(REQUEST_OVERHEAD_BYTES)
            .min(self.total)
    }

    /// Waits until the request's cost fits, and takes it.
    pub async fn admit(&self, payload_bytes: usize) -> Admission {
        let bytes = self.cost(payload_bytes);
        let permits = u32::try_from(bytes).unwrap_or(u32::MAX);
        let permit = match self.semaphore.clone().acquire_many_owned(permits).await {
            Ok(permit) => permit,
            // The semaphore is never closed; should it be, nothing is left to protect.
            Err(_) => unreachable!("request budget semaphore closed"),
        };
        self.admission(permit, bytes)
    }

    /// Takes the request's cost if it fits right now; `None` if it does not.
    pub fn try_admit(&self, payload_bytes: usize) -> Option<Admission> {
        let bytes = self.cost(payload_bytes);
        let permits = u32::try_from(bytes).unwrap_or(u32::MAX);
        let permit = self
            .semaphore
            .clone()
            .try_acquire_many_owned(permits)
            .ok()?;
        Some(self.admission(permit, bytes))
    }

    /// Records `bytes` as used for as long as the returned admission lives.
    fn admission(&self, permit: OwnedSemaphorePermit, bytes: usize) -> Admission {
        self.used.add(i64::try_from(bytes).unwrap_or(i64::MAX));
        Admission {
            _permit: permit,
            bytes,
            used: self.used.clone(),
        }
    }

    /// Bytes not taken right now.
    pub fn available(&self) -> usize {
        self.semaphore.available_permits()
    }
}

/// Where the MQTT session hands requests over: waiting room, admission, then the queue.
#[derive(Clone)]
pub struct Intake {
    /// Admitted requests, read by the dispatcher.
    queue: mpsc::Sender<Admitted>,
    /// Requests being served (from admission until their reply is queued).
    admitted: RequestBudget,
    /// Requests read from the broker, waiting for admission (their PUBACK waits too).
    waiting: RequestBudget,
    /// Requests refused because the waiting room was full.
    refused: prometheus::IntCounter,
}

/// What became of a request handed to [`Intake::deliver`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Admitted and queued for the dispatcher.
    Queued,
    /// The waiting room was full: refused, nothing else happens to it.
    Refused,
    /// The service stopped.
    Stopped,
}

impl Intake {
    /// An intake whose two halves together hold at most `total_bytes` (reported in `used`);
    /// refusals are counted in `refused`.
    pub fn new(
        queue: mpsc::Sender<Admitted>,
        total_bytes: usize,
        used: prometheus::IntGauge,
        refused: prometheus::IntCounter,
    ) -> Intake {
        let half = total_bytes / 2;
        Intake {
            queue,
            admitted: RequestBudget::new(half, used.clone()),
            waiting: RequestBudget::new(total_bytes.saturating_sub(half), used),
            refused,
        }
    }

    /// Takes room in the waiting half or refuses at once, then waits for room in the admitted
    /// half and queues `message`.
    pub async fn deliver(&self, message: InboundMessage) -> Delivery {
        let Some(waiting) = self.waiting.try_admit(message.payload.len()) else {
            self.refused.inc();
            return Delivery::Refused;
        };
        let admission = self.admitted.admit(message.payload.len()).await;
        drop(waiting);
        match self.queue.send(Admitted { message, admission }).await {
            Ok(()) => Delivery::Queued,
            Err(_) => Delivery::Stopped,
        }
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.used.sub(i64::try_from(self.bytes).unwrap_or(i64::MAX));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(total: usize) -> RequestBudget {
        RequestBudget::new(
            total,
            prometheus::IntGauge::new("test_budget_used", "test").expect("gauge"),
        )
    }

    #[tokio::test]
    async fn requests_wait_while_the_budget_is_spent_and_proceed_when_it_is_returned() {
        let budget = budget(4 * REQUEST_OVERHEAD_BYTES);
        let first = budget.admit(REQUEST_OVERHEAD_BYTES).await;
        let second = budget.admit(0).await;
        assert_eq!(budget.available(), REQUEST_OVERHEAD_BYTES);
        assert_eq!(budget.used.get(), 3 * 1024);

        let waiting = tokio::spawn({
            let budget = budget.clone();
            async move { budget.admit(REQUEST_OVERHEAD_BYTES).await }
        });
        // The third request (2 KiB) does not fit in the 1 KiB left: on this single-threaded
        // test runtime the spawned task has run up to its wait after these yields.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(!waiting.is_finished(), "admitted beyond the budget");
        drop(first);
        let third = waiting.await.expect("admitted once the first finished");
        assert_eq!(budget.used.get(), 3 * 1024);
        drop((second, third));
        assert_eq!(budget.used.get(), 0);
        assert_eq!(budget.available(), 4 * REQUEST_OVERHEAD_BYTES);
    }

    #[tokio::test]
    async fn a_request_larger_than_the_budget_is_charged_the_whole_budget_and_runs_alone() {
        let budget = budget(8 * REQUEST_OVERHEAD_BYTES);
        assert_eq!(budget.cost(1 << 20), 8 * REQUEST_OVERHEAD_BYTES);
        let big = budget.admit(1 << 20).await;
        assert_eq!(budget.available(), 0);
        drop(big);
        assert_eq!(budget.available(), 8 * REQUEST_OVERHEAD_BYTES);
    }

    fn request(payload_bytes: usize) -> InboundMessage {
        InboundMessage {
            topic: String::new(),
            qos: 1,
            response_topic: None,
            correlation_data: None,
            message_expiry_secs: None,
            content_type: None,
            user_properties: Vec::new(),
            payload: bytes::Bytes::from(vec![0u8; payload_bytes]),
            received_at: tokio::time::Instant::now(),
        }
    }

    /// A request waits while the admitted half is spent; one more than the waiting half holds
    /// is refused at once and counted; when room comes back the waiting one is queued.
    #[tokio::test]
    async fn requests_wait_then_are_refused_once_the_waiting_room_is_full() {
        let (queue, mut queued) = mpsc::channel(8);
        let refused = prometheus::IntCounter::new("test_refused", "test").expect("counter");
        let used = prometheus::IntGauge::new("test_intake_used", "test").expect("gauge");
        // Halves of 2 KiB: one request of 1 KiB payload (cost 2 KiB) fills a half.
        let intake = Intake::new(
            queue,
            4 * REQUEST_OVERHEAD_BYTES,
            used.clone(),
            refused.clone(),
        );
        assert_eq!(intake.deliver(request(1024)).await, Delivery::Queued);
        let first = queued.recv().await.expect("queued");
        assert_eq!(used.get(), 2048);

        let second = tokio::spawn({
            let intake = intake.clone();
            async move { intake.deliver(request(1024)).await }
        });
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(!second.is_finished(), "admitted beyond the admitted half");
        assert_eq!(
            used.get(),
            4096,
            "the waiting request holds the waiting half"
        );

        assert_eq!(intake.deliver(request(1)).await, Delivery::Refused);
        assert_eq!(refused.get(), 1);
        assert_eq!(used.get(), 4096, "a refused request holds nothing");

        drop(first);
        assert_eq!(second.await.expect("task"), Delivery::Queued);
        let second = queued.recv().await.expect("queued");
        assert_eq!(used.get(), 2048);
        drop(second);
        assert_eq!(used.get(), 0);
        drop(queued);
        assert_eq!(intake.deliver(request(0)).await, Delivery::Stopped);
    }

    #[test]
    fn a_budget_below_one_request_is_raised_to_one_request() {
        assert_eq!(budget(0).cost(0), REQUEST_OVERHEAD_BYTES);
    }
}
