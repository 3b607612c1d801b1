//! The group commit against a real file: batches shared, refused, retried with care.

#![allow(clippy::unwrap_used)]
use herald_core::Platform;

use super::*;

/// A job of the group commit that runs `statements` in order, spawned.
fn grouped_statements(
    store: &Lite,
    statements: &'static [&'static str],
) -> tokio::task::JoinHandle<Result<(), StoreError>> {
    let store = store.clone();
    tokio::spawn(async move {
        store
            .grouped(move |conn| {
                Box::pin(async move {
                    for statement in statements {
                        sqlx::query(*statement).execute(&mut *conn).await?;
                    }
                    Ok(())
                })
            })
            .await
    })
}

#[tokio::test]
async fn a_failing_job_undoes_only_itself_in_a_shared_batch() {
    let (store, _dir) = crate::open::scratch_store().await;
    let session =
        store.create_session(&crate::NewSession::new(Platform::Telegram, "p")).await.unwrap();
    // Holding the write lock makes all three writes wait for the same batch, which the
    // failing job sends round again with care.
    let lock = store.inner.write_lock.lock().await;
    let failing = grouped_statements(
        &store,
        &[
            "INSERT INTO platform_cursors (platform, name, value, updated_at)
             VALUES ('telegram', 'offset', 'lost', 0)",
            "INSERT INTO no_such_table VALUES (1)",
        ],
    );
    let saving = tokio::spawn({
        let store = store.clone();
        async move { store.set_cursor(Platform::Slack, "offset", "kept").await }
    });
    let appending = tokio::spawn({
        let (store, session) = (store.clone(), session.id.clone());
        async move {
            let message = crate::NewMessage::user("kept too");
            store.append_inbound(&session, Platform::Telegram, "m1", message).await
        }
    });
    while store.inner.writes.pending.lock().unwrap().len() < 3 {
        tokio::task::yield_now().await;
    }
    drop(lock);
    assert!(failing.await.unwrap().is_err());
    saving.await.unwrap().unwrap();
    assert!(matches!(appending.await.unwrap(), Ok(Appended::Stored(_))));
    assert_eq!(store.session(&session.id).await.unwrap().unwrap().message_count, 1);
    assert_eq!(store.cursor(Platform::Telegram, "offset").await.unwrap(), None);
    assert_eq!(store.cursor(Platform::Slack, "offset").await.unwrap().as_deref(), Some("kept"));
}

#[tokio::test]
async fn appends_applied_one_by_one_after_a_refused_batch_are_not_taken_for_duplicates() {
    let (store, _dir) = crate::open::scratch_store().await;
    let session =
        store.create_session(&crate::NewSession::new(Platform::Telegram, "p")).await.unwrap();
    let lock = store.inner.write_lock.lock().await;
    // A job of the same batch makes its connection refuse one message.
    let poison = grouped_statements(
        &store,
        &["CREATE TEMP TRIGGER IF NOT EXISTS poison BEFORE INSERT ON main.messages
           WHEN new.content = 'poison' BEGIN SELECT RAISE(ABORT, 'poisoned'); END"],
    );
    let append = |id: &'static str, text: &'static str| {
        let (store, session) = (store.clone(), session.id.clone());
        tokio::spawn(async move {
            let message = crate::NewMessage::user(text);
            store.append_inbound(&session, Platform::Telegram, id, message).await
        })
    };
    let (fine, bad) = (append("m1", "fine"), append("m2", "poison"));
    while store.inner.writes.pending.lock().unwrap().len() < 3 {
        tokio::task::yield_now().await;
    }
    drop(lock);
    poison.await.unwrap().unwrap();
    assert!(matches!(fine.await.unwrap(), Ok(Appended::Stored(_))));
    assert!(bad.await.unwrap().is_err());
    let history = store.history(&session.id).await.unwrap();
    let texts: Vec<&str> = history.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(texts, ["fine"]);
    let stored = store.session(&session.id).await.unwrap().unwrap();
    assert_eq!(stored.message_count, 1);
}

/// Creates sessions for `users` (a `None` parent, or one that does not exist) in one batch;
/// returns what each creation gave.
async fn create_in_one_batch(
    store: &Lite,
    users: &[(&str, Option<&str>)],
) -> Vec<Result<crate::Session, StoreError>> {
    let lock = store.inner.write_lock.lock().await;
    let created: Vec<_> = users
        .iter()
        .map(|(user, parent)| {
            let store = store.clone();
            let new = crate::NewSession {
                user_id: Some(user.to_string()),
                parent_session_id: parent.map(str::to_owned),
                ..crate::NewSession::new(Platform::Telegram, "prompt")
            };
            tokio::spawn(async move { store.create_session(&new).await })
        })
        .collect();
    while store.inner.writes.pending.lock().unwrap().len() < users.len() {
        tokio::task::yield_now().await;
    }
    drop(lock);
    let mut outcomes = Vec::new();
    for created in created {
        outcomes.push(created.await.unwrap());
    }
    outcomes
}

#[tokio::test]
async fn sessions_created_in_one_batch_are_numbered_apart_and_a_bad_one_fails_alone() {
    let (store, _dir) = crate::open::scratch_store().await;
    let names: Vec<String> = (0..60).map(|i| format!("user-{i}")).collect();
    let users: Vec<(&str, Option<&str>)> = names.iter().map(|n| (n.as_str(), None)).collect();
    // All at once, then again with one whose parent does not exist among them.
    let mut sessions: Vec<crate::Session> =
        create_in_one_batch(&store, &users[..30]).await.into_iter().map(Result::unwrap).collect();
    let mut second = users[30..].to_vec();
    second.insert(10, ("orphan", Some("no-such-session")));
    let mut outcomes = create_in_one_batch(&store, &second).await;
    assert!(outcomes.remove(10).is_err());
    sessions.extend(outcomes.into_iter().map(Result::unwrap));

    for (i, session) in sessions.iter().enumerate() {
        let message = crate::NewMessage::user(format!("message {i}"));
        store.append_messages(&session.id, vec![message]).await.unwrap();
    }
    for (i, session) in sessions.iter().enumerate() {
        // What the batch handed out is the row it stored, but for the append since.
        let stored = store.session(&session.id).await.unwrap().unwrap();
        let expected =
            crate::Session { message_count: 1, updated_at: stored.updated_at, ..session.clone() };
        assert_eq!(stored, expected, "{i}");
        let history = store.history(&session.id).await.unwrap();
        let texts: Vec<&str> = history.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(texts, [format!("message {i}")]);
    }
    assert_eq!(store.stats().await.unwrap().sessions, 60);
}

#[tokio::test]
async fn group_commits_journal_in_memory_and_other_writes_on_disk() {
    let (store, _dir) = crate::open::scratch_store().await;
    let temp_store = || async {
        let mut writer = store.inner.write_lock.lock().await;
        let writer = writer.as_mut().unwrap();
        let mode: i64 = sqlx::query_scalar("PRAGMA temp_store").fetch_one(writer).await.unwrap();
        mode
    };
    let session = store.create_session(&crate::NewSession::new(Platform::Cli, "p")).await.unwrap();
    assert_eq!(temp_store().await, 2, "a group commit journals in memory");
    store.rename_session(&session.id, "renamed").await.unwrap();
    assert_eq!(temp_store().await, 0, "any other write journals as SQLite does");
    store.append_messages(&session.id, vec![crate::NewMessage::user("hi")]).await.unwrap();
    assert_eq!(temp_store().await, 2);
}

#[tokio::test]
async fn a_writer_left_in_a_transaction_is_replaced() {
    let (store, _dir) = crate::open::scratch_store().await;
    // A job that ends the transaction behind sqlx's back: its RELEASE fails, and so does
    // the rollback of the dropped transaction, which leaves the connection believing it
    // is still inside one. Every later BEGIN would be refused as nested.
    let broken = store
        .grouped(|conn| {
            Box::pin(async move {
                sqlx::query("ROLLBACK").execute(&mut *conn).await?;
                Ok(())
            })
        })
        .await;
    assert!(broken.is_err(), "{broken:?}");
    let session = store.create_session(&crate::NewSession::new(Platform::Cli, "p")).await;
    let session = session.unwrap();
    let message = crate::NewMessage::user("after");
    assert_eq!(store.append_messages(&session.id, vec![message]).await.unwrap().len(), 1);
}
