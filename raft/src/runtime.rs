//! The consensus layer's own Tokio runtime.
//!
//! Raft's timing (heartbeats, elections, the leader's lease, AppendEntries answers) must not
//! wait behind client work. On one shared runtime it did: under sustained load the leader's
//! request tasks kept every worker busy, a 5 ms timer fired up to 353 ms late, and heartbeats
//! timed out (openraft gives one a single heartbeat interval). So openraft's tasks (the core,
//! replication streams, heartbeat workers) and the peer server run on a small runtime of their
//! own ("statestore-raft" threads), and the operating system, not the request queue, decides
//! when they run. Everything crossing over is a channel or a watch, which works between
//! runtimes.

use std::future::Future;
use std::sync::Arc;

use tokio::runtime::{Builder, Handle, Runtime};

/// Where the consensus layer's tasks run: a runtime of its own, or the caller's.
#[derive(Clone)]
pub struct RaftRuntime {
    handle: Handle,
    /// Keeps the owned runtime alive; shut down (without blocking) when the last clone goes.
    _owned: Option<Arc<OwnedRuntime>>,
}

struct OwnedRuntime(Option<Runtime>);

impl Drop for OwnedRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            // May run inside another runtime's task: never block here.
            runtime.shutdown_background();
        }
    }
}

impl RaftRuntime {
    /// A runtime of `threads` worker threads, or the current one when `threads` is 0 (tests
    /// that control time with a paused Tokio clock need Raft on that clock).
    pub fn new(threads: usize) -> std::io::Result<RaftRuntime> {
        if threads == 0 {
            return Ok(RaftRuntime {
                handle: Handle::current(),
                _owned: None,
            });
        }
        let runtime = Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("statestore-raft")
            .enable_all()
            .build()?;
        Ok(RaftRuntime {
            handle: runtime.handle().clone(),
            _owned: Some(Arc::new(OwnedRuntime(Some(runtime)))),
        })
    }

    /// Runs `future` on this runtime and waits for it (from any runtime).
    pub async fn run<F>(&self, future: F) -> Result<F::Output, tokio::task::JoinError>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(future).await
    }
}
