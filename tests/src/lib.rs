//! Black-box test harness for statestore: real Mosquitto and real `statestore` processes on
//! loopback ports chosen per test, driven by the official SDK client ([`sdk`]) and by a raw
//! MQTT 5 client ([`raw`]) for what the SDK hides. Nothing here reaches into node internals:
//! processes are observed through MQTT, their HTTP admin API, their exit status and (for
//! durability) the syscalls `strace` sees them make.

pub mod abuse;
pub mod device_workload;
pub mod devicebound;
pub mod history;
pub mod linearizability;
pub mod otlp;
pub mod prometheus;
pub mod raw;
pub mod raw_helpers;
pub mod sdk;
pub mod sdk_helpers;
pub mod syscall_trace;
pub mod version_audit;
pub mod workload;

// The process harness lives in its own crate (no SDK dependency, so `sdk-next` can use it too).
pub use statestore_harness::{
    broker, cluster, free_port, netlab, node, now_ms, pki, plugin, powercut, process_faults,
    wait_for,
};
