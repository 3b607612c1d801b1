//! Histories read again after they changed, here or in another process: always what the store
//! holds, never what was read before.

use herald_core::Platform;
use herald_store::scratch::Scratch;
use herald_store::{NewMessage, Store, StoredMessage};

use crate::{reopen, session_for, turn};

/// The history as a store that never read it before sees it.
async fn from_disk(scratch: &Scratch, session: &str) -> Vec<StoredMessage> {
    let store = reopen(scratch).await;
    let history = store.history(session).await.unwrap();
    store.close().await;
    history
}

async fn check(reader: &Store, scratch: &Scratch, session: &str, len: usize) {
    let read = reader.history(session).await.unwrap();
    assert_eq!(read.len(), len);
    assert_eq!(read, from_disk(scratch, session).await);
}

both! {
async fn a_history_read_again_is_what_the_store_holds(store, scratch) {
    // Two stores on one database, as two processes: `reader` keeps reading one session while
    // `writer` changes it.
    let (reader, writer) = (store, reopen(&scratch).await);
    let session = reader.create_session(&session_for(Platform::Telegram, "ann")).await.unwrap();
    check(&reader, &scratch, &session.id, 0).await;

    writer.append_messages(&session.id, turn(1)).await.unwrap();
    check(&reader, &scratch, &session.id, 4).await;
    check(&reader, &scratch, &session.id, 4).await;
    reader.append_messages(&session.id, turn(2)).await.unwrap();
    writer.append_messages(&session.id, turn(3)).await.unwrap();
    check(&reader, &scratch, &session.id, 12).await;

    // `/retry` in the other process drops the last exchange; a new answer replaces it.
    assert_eq!(
        writer.reset_last_answer(&session.id).await.unwrap().as_deref(),
        Some("question number 3")
    );
    check(&reader, &scratch, &session.id, 9).await;
    writer
        .append_messages(&session.id, vec![NewMessage::assistant("another answer")])
        .await
        .unwrap();
    check(&reader, &scratch, &session.id, 10).await;
    let last = reader.history(&session.id).await.unwrap().pop().unwrap();
    assert_eq!(last.content, "another answer");

    writer.delete_session(&session.id).await.unwrap();
    check(&reader, &scratch, &session.id, 0).await;
}
}

both! {
async fn many_sessions_read_in_turn_stay_exact(store, scratch) {
    // More sessions than the store keeps in memory, each read, extended and read again.
    let mut sessions = Vec::new();
    for n in 0..300 {
        let new = session_for(Platform::Telegram, &format!("user-{n}"));
        let session = store.create_session(&new).await.unwrap();
        store.append_messages(&session.id, turn(n)).await.unwrap();
        assert_eq!(store.history(&session.id).await.unwrap().len(), 4);
        sessions.push(session.id);
    }
    for (n, id) in sessions.iter().enumerate() {
        store.append_messages(id, vec![NewMessage::user(format!("more {n}"))]).await.unwrap();
    }
    for (n, id) in sessions.iter().enumerate() {
        let history = store.history(id).await.unwrap();
        assert_eq!(history.len(), 5, "session {n}");
        assert_eq!(history[0].content, format!("question number {n}"));
        assert_eq!(history[4].content, format!("more {n}"));
        assert!(history.windows(2).all(|w| w[0].id < w[1].id));
    }
}
}
