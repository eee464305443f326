//! openraft's storage conformance suite against the sled-backed log store and state machine.
//!
//! Invariant: `LogStore` and `StateMachine` behave as openraft requires (log ids, purge and
//! truncate edges, vote persistence, applied state, membership, snapshot transfer).

use std::sync::Arc;

use openraft::testing::{StoreBuilder, Suite};
use statestore_raft::log_store::LogStore;
use statestore_raft::metrics::RaftStorageMetrics;
use statestore_raft::state_machine::{DiscardEvents, StateMachine};
use statestore_raft::types::{StorageError, TypeConfig};
use statestore_storage::sled::{Store, StoreConfig};

struct SledBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir> for SledBuilder {
    async fn build(&self) -> Result<(tempfile::TempDir, LogStore, StateMachine), StorageError> {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::open(&StoreConfig {
            dir: dir.path().to_owned(),
            cache_capacity_bytes: 16 << 20,
        })
        .expect("open store");
        let metrics = Arc::new(RaftStorageMetrics::default());
        let log = LogStore::new(store.log().expect("log tree"), metrics.clone());
        let sm = StateMachine::new(store, Arc::new(DiscardEvents), metrics)?;
        Ok((dir, log, sm))
    }
}

/// The whole openraft storage suite passes on our sled stores.
#[test]
fn sled_stores_pass_the_openraft_storage_suite() {
    if let Err(err) = Suite::test_all(SledBuilder) {
        panic!("storage suite failed: {err}");
    }
}
