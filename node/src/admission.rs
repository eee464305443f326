//! The request budget: bytes of requests a node holds at once, from the moment a PUBLISH is
//! read until its reply is queued (or it is dropped).
//!
//! The MQTT handler admits each request before it sends the PUBACK. When the budget is spent
//! the PUBACK waits, so the broker's flow control (our `receive_maximum`) stops further
//! requests at the broker instead of in this process's memory.

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

/// Where the MQTT session hands requests over: admit, then queue.
#[derive(Clone)]
pub struct Intake {
    /// Admitted requests, read by the dispatcher.
    pub queue: mpsc::Sender<Admitted>,
    /// The budget they are admitted into.
    pub budget: RequestBudget,
}

impl Intake {
    /// Waits for room in the budget, then queues `message`. False if the service stopped.
    pub async fn deliver(&self, message: InboundMessage) -> bool {
        let admission = self.budget.admit(message.payload.len()).await;
        self.queue
            .send(Admitted { message, admission })
            .await
            .is_ok()
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

    #[test]
    fn a_budget_below_one_request_is_raised_to_one_request() {
        assert_eq!(budget(0).cost(0), REQUEST_OVERHEAD_BYTES);
    }
}
