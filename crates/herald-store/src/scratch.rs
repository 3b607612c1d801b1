//! Scratch stores for tests and benchmarks: a new SQLite file in a temporary directory, or a new
//! database on the PostgreSQL server named by `HERALD_TEST_PG` (`scripts/pg-throwaway` starts
//! one; `scripts/test` starts one for the whole run).

use std::path::PathBuf;
use std::str::FromStr;

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{ConnectOptions, Connection};

use crate::open::StoreOptions;

/// The variable naming the test server's URL (no password in it).
pub const TEST_PG_VAR: &str = "HERALD_TEST_PG";
/// The variable holding the store's PostgreSQL password, for tests and for herald itself.
pub const PASSWORD_VAR: &str = "HERALD_STORE_PASSWORD";

/// Which backend a scratch store is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A SQLite file.
    Sqlite,
    /// A database on the test PostgreSQL server.
    Postgres,
}

/// Where a scratch store lives; the SQLite directory goes when this is dropped (the PostgreSQL
/// databases go with the throwaway server).
#[derive(Debug)]
pub struct Scratch {
    /// How to open it.
    pub options: StoreOptions,
    /// Its URL (`sqlite://PATH` or `postgres://...`, no password), as `[store] url` takes it.
    pub url: String,
    _dir: Option<tempfile::TempDir>,
}

impl Scratch {
    /// A new, empty place for a store of `kind`. Panics with what to do when the test server is
    /// not there: a test that needs PostgreSQL must not pass without it.
    pub async fn new(kind: Kind) -> Scratch {
        match kind {
            Kind::Sqlite => {
                let dir = tempfile::tempdir().expect("a temporary directory");
                let path: PathBuf = dir.path().join("state.db");
                Scratch {
                    url: format!("sqlite://{}", path.display()),
                    options: StoreOptions::new(path),
                    _dir: Some(dir),
                }
            }
            Kind::Postgres => {
                let url = fresh_database().await;
                Scratch {
                    options: StoreOptions::postgres(url.clone(), password()),
                    url,
                    _dir: None,
                }
            }
        }
    }
}

/// The test server's password, from the environment.
pub fn password() -> Option<String> {
    std::env::var(PASSWORD_VAR).ok().filter(|p| !p.is_empty())
}

/// The test server's URL. Panics when it is not set.
pub fn server_url() -> String {
    std::env::var(TEST_PG_VAR).unwrap_or_else(|_| {
        panic!(
            "{TEST_PG_VAR} is not set: run the tests with scripts/test, which starts a throwaway \
             PostgreSQL, or start one with scripts/pg-throwaway start DIR and export what it prints"
        )
    })
}

/// Creates a new, empty database on the test server; returns its URL (no password).
pub async fn fresh_database() -> String {
    fresh_database_on(&server_url(), password().as_deref()).await.unwrap_or_else(|e| panic!("{e}"))
}

/// Drops the database at `database` (as [`fresh_database_on`] made it) through a connection
/// to `server`, its sessions ended first.
pub async fn drop_database_on(
    server: &str,
    password: Option<&str>,
    database: &str,
) -> Result<(), String> {
    let location = crate::pg::redact(server);
    let path = database.split_once('?').map_or(database, |(path, _)| path);
    let name = path.rsplit_once('/').map_or(path, |(_, name)| name);
    let made = name
        .strip_prefix('t')
        .is_some_and(|hex| !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()));
    if !made {
        return Err(format!("{name} is not a database this run made"));
    }
    let mut conn = connect_to(server, password).await?;
    // The name was checked above: a letter and hex digits, as fresh_database_on makes them.
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")))
        .execute(&mut conn)
        .await
        .map_err(|e| format!("cannot drop the database {name} on {location}: {e}"))?;
    conn.close().await.ok();
    Ok(())
}

/// A connection to the database `server` names, or why not in one line.
async fn connect_to(server: &str, password: Option<&str>) -> Result<PgConnection, String> {
    let location = crate::pg::redact(server);
    let mut options = PgConnectOptions::from_str(server)
        .map_err(|e| format!("{location} is not a PostgreSQL URL: {e}"))?;
    if let Some(password) = password {
        options = options.password(password);
    }
    options.connect().await.map_err(|e| format!("cannot reach PostgreSQL at {location}: {e}"))
}

/// Creates a new, empty database on the server of `server` (a URL naming any database on it
/// that the user may connect to); returns the new database's URL (no password).
pub async fn fresh_database_on(server: &str, password: Option<&str>) -> Result<String, String> {
    let location = crate::pg::redact(server);
    let mut conn = connect_to(server, password).await?;
    let name = format!("t{}", uuid::Uuid::now_v7().simple());
    // The name is ours (a letter and hex digits), never input.
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .map_err(|e| format!("cannot create a database on {location}: {e}"))?;
    conn.close().await.ok();
    let (base, query) = match server.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (server, String::new()),
    };
    let root = base.rsplit_once('/').map_or(base, |(root, _)| root);
    Ok(format!("{root}/{name}{query}"))
}
