//! Threads for background storage work that nothing urgent waits for (the wait for a snapshot
//! build's checkpoint), niced below the threads that serve Raft and clients: on a busy machine
//! they take what CPU is left rather than delay heartbeats and replies. (The memtable's flush
//! thread is not one of them: apply waits for it once the memtable is full. Nor is a snapshot
//! export: a follower waits for it, see `statestore_raft::snapshot`.)

use thread_priority::{ThreadPriority, ThreadPriorityValue};

/// Priority of background threads (about nice 10 under Linux's normal policy).
const BACKGROUND_PRIORITY: u8 = 25;

/// Starts `work` on a new thread named `name` at background priority.
pub fn spawn<T: Send + 'static>(
    name: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<T>> {
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            if let Ok(priority) = ThreadPriorityValue::try_from(BACKGROUND_PRIORITY)
                && let Err(err) = thread_priority::set_current_thread_priority(
                    ThreadPriority::Crossplatform(priority),
                )
            {
                tracing::debug!(error = ?err, "cannot lower a background thread's priority");
            }
            work()
        })
}
