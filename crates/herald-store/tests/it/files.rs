//! The database's files on disk: private modes, and opening a store that must already exist.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use herald_core::Platform;
use herald_store::{NewSession, Store, StoreError, StoreOptions};

use crate::fresh;

/// The file's permission bits, in octal.
fn mode(path: &Path) -> String {
    format!("{:o}", fs::metadata(path).unwrap().permissions().mode() & 0o777)
}

fn beside(db: &Path, suffix: &str) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(suffix);
    name.into()
}

#[tokio::test]
async fn a_database_other_users_can_read_is_made_private_with_its_files() {
    let (store, dir) = fresh().await;
    store.close().await;
    let db = dir.path().join("state.db");
    fs::set_permissions(&db, fs::Permissions::from_mode(0o644)).unwrap();
    fs::set_permissions(beside(&db, "-lock"), fs::Permissions::from_mode(0o664)).unwrap();
    // A WAL left behind by a process that ran with the loose mode.
    fs::File::create(beside(&db, "-wal")).unwrap();
    fs::set_permissions(beside(&db, "-wal"), fs::Permissions::from_mode(0o644)).unwrap();

    let store = Store::open(StoreOptions::new(&db)).await.unwrap();
    store.create_session(&NewSession::new(Platform::Cli, "p")).await.unwrap();
    for file in [db.clone(), beside(&db, "-wal"), beside(&db, "-shm"), beside(&db, "-lock")] {
        assert_eq!(mode(&file), "600", "{}", file.display());
    }
    store.close().await;
}

#[tokio::test]
async fn a_store_that_must_exist_is_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("data/state.db");
    let error = Store::open_existing(StoreOptions::new(&db)).await.unwrap_err();
    assert!(matches!(error, StoreError::Open { .. }), "{error:?}");
    let text = error.to_string();
    assert!(text.contains(&db.display().to_string()), "{text}");
    assert!(text.contains("does not exist") && text.contains("nothing was created"), "{text}");
    assert!(!dir.path().join("data").exists(), "no directory was made");

    Store::open(StoreOptions::new(&db)).await.unwrap().close().await;
    let store = Store::open_existing(StoreOptions::new(&db)).await.unwrap();
    assert!(store.list_sessions(&Default::default()).await.unwrap().is_empty());
    store.close().await;
}
