//! Where a scenario's database lives, and how the store is opened for it.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use std::time::Duration;

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

/// Where a scenario's store lives: a SQLite file, or a new database on a PostgreSQL server.
#[derive(Debug)]
pub enum Place {
    /// `--db`, or a file in a temporary directory.
    Sqlite(ScratchDb),
    /// The URL (no password) of a database created for this run.
    Postgres(String),
}

impl Place {
    /// The store's URL, as `[store] url` and the spawned processes take it.
    pub fn url(&self) -> String {
        match self {
            Place::Sqlite(db) => format!("sqlite://{}", db.path().display()),
            Place::Postgres(url) => url.clone(),
        }
    }

    /// `sqlite` or `postgres`.
    pub fn backend(&self) -> &'static str {
        match self {
            Place::Sqlite(_) => "sqlite",
            Place::Postgres(_) => "postgres",
        }
    }
}

/// The store's retry knobs, as the storm and its workers take them.
#[derive(Debug, Clone, clap::Args)]
pub struct StoreArgs {
    /// The store: a SQLite file (`sqlite://PATH`, default a temporary one) or a PostgreSQL
    /// server (`postgres://USER@HOST:PORT/DB`; the run creates a database of its own there,
    /// the password comes from HERALD_STORE_PASSWORD).
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// SQLite's own busy wait per attempt, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub busy_timeout_ms: u64,
    /// How long one write keeps retrying before it fails, in milliseconds.
    #[arg(long, default_value_t = 20_000)]
    pub write_patience_ms: u64,
    /// Connections in each process's pool (default: the store's, 8 on SQLite, 4 on PostgreSQL).
    #[arg(long)]
    pub max_connections: Option<u32>,
}

impl StoreArgs {
    /// Whether `--store` names a PostgreSQL server.
    pub fn is_postgres(&self) -> bool {
        self.store.as_deref().is_some_and(|url| url.starts_with("postgres"))
    }

    /// Where this run's store goes: a new database on the `--store` PostgreSQL server, or the
    /// `--store sqlite://PATH` file, `db`, or `name` in a temporary directory.
    pub async fn place(&self, db: Option<PathBuf>, name: &str) -> anyhow::Result<Place> {
        match self.store.as_deref() {
            Some(url) if url.starts_with("postgres") => {
                let created = herald_store::scratch::fresh_database_on(url, password().as_deref())
                    .await
                    .map_err(anyhow::Error::msg)?;
                Ok(Place::Postgres(created))
            }
            Some(url) => {
                let path = url.strip_prefix("sqlite://").with_context(|| {
                    format!("--store {url} is neither sqlite://PATH nor postgres://...")
                })?;
                Ok(Place::Sqlite(ScratchDb::resolve(Some(path.into()), name)?))
            }
            None => Ok(Place::Sqlite(ScratchDb::resolve(db, name)?)),
        }
    }

    /// Removes a database [`StoreArgs::place`] created on the PostgreSQL server, so that the
    /// server keeps no garbage and its vacuuming of one measurement's rows does not run
    /// during the next (a SQLite place goes with its temporary directory).
    pub async fn discard(&self, place: Place) -> anyhow::Result<()> {
        if let (Place::Postgres(database), Some(server)) = (&place, self.store.as_deref()) {
            herald_store::scratch::drop_database_on(server, password().as_deref(), database)
                .await
                .map_err(anyhow::Error::msg)?;
        }
        Ok(())
    }

    /// A temporary SQLite file, whatever `--store` says: the figure beside PostgreSQL's.
    pub fn sqlite_place(&self, name: &str) -> anyhow::Result<Place> {
        Ok(Place::Sqlite(ScratchDb::resolve(None, name)?))
    }

    /// Store options for the store at `url` (as [`Place::url`] gives it) with these knobs.
    pub fn options(&self, url: &str) -> StoreOptions {
        let base = default_options(url);
        StoreOptions {
            busy_timeout: Duration::from_millis(self.busy_timeout_ms),
            write_patience: Duration::from_millis(self.write_patience_ms),
            max_connections: self.max_connections.unwrap_or(base.max_connections),
            ..base
        }
    }
}

/// The store's own defaults for the store at `url` (`sqlite://PATH` or `postgres://...`).
pub fn default_options(url: &str) -> StoreOptions {
    match url.strip_prefix("sqlite://") {
        Some(path) => StoreOptions::new(path),
        None => StoreOptions::postgres(url, password()),
    }
}

/// The PostgreSQL password, from the environment.
fn password() -> Option<String> {
    std::env::var(herald_store::scratch::PASSWORD_VAR).ok().filter(|p| !p.is_empty())
}
