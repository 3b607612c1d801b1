use std::time::{Duration, Instant};

use herald_core::Platform;
use herald_store::{SearchQuery, Store, StoreError, StoreOptions};
use sqlx::{Connection, SqliteConnection};

use crate::{session_for, turn};

/// A second connection, as another process would hold it.
async fn other_connection(path: &std::path::Path) -> SqliteConnection {
    SqliteConnection::connect(&format!("sqlite://{}", path.display())).await.unwrap()
}

fn options(path: &std::path::Path, busy_ms: u64, patience_ms: u64) -> StoreOptions {
    StoreOptions {
        busy_timeout: Duration::from_millis(busy_ms),
        write_patience: Duration::from_millis(patience_ms),
        ..StoreOptions::new(path)
    }
}

#[tokio::test]
async fn a_write_waits_for_a_held_lock_and_then_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    // A busy timeout far shorter than the hold, so the store's own retries do the waiting.
    let store = Store::open(options(&path, 50, 10_000)).await.unwrap();
    let session = store.create_session(&session_for(Platform::Cli, "me")).await.unwrap();

    let mut holder = other_connection(&path).await;
    sqlx::query("BEGIN IMMEDIATE").execute(&mut holder).await.unwrap();
    let writer = tokio::spawn({
        let store = store.clone();
        let id = session.id.clone();
        async move { store.append_messages(&id, turn(1)).await }
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!writer.is_finished(), "the write went through a held lock");
    sqlx::query("COMMIT").execute(&mut holder).await.unwrap();

    let ids = writer.await.unwrap().unwrap();
    assert_eq!(ids.len(), 4);
    assert!(store.busy_retries() > 0, "the retry path was not taken");
    assert_eq!(store.history(&session.id).await.unwrap().len(), 4);
}

#[tokio::test]
async fn a_lock_held_past_patience_gives_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = Store::open(options(&path, 50, 300)).await.unwrap();
    let session = store.create_session(&session_for(Platform::Cli, "me")).await.unwrap();

    let mut holder = other_connection(&path).await;
    sqlx::query("BEGIN IMMEDIATE").execute(&mut holder).await.unwrap();
    let started = Instant::now();
    let (append, rename) = tokio::join!(
        store.append_messages(&session.id, turn(1)),
        store.rename_session(&session.id, "blocked"),
    );
    let waited = started.elapsed();
    for err in [append.unwrap_err(), rename.unwrap_err()] {
        assert!(matches!(err, StoreError::Busy { .. }), "{err:?}");
        let message = err.to_string();
        assert!(message.contains("write_patience_ms") && !message.contains('\n'), "{message}");
    }
    assert!(waited < Duration::from_secs(5), "gave up only after {waited:?}");
    sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();

    // Nothing was half-written, and the store works again once the lock is gone.
    assert!(store.history(&session.id).await.unwrap().is_empty());
    store.append_messages(&session.id, turn(2)).await.unwrap();
    assert_eq!(store.history(&session.id).await.unwrap().len(), 4);
}

#[tokio::test]
async fn herald_writers_queue_on_the_lock_file_within_patience() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = Store::open(options(&path, 50, 300)).await.unwrap();
    let session = store.create_session(&session_for(Platform::Cli, "me")).await.unwrap();
    // Another herald process in the middle of a write holds the lock file.
    let other = std::fs::File::open(dir.path().join("state.db-lock")).unwrap();
    other.lock().unwrap();
    let started = Instant::now();
    let err = store.append_messages(&session.id, turn(1)).await.unwrap_err();
    assert!(matches!(err, StoreError::Busy { .. }), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(3));
    // Once it lets go, the next write goes through at once.
    other.unlock().unwrap();
    let writer = tokio::spawn({
        let store = store.clone();
        let id = session.id.clone();
        async move { store.append_messages(&id, turn(2)).await }
    });
    assert_eq!(writer.await.unwrap().unwrap().len(), 4);
    assert_eq!(store.history(&session.id).await.unwrap().len(), 4);
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(dir.path().join("state.db-lock")).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
}

#[tokio::test]
async fn reads_and_closing_need_no_write_lock_when_the_index_is_caught_up() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = Store::open(options(&path, 50, 300)).await.unwrap();
    let session = store.create_session(&session_for(Platform::Cli, "me")).await.unwrap();
    store.append_messages(&session.id, turn(1)).await.unwrap();
    store.index_pending().await.unwrap();

    // Another process (the gateway, say) holds the write lock past this store's patience:
    // a search, an index catch-up and a close with nothing to index still go through.
    let mut holder = other_connection(&path).await;
    sqlx::query("BEGIN IMMEDIATE").execute(&mut holder).await.unwrap();
    let hits = store.search(&SearchQuery::new("answer")).await.unwrap();
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(store.index_pending().await.unwrap(), 0);
    store.close().await;
    sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();
    assert_eq!(store.busy_retries(), 0, "a read waited on the write lock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_joined_late_gets_its_own_patience() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = Store::open(options(&path, 50, 1000)).await.unwrap();
    let session = store.create_session(&session_for(Platform::Cli, "me")).await.unwrap();
    let other = std::fs::File::open(dir.path().join("state.db-lock")).unwrap();
    other.lock().unwrap();
    // The first write waits on the lock file from the start and runs out of patience at 1 s;
    // the second joins the queue half-way and must not share that fate.
    let write = |n| {
        let (store, id) = (store.clone(), session.id.clone());
        tokio::spawn(async move { store.append_messages(&id, turn(n)).await })
    };
    let early = write(1);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let late = write(2);
    let err = early.await.unwrap().unwrap_err();
    assert!(matches!(err, StoreError::Busy { .. }), "{err:?}");
    // Let go well within the late write's own second.
    tokio::time::sleep(Duration::from_millis(300)).await;
    other.unlock().unwrap();
    assert_eq!(late.await.unwrap().unwrap().len(), 4);
    let history = store.history(&session.id).await.unwrap();
    assert_eq!(history[0].content, "question number 2");
}

/// Holds the lock file as another herald process would, spawns the `early` writes, and once
/// the store's flusher has taken them and waits for the lock, the `late` ones; lets go after.
async fn queue_behind_the_lock<T: Send + 'static>(
    dir: &std::path::Path,
    early: Vec<tokio::task::JoinHandle<T>>,
    late: impl FnOnce() -> Vec<tokio::task::JoinHandle<T>>,
) -> Vec<T> {
    let other = std::fs::File::open(dir.join("state.db-lock")).unwrap();
    other.lock().unwrap();
    let mut writes = early;
    tokio::time::sleep(Duration::from_millis(200)).await;
    writes.extend(late());
    tokio::time::sleep(Duration::from_millis(200)).await;
    other.unlock().unwrap();
    let mut done = Vec::new();
    for write in writes {
        done.push(write.await.unwrap());
    }
    done
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_that_queue_while_the_lock_is_held_are_stored_with_the_batch() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(options(&dir.path().join("state.db"), 50, 10_000)).await.unwrap();
    let mut sessions = Vec::new();
    for user in ["a", "b", "c"] {
        sessions.push(store.create_session(&session_for(Platform::Telegram, user)).await.unwrap());
    }
    let write = |s: usize, n: usize| {
        let (store, id) = (store.clone(), sessions[s].id.clone());
        tokio::spawn(async move { store.append_messages(&id, turn(n)).await.unwrap() })
    };
    let ids = queue_behind_the_lock(dir.path(), vec![write(0, 1), write(1, 2)], || {
        vec![write(2, 3), write(0, 4)]
    })
    .await;
    // Each write's messages got consecutive ids, and the writes taken before the lock came
    // first in the batch (the two early ones may have queued in either order).
    for write in &ids {
        assert!(write.windows(2).all(|w| w[1] == w[0] + 1), "{ids:?}");
    }
    let (early, late) = ids.split_at(2);
    let last_early = early.iter().flatten().max().unwrap();
    assert!(late.iter().flatten().all(|id| id > last_early), "{ids:?}");
    for (s, numbers) in [(0, [1, 4].as_slice()), (1, &[2]), (2, &[3])] {
        let history = store.history(&sessions[s].id).await.unwrap();
        let expected: Vec<String> =
            numbers.iter().flat_map(|&n| turn(n)).map(|m| m.content).collect();
        let stored: Vec<String> = history.into_iter().map(|m| m.content).collect();
        assert_eq!(stored, expected);
        let session = store.session(&sessions[s].id).await.unwrap().unwrap();
        assert_eq!(session.message_count, 4 * numbers.len() as i64);
        assert_eq!(session.tool_call_count, numbers.len() as i64);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivery_that_queued_behind_the_lock_is_recognized() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(options(&dir.path().join("state.db"), 50, 10_000)).await.unwrap();
    let session = store.create_session(&session_for(Platform::Telegram, "a")).await.unwrap();
    let inbound = |id: &'static str, text: &'static str| {
        let (store, session) = (store.clone(), session.id.clone());
        tokio::spawn(async move {
            let message = herald_store::NewMessage::user(text);
            store.append_inbound(&session, Platform::Telegram, id, message).await.unwrap()
        })
    };
    let outcomes = queue_behind_the_lock(dir.path(), vec![inbound("7", "first")], || {
        vec![inbound("7", "redelivered"), inbound("8", "second")]
    })
    .await;
    assert!(matches!(outcomes[0], herald_store::Appended::Stored(_)), "{outcomes:?}");
    assert_eq!(outcomes[1], herald_store::Appended::Duplicate);
    assert!(matches!(outcomes[2], herald_store::Appended::Stored(_)), "{outcomes:?}");
    let history = store.history(&session.id).await.unwrap();
    let texts: Vec<&str> = history.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(texts, ["first", "second"]);
    assert_eq!(store.session(&session.id).await.unwrap().unwrap().message_count, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_waited_long_for_the_lock_is_stamped_when_it_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = Store::open(options(&path, 50, 10_000)).await.unwrap();
    let session = store.create_session(&session_for(Platform::Cli, "me")).await.unwrap();
    let other = std::fs::File::open(dir.path().join("state.db-lock")).unwrap();
    other.lock().unwrap();
    let write = tokio::spawn({
        let (store, id) = (store.clone(), session.id.clone());
        async move { store.append_messages(&id, turn(1)).await }
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let released = herald_store::now_ms();
    other.unlock().unwrap();
    write.await.unwrap().unwrap();
    // Built while the lock was held, its statements were built again once they had waited.
    let history = store.history(&session.id).await.unwrap();
    assert!(history.iter().all(|m| m.created_at >= released), "{:?}", history[0].created_at);
    let stored = store.session(&session.id).await.unwrap().unwrap();
    assert!(stored.updated_at >= released);
}
