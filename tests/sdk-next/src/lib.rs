//! Test support for the newest official SDK: the same SDK client setup as the main test crate
//! (the very file, compiled here against `azure_iot_operations_services` 1.5.0-beta1), and the
//! process harness shared with it.

#[path = "../../src/sdk.rs"]
pub mod sdk;

pub use statestore_harness as harness;
