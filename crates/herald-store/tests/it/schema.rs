use herald_store::scratch::{Kind, Scratch};
use herald_store::{Store, StoreError, StoreOptions};
use sqlx::{Connection, SqliteConnection};

use crate::fresh;

#[tokio::test]
async fn migrations_apply_to_an_empty_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/dir/state.db");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::File::create(&path).unwrap();
    let store = Store::open(StoreOptions::new(&path)).await.unwrap();
    let health = store.health().await.unwrap();
    assert_eq!(health.schema_version, Store::known_schema_version());
    assert_eq!(health.journal_mode, "wal");
    assert!(health.fts5);
    assert_eq!(health.integrity, ["ok"]);
}

#[tokio::test]
async fn a_missing_directory_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a/b/state.db");
    Store::open(StoreOptions::new(&path)).await.unwrap();
    assert!(path.exists());
}

#[tokio::test]
async fn a_newer_database_is_refused_and_left_alone() {
    let (store, dir) = fresh().await;
    store.close().await;
    let path = dir.path().join("state.db");
    let future = Store::known_schema_version() + 1;
    let mut conn =
        SqliteConnection::connect(&format!("sqlite://{}", path.display())).await.unwrap();
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
         VALUES (?, 'from the future', 1, x'00', 0)",
    )
    .bind(future)
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();

    let err = Store::open(StoreOptions::new(&path)).await.unwrap_err();
    assert!(matches!(err, StoreError::NewerSchema { found, .. } if found == future), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("newer") && message.contains("upgrade herald"), "{message}");
    assert!(!message.contains('\n'));
}

#[tokio::test]
async fn a_wal_database_stays_wal() {
    let (store, dir) = fresh().await;
    store.close().await;
    let store = crate::open(&dir.path().join("state.db")).await;
    assert!(store.is_wal());
    assert_eq!(store.health().await.unwrap().journal_mode, "wal");
}

#[tokio::test]
async fn a_newer_postgres_database_is_refused_and_left_alone() {
    let scratch = Scratch::new(Kind::Postgres).await;
    Store::open(scratch.options.clone()).await.unwrap().close().await;
    let mut conn = crate::replicas::connect(&scratch).await;
    let future: i64 = sqlx::query_scalar("SELECT max(version) + 1 FROM _sqlx_migrations")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
         VALUES ($1, 'from the future', true, '\\x00', 0)",
    )
    .bind(future)
    .execute(&mut conn)
    .await
    .unwrap();

    let err = Store::open(scratch.options.clone()).await.unwrap_err();
    assert!(matches!(err, StoreError::NewerSchema { found, .. } if found == future), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("newer") && message.contains("upgrade herald"), "{message}");
    assert!(!message.contains('\n') && !message.contains("password"), "{message}");
    // left alone: still there, still newer
    let recorded: i64 = sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(recorded, future);
}
