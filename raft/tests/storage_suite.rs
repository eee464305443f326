//! openraft's storage conformance suite against the raft-log WAL log store and the fjall-backed state machine.
//!
//! Invariant: `LogStore` (the raft-log WAL) and `StateMachine` (fjall) behave as openraft
//! requires (log ids, purge and truncate edges, vote persistence, applied state, membership,
//! snapshot transfer).

use std::sync::Arc;

use openraft::testing::log::{StoreBuilder, Suite};
use statestore_raft::log_store::{LogConfig, LogStore};
use statestore_raft::metrics::RaftStorageMetrics;
use statestore_raft::state_machine::{DiscardEvents, SnapshotTrigger, StateMachine};
use statestore_raft::types::{StorageError, TypeConfig};
use statestore_storage::store::{Store, StoreConfig};

struct StoreBuilderImpl;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir> for StoreBuilderImpl {
    async fn build(&self) -> Result<(tempfile::TempDir, LogStore, StateMachine), StorageError> {
        let dir = tempfile::tempdir().expect("temp dir");
        let store =
            Store::open(&StoreConfig::new(dir.path().to_owned(), 16 << 20)).expect("open store");
        let metrics = Arc::new(RaftStorageMetrics::default());
        let log_config = LogConfig {
            dir: dir.path().join("raft-log"),
            cache_bytes: 1 << 20,
            chunk_bytes: 1 << 20,
        };
        let log = LogStore::open(&log_config, metrics.clone()).expect("open log");
        let sm = StateMachine::new(
            store,
            Arc::new(DiscardEvents),
            metrics,
            SnapshotTrigger::default(),
        )
        .expect("state machine");
        Ok((dir, log, sm))
    }
}

/// The whole openraft storage suite passes on our WAL log store and fjall state machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_pass_the_openraft_storage_suite() {
    if let Err(err) = Suite::test_all(StoreBuilderImpl).await {
        panic!("storage suite failed: {err}");
    }
}
