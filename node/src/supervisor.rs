//! Every long-lived task and thread of a running node, named and owned.
//!
//! [`Supervisor::spawn`] starts a Tokio task and [`Supervisor::exit_guard`] hands a thread the
//! guard it holds for its whole life. A task or thread that ends (returns or panics) before the
//! node is stopping is a failure: [`Supervisor::failure`] resolves with it, and the node takes
//! its fatal path (an ERROR naming it, `statestore_task_failures_total{task}`, shutdown, exit
//! status 1) instead of reporting ready while half of it is dead. On shutdown
//! [`Supervisor::join`] waits for every task it spawned and aborts the ones that outstay the
//! deadline.
//!
//! [`Task::ALL`] is the list `docs/architecture.md` draws (a test compares them).
//!
//! Fault injection for the tests: `STATESTORE_FAILPOINT_PANIC=<task>` makes that task panic
//! one second after it starts (see [`FAILPOINT_ENV`]).

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use prometheus::{IntCounterVec, Opts, Registry};
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinSet};

/// The environment variable naming a task to panic one second after it starts (tests only;
/// a name that is no task is ignored with a WARN).
pub const FAILPOINT_ENV: &str = "STATESTORE_FAILPOINT_PANIC";

/// How long after its start an injected panic fires.
const FAILPOINT_DELAY: Duration = Duration::from_secs(1);

/// A long-lived task or thread of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Task {
    /// Thread: the MQTT session (its own single-threaded ntex runtime).
    MqttSession,
    /// Thread: the stall detector's ticker.
    StallDetector,
    /// Accepts Raft peer connections.
    RaftPeers,
    /// Serves `/metrics`, health and the admin API.
    Http,
    /// Reloads the broker TLS files when they change.
    MqttTlsWatch,
    /// Puts a changed policy file in force (runs only with `auth.policy_file`).
    PolicyWatch,
    /// Passes admitted requests to the service (one task per request).
    Dispatcher,
    /// Holds the request subscription while this node leads and serves.
    Leader,
    /// Proposes expiry sweeps.
    Expiry,
    /// Publishes key notifications.
    Notifier,
    /// Forgets the registrations of clients the broker reports gone.
    Forgetter,
    /// Handles the broker's reports about device deliveries (no subscriber, acknowledged).
    DeviceEvents,
    /// Delivers device-bound messages.
    DevicePush,
    /// Proposes device-bound lock expiries, TTL expiries and feedback batches.
    DeviceSweep,
    /// Samples gauges (keys, bytes, database size).
    Gauges,
}

impl Task {
    /// Every task, in the order `docs/architecture.md` lists them.
    pub const ALL: [Task; 15] = [
        Task::MqttSession,
        Task::StallDetector,
        Task::RaftPeers,
        Task::Http,
        Task::MqttTlsWatch,
        Task::PolicyWatch,
        Task::Dispatcher,
        Task::Leader,
        Task::Expiry,
        Task::Notifier,
        Task::Forgetter,
        Task::DeviceEvents,
        Task::DevicePush,
        Task::DeviceSweep,
        Task::Gauges,
    ];

    /// Its name in logs, metrics and the failpoint.
    pub fn name(self) -> &'static str {
        match self {
            Task::MqttSession => "mqtt-session",
            Task::StallDetector => "stall-detector",
            Task::RaftPeers => "raft-peers",
            Task::Http => "http",
            Task::MqttTlsWatch => "mqtt-tls-watch",
            Task::PolicyWatch => "policy-watch",
            Task::Dispatcher => "dispatcher",
            Task::Leader => "leader",
            Task::Expiry => "expiry",
            Task::Notifier => "notifier",
            Task::Forgetter => "forgetter",
            Task::DeviceEvents => "device-events",
            Task::DevicePush => "device-push",
            Task::DeviceSweep => "device-sweep",
            Task::Gauges => "gauges",
        }
    }

    /// The task named `name`.
    pub fn named(name: &str) -> Option<Task> {
        Task::ALL.into_iter().find(|task| task.name() == name)
    }
}

/// A task or thread that ended while the node was not stopping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Which.
    pub task: Task,
    /// Whether it panicked (else it returned).
    pub panicked: bool,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let how = if self.panicked {
            "panicked"
        } else {
            "ended unexpectedly"
        };
        write!(f, "task {} {how}", self.task.name())
    }
}

/// Reports of ended tasks the supervisor holds: one per guard, and the node makes one guard per
/// task and thread it runs (twice that for slack).
pub const EXIT_QUEUE: usize = 2 * Task::ALL.len();

/// Reports its task's end when dropped: on return, on a panic (dropped while unwinding) or
/// when the task is aborted.
#[derive(Debug)]
pub struct ExitGuard {
    task: Task,
    exits: mpsc::Sender<Failure>,
}

impl Drop for ExitGuard {
    fn drop(&mut self) {
        // Never full: one report per guard, and the queue holds one for every guard the node
        // makes (see [`EXIT_QUEUE`]); were it full, the node would be exiting already.
        let _ = self.exits.try_send(Failure {
            task: self.task,
            panicked: std::thread::panicking(),
        });
    }
}

/// Owns the node's tasks and threads; see the module documentation.
pub struct Supervisor {
    tasks: JoinSet<()>,
    handles: Vec<(AbortHandle, Task)>,
    exits_tx: mpsc::Sender<Failure>,
    exits: mpsc::Receiver<Failure>,
    failures_total: IntCounterVec,
    failpoint: Option<Task>,
    /// Failures [`Supervisor::failure`] reported (not reported again by `join`).
    reported: Vec<Task>,
}

impl Supervisor {
    /// A supervisor whose failures are counted in `statestore_task_failures_total{task}`
    /// (registered in `registry`); the failpoint comes from `failpoint` (the value of
    /// [`FAILPOINT_ENV`], if set).
    pub fn new(registry: &Registry, failpoint: Option<&str>) -> prometheus::Result<Supervisor> {
        let failures_total = IntCounterVec::new(
            Opts::new(
                "statestore_task_failures_total",
                "Node tasks and threads that panicked or ended while the node was running; the node exits after the first.",
            ),
            &["task"],
        )?;
        registry.register(Box::new(failures_total.clone()))?;
        for task in Task::ALL {
            failures_total.with_label_values(&[task.name()]);
        }
        let failpoint = failpoint.and_then(|name| {
            let task = Task::named(name);
            if task.is_none() {
                tracing::warn!(name, "{FAILPOINT_ENV} names no task; ignored");
            }
            task
        });
        let (exits_tx, exits) = mpsc::channel(EXIT_QUEUE);
        Ok(Supervisor {
            tasks: JoinSet::new(),
            handles: Vec::new(),
            exits_tx,
            exits,
            failures_total,
            failpoint,
            reported: Vec::new(),
        })
    }

    /// A guard for a thread (or anything else) running `task`: hold it for the whole life of
    /// the thread.
    pub fn exit_guard(&self, task: Task) -> ExitGuard {
        ExitGuard {
            task,
            exits: self.exits_tx.clone(),
        }
    }

    /// Spawns `future` as the Tokio task `task`.
    pub fn spawn<F>(&mut self, task: Task, future: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let guard = self.exit_guard(task);
        let inject = self.failpoint == Some(task);
        let handle = self.tasks.spawn(async move {
            let _guard = guard;
            if inject {
                tokio::select! {
                    () = future => {}
                    () = tokio::time::sleep(FAILPOINT_DELAY) => {
                        panic!("{FAILPOINT_ENV}: injected panic in task {}", task.name());
                    }
                }
            } else {
                future.await;
            }
        });
        self.handles.push((handle, task));
    }

    /// The first task or thread to end. Call it only while the node runs: once stopping, tasks
    /// end on purpose. Pending for ever if every sender is gone (it never is: the supervisor
    /// holds one).
    pub async fn failure(&mut self) -> Failure {
        match self.exits.recv().await {
            Some(failure) => {
                self.failures_total
                    .with_label_values(&[failure.task.name()])
                    .inc();
                self.reported.push(failure.task);
                failure
            }
            None => std::future::pending().await,
        }
    }

    /// Waits up to `deadline` for every spawned task to end (the node has told them to stop),
    /// then aborts the rest; returns the names of the tasks aborted.
    pub async fn join(mut self, deadline: Duration) -> Vec<&'static str> {
        let names: HashMap<_, _> = self
            .handles
            .iter()
            .map(|(handle, task)| (handle.id(), *task))
            .collect();
        let ended = tokio::time::timeout(deadline, async {
            while let Some(joined) = self.tasks.join_next_with_id().await {
                if let Err(err) = joined
                    && err.is_panic()
                {
                    match names.get(&err.id()) {
                        Some(task) if self.reported.contains(task) => {}
                        task => tracing::warn!(
                            task = task.map_or("?", |task| task.name()),
                            "task panicked while stopping"
                        ),
                    }
                }
            }
        })
        .await;
        if ended.is_ok() {
            return Vec::new();
        }
        let aborted: Vec<&'static str> = self
            .handles
            .iter()
            .filter(|(handle, _)| !handle.is_finished())
            .map(|(_, task)| task.name())
            .collect();
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
        aborted
    }
}

#[cfg(test)]
mod tests;
