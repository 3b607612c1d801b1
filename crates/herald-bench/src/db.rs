//! Where a scenario's database lives, and how the store is opened for it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use herald_store::StoreOptions;
use tempfile::TempDir;

/// The `--db` file, or a file in a fresh temporary directory that is removed on drop.
#[derive(Debug)]
pub struct ScratchDb {
    path: PathBuf,
    _dir: Option<TempDir>,
}

impl ScratchDb {
    /// Uses `db` when given, else `name` inside a new temporary directory.
    pub fn resolve(db: Option<PathBuf>, name: &str) -> anyhow::Result<Self> {
        match db {
            Some(path) => Ok(ScratchDb { path, _dir: None }),
            None => {
                let dir = tempfile::Builder::new()
                    .prefix("herald-bench-")
                    .tempdir()
                    .context("could not create a temporary directory for the database")?;
                Ok(ScratchDb { path: dir.path().join(name), _dir: Some(dir) })
            }
        }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The store's retry knobs, as the storm and its workers take them.
#[derive(Debug, Clone, clap::Args)]
pub struct StoreArgs {
    /// SQLite's own busy wait per attempt, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub busy_timeout_ms: u64,
    /// How long one write keeps retrying before it fails, in milliseconds.
    #[arg(long, default_value_t = 20_000)]
    pub write_patience_ms: u64,
}

impl StoreArgs {
    /// Store options for the database at `path` with these knobs.
    pub fn options(&self, path: &Path) -> StoreOptions {
        StoreOptions {
            busy_timeout: Duration::from_millis(self.busy_timeout_ms),
            write_patience: Duration::from_millis(self.write_patience_ms),
            ..StoreOptions::new(path)
        }
    }
}
