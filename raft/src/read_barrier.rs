//! Coalesced linearizable-read barriers.
//!
//! openraft's `ensure_linearizable` confirms leadership with a heartbeat round to the voters.
//! Doing that per GET would cost one network round per read; instead every reader that arrives
//! while a round is in flight waits for the *next* round, which starts after it arrived and so
//! is a valid barrier for it. Under load one round serves every concurrent reader.

use std::sync::{Arc, Mutex};

use openraft::error::{CheckIsLeaderError, RaftError};
use tokio::sync::oneshot;

use crate::error::{Error, Result};
use crate::types::Raft;

/// Rounds retried when a quorum did not answer in time (a busy follower, not a lost leader).
const QUORUM_RETRIES: usize = 3;

type Waiter = oneshot::Sender<std::result::Result<(), BarrierError>>;

#[derive(Debug, Clone)]
enum BarrierError {
    NotLeader(Option<u64>),
    QuorumNotReached,
    Stopped(String),
}

impl From<BarrierError> for Error {
    fn from(err: BarrierError) -> Self {
        match err {
            BarrierError::NotLeader(leader) => Error::NotLeader { leader },
            BarrierError::QuorumNotReached => Error::QuorumNotReached,
            BarrierError::Stopped(reason) => Error::Stopped(reason),
        }
    }
}

#[derive(Default)]
struct Queue {
    waiting: Vec<Waiter>,
    running: bool,
}

/// Shared by every reader of one node.
#[derive(Clone)]
pub(crate) struct ReadBarrier {
    raft: Raft,
    queue: Arc<Mutex<Queue>>,
}

impl ReadBarrier {
    pub(crate) fn new(raft: Raft) -> Self {
        ReadBarrier {
            raft,
            queue: Arc::default(),
        }
    }

    /// Returns once a leadership round that started after this call succeeded and everything
    /// committed before it is applied.
    pub(crate) async fn wait(&self) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        let start_driver = {
            let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            queue.waiting.push(tx);
            !std::mem::replace(&mut queue.running, true)
        };
        if start_driver {
            tokio::spawn(self.clone().drive());
        }
        match rx.await {
            Ok(result) => result.map_err(Error::from),
            Err(_) => Err(Error::Stopped("read barrier dropped".into())),
        }
    }

    /// Runs rounds until nobody waits.
    async fn drive(self) {
        loop {
            let batch = {
                let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
                if queue.waiting.is_empty() {
                    queue.running = false;
                    return;
                }
                std::mem::take(&mut queue.waiting)
            };
            let result = self.round().await;
            for waiter in batch {
                let _ = waiter.send(result.clone());
            }
        }
    }

    async fn round(&self) -> std::result::Result<(), BarrierError> {
        let mut attempt = 0;
        loop {
            match self.raft.ensure_linearizable().await {
                Ok(_) => return Ok(()),
                Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => {
                    return Err(BarrierError::NotLeader(f.leader_id));
                }
                Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(_)))
                    if attempt < QUORUM_RETRIES =>
                {
                    attempt += 1;
                }
                Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(_))) => {
                    return Err(BarrierError::QuorumNotReached);
                }
                Err(RaftError::Fatal(f)) => return Err(BarrierError::Stopped(f.to_string())),
            }
        }
    }
}
