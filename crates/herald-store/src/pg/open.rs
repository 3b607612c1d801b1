//! Opening the PostgreSQL backend: connecting with the password from the environment, the pool
//! sized from config, and the migrations of top-level `migrations-postgres/`, with a database
//! written by a newer herald refused.

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, PgConnection};
use tracing::info;

use super::{Inner, Pg};
use crate::error::StoreError;
use crate::health::WriteHealth;
use crate::open::{PostgresOptions, StoreOptions};

/// The migrations of top-level `migrations-postgres/`, embedded at build time.
pub(crate) static MIGRATOR: Migrator = sqlx::migrate!("../../migrations-postgres");

/// `url` with any password in it replaced, fit for logs and error messages.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let (authority, tail) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let Some((userinfo, host)) = authority.rsplit_once('@') else { return url.to_owned() };
    let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
    // A password may also be passed as a query parameter.
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let kept: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((key, _)) if key.eq_ignore_ascii_case("password") => {
                        format!("{key}=(hidden)")
                    }
                    _ => pair.to_owned(),
                })
                .collect();
            format!("{path}?{}", kept.join("&"))
        }
        None => tail.to_owned(),
    };
    format!("{scheme}://{user}@{host}{tail}")
}

impl Pg {
    pub(crate) async fn open(
        postgres: &PostgresOptions,
        options: &StoreOptions,
    ) -> Result<Pg, StoreError> {
        let location = redact(&postgres.url);
        let fail = |reason: String| StoreError::Open { path: PathBuf::from(&location), reason };
        let mut connect = PgConnectOptions::from_str(&postgres.url)
            .map_err(|e| fail(redact(&e.to_string())))?
            .application_name("herald");
        if let Some(password) = &postgres.password {
            connect = connect.password(password);
        }
        // Statements slower than a second are worth a warning; sqlx's default logs every one.
        let connect =
            connect.log_slow_statements(tracing::log::LevelFilter::Warn, Duration::from_secs(1));

        let mut conn = connect_patiently(&connect, options.write_patience)
            .await
            .map_err(|e| fail(redact(&super::write::one_line(&e))))?;
        migrate(&mut conn, &location).await?;
        drop(conn);

        // Named apart, so an operator (or a test) can tell the connection holding the locks.
        let locks = super::locks::Locks::new(connect.clone().application_name("herald-locks"));
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections.max(2))
            .min_connections(1)
            .test_before_acquire(false)
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    if meta.idle_for >= PING_IDLE {
                        sqlx::Connection::ping(conn).await?;
                    }
                    Ok(true)
                })
            })
            .acquire_timeout(options.write_patience.max(Duration::from_secs(1)))
            .connect_with(connect)
            .await
            .map_err(|e| fail(redact(&super::write::one_line(&e))))?;
        Ok(Pg {
            inner: Arc::new(Inner {
                pool,
                location,
                write_patience: options.write_patience,
                busy_retries: AtomicU64::new(0),
                write_health: WriteHealth::default(),
                locks,
                indexer: crate::index::Indexer::default(),
                group: super::group::Group::default(),
            }),
        })
    }
}

/// A pooled connection idle this long is asked whether it is alive before it is handed out;
/// one in use more lately is not: a busy gateway would pay a round trip per statement. A write
/// that finds it broken after all is retried; a read fails once, as it would had the
/// connection broken just after a ping.
const PING_IDLE: Duration = Duration::from_secs(1);

/// Connects, trying again while the server is starting or out of reach, within `patience`:
/// replicas and their database often start together.
async fn connect_patiently(
    connect: &PgConnectOptions,
    patience: Duration,
) -> Result<PgConnection, sqlx::Error> {
    let started = std::time::Instant::now();
    loop {
        match connect.connect().await {
            Ok(conn) => return Ok(conn),
            Err(e) if super::write::is_retryable(&e) && started.elapsed() < patience => {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// The newest migration this binary carries for PostgreSQL.
pub(crate) fn known_version() -> i64 {
    MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0)
}

/// The newest migration recorded in the database, if any.
pub(crate) async fn applied_version(conn: &mut PgConnection) -> Result<i64, sqlx::Error> {
    let has_table: bool = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
        .fetch_one(&mut *conn)
        .await?;
    if !has_table {
        return Ok(0);
    }
    sqlx::query_scalar("SELECT coalesce(max(version), 0) FROM _sqlx_migrations WHERE success")
        .fetch_one(&mut *conn)
        .await
}

/// Refuses a newer database, then applies what is pending. sqlx holds an advisory lock while it
/// migrates, so replicas starting at once apply each migration once.
async fn migrate(conn: &mut PgConnection, location: &str) -> Result<(), StoreError> {
    let fail = |reason: String| StoreError::Open { path: PathBuf::from(location), reason };
    let known = known_version();
    let found = applied_version(conn).await.map_err(|e| fail(e.to_string()))?;
    if found > known {
        return Err(StoreError::NewerSchema { path: PathBuf::from(location), found, known });
    }
    if found == known {
        return Ok(());
    }
    if found > 0 {
        info!(store = %location, from = found, to = known, "upgrading the store's schema");
    }
    MIGRATOR.run(&mut *conn).await.map_err(|e| fail(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_never_reach_a_message() {
        assert_eq!(redact("postgres://ann:s3cret@db:5432/herald"), "postgres://ann@db:5432/herald");
        assert_eq!(
            redact("postgres://ann@db/herald?password=s3cret&sslmode=require"),
            "postgres://ann@db/herald?password=(hidden)&sslmode=require"
        );
        assert_eq!(redact("postgres://db/herald"), "postgres://db/herald");
        assert_eq!(redact("postgres://a:b@c@db/h"), "postgres://a@db/h");
    }
}
