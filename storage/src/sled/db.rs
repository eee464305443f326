//! Opening the database and the handles the rest of the crate uses.

use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::sled::log::LogTree;
use crate::sled::state::StateTree;

/// Where and how to open the store.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Data directory; holds `db/` (sled) and `snapshots/`.
    pub dir: PathBuf,
    /// sled page cache size in bytes (sled's own default is 1 GiB; set it explicitly).
    pub cache_capacity_bytes: u64,
}

/// The opened store: one sled database and the snapshot directory.
#[derive(Clone)]
pub struct Store {
    db: ::sled::Db,
    dir: PathBuf,
}

impl Store {
    /// Opens (or creates) the store under `config.dir`.
    pub fn open(config: &StoreConfig) -> Result<Store> {
        std::fs::create_dir_all(config.dir.join("snapshots"))?;
        let db = ::sled::Config::new()
            .path(config.dir.join("db"))
            .cache_capacity(config.cache_capacity_bytes)
            // We flush explicitly at every durability point; the background flush only
            // bounds how much unflushed state-machine work a crash can cost.
            .flush_every_ms(Some(1_000))
            .mode(::sled::Mode::HighThroughput)
            .open()?;
        Ok(Store {
            db,
            dir: config.dir.clone(),
        })
    }

    /// The Raft log and its small records.
    pub fn log(&self) -> Result<LogTree> {
        LogTree::open(&self.db)
    }

    /// The state machine tree and snapshot directory.
    pub fn state(&self) -> Result<StateTree> {
        StateTree::open(&self.db, &self.dir.join("snapshots"))
    }

    /// Writes every buffered change to disk and fsyncs.
    pub async fn flush(&self) -> Result<()> {
        self.db.flush_async().await?;
        Ok(())
    }

    /// Bytes the database occupies on disk.
    pub fn size_on_disk(&self) -> Result<u64> {
        Ok(self.db.size_on_disk()?)
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}
