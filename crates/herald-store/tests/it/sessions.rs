use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use herald_core::{Platform, Role};
use herald_store::{NewSession, SessionFilter, StoreError};

use crate::{fresh, reopen, session_for, turn};

both! {
async fn history_reads_back_in_order_after_reopening(store, scratch) {
    let session = store.create_session(&session_for(Platform::Telegram, "42")).await.unwrap();
    store.append_messages(&session.id, turn(1)).await.unwrap();
    store.append_messages(&session.id, turn(2)).await.unwrap();
    let before = store.history(&session.id).await.unwrap();
    store.close().await;

    let reopened = reopen(&scratch).await;
    let after = reopened.history(&session.id).await.unwrap();
    assert_eq!(before, after);
    assert_eq!(after.len(), 8);
    let roles: Vec<Role> = after.iter().map(|m| m.role).collect();
    assert_eq!(&roles[..4], &[Role::User, Role::Assistant, Role::Tool, Role::Assistant]);
    assert_eq!(after[1].tool_calls.as_ref().unwrap()[0]["function"]["name"], "session_search");
    assert_eq!(after[2].tool_call_id.as_deref(), Some("call_1"));
    let stored = reopened.session(&session.id).await.unwrap().unwrap();
    assert_eq!((stored.message_count, stored.tool_call_count), (8, 2));
    assert_eq!(stored.user_id.as_deref(), Some("42"));
    assert_eq!(reopened.system_prompt(&session.id).await.unwrap().unwrap(), "You are Herald.");
}
}

#[tokio::test]
async fn database_files_are_private() {
    let (store, dir) = fresh().await;
    let session = store.create_session(&session_for(Platform::Cli, "me")).await.unwrap();
    store.append_messages(&session.id, turn(1)).await.unwrap();
    for name in ["state.db", "state.db-wal", "state.db-shm"] {
        let mode = std::fs::metadata(dir.path().join(name)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{name} has mode {:o}", mode & 0o777);
    }
    assert!(store.is_wal());
}

both! {
async fn identical_system_prompts_are_stored_once(store, scratch) {
    let a = store.create_session(&NewSession::new(Platform::Cli, "same")).await.unwrap();
    let b = store.create_session(&NewSession::new(Platform::Cli, "same")).await.unwrap();
    let c = store.create_session(&NewSession::new(Platform::Cli, "other")).await.unwrap();
    assert_eq!(a.system_prompt_hash, b.system_prompt_hash);
    assert_ne!(a.system_prompt_hash, c.system_prompt_hash);
}
}

both! {
async fn inbound_messages_are_deduplicated(store, scratch) {
    let s = store.create_session(&session_for(Platform::Telegram, "7")).await.unwrap();
    let hello = herald_store::NewMessage::user("hello");
    let first = store.append_inbound(&s.id, Platform::Telegram, "1001", hello.clone()).await;
    let again = store.append_inbound(&s.id, Platform::Telegram, "1001", hello.clone()).await;
    let other = store.append_inbound(&s.id, Platform::Discord, "1001", hello).await;
    assert!(matches!(first.unwrap(), herald_store::Appended::Stored(ids) if ids.len() == 1));
    assert_eq!(again.unwrap(), herald_store::Appended::Duplicate);
    assert!(matches!(other.unwrap(), herald_store::Appended::Stored(_)));
    assert_eq!(store.history(&s.id).await.unwrap().len(), 2);
}
}

both! {
async fn appending_to_a_missing_session_fails_alone(store, scratch) {
    let s = store.create_session(&session_for(Platform::Cli, "me")).await.unwrap();
    let (bad, good) = tokio::join!(
        store.append_messages("no-such-session", turn(1)),
        store.append_messages(&s.id, turn(2)),
    );
    assert!(matches!(bad, Err(StoreError::SessionNotFound(_))), "{bad:?}");
    assert_eq!(good.unwrap().len(), 4);
    assert_eq!(store.history(&s.id).await.unwrap().len(), 4);
}
}

both! {
async fn inbound_messages_batched_with_one_to_a_missing_session_are_stored_once(store, scratch) {
    let s = store.create_session(&session_for(Platform::Telegram, "me")).await.unwrap();
    let inbound = |session: &str, id: &str| {
        let (store, session, id) = (store.clone(), session.to_owned(), id.to_owned());
        async move {
            let message = herald_store::NewMessage::user(format!("message {id}"));
            store.append_inbound(&session, Platform::Telegram, &id, message).await
        }
    };
    // One batch: the missing session makes the first attempt fail part way, on its messages,
    // after the inbound ids were recorded; the next attempt must not take them for
    // redeliveries.
    let (first, bad, second) = tokio::join!(
        inbound(&s.id, "1"),
        store.append_messages("no-such-session", turn(1)),
        inbound(&s.id, "3")
    );
    assert!(matches!(bad, Err(StoreError::SessionNotFound(_))), "{bad:?}");
    assert!(matches!(first.unwrap(), herald_store::Appended::Stored(_)));
    assert!(matches!(second.unwrap(), herald_store::Appended::Stored(_)));
    assert_eq!(inbound(&s.id, "3").await.unwrap(), herald_store::Appended::Duplicate);
    let mut texts: Vec<String> =
        store.history(&s.id).await.unwrap().into_iter().map(|m| m.content).collect();
    // Appends made at once have no order between them (on PostgreSQL, two transactions).
    texts.sort_unstable();
    assert_eq!(texts, ["message 1", "message 3"]);
    assert_eq!(store.session(&s.id).await.unwrap().unwrap().message_count, 2);
}
}

both! {
async fn reroute_ends_the_old_session_and_moves_the_route(store, scratch) {
    let key = "telegram:dm:42";
    let new = session_for(Platform::Telegram, "42");
    let (first, created) = store.route_or_create(key, &new).await.unwrap();
    assert!(created);
    let (same, created) = store.route_or_create(key, &new).await.unwrap();
    assert!(!created);
    assert_eq!(same.id, first.id);

    let second = store.reroute(key, &new, "new").await.unwrap();
    assert_ne!(second.id, first.id);
    assert_eq!(store.routed_session(key).await.unwrap().unwrap().id, second.id);
    let old = store.session(&first.id).await.unwrap().unwrap();
    assert_eq!(old.end_reason.as_deref(), Some("new"));
    assert!(old.ended_at.is_some());
    assert!(store.session(&second.id).await.unwrap().unwrap().ended_at.is_none());
}
}

both! {
async fn list_filters_and_orders_newest_first(store, scratch) {
    let a = store.create_session(&session_for(Platform::Cli, "a")).await.unwrap();
    let b = store.create_session(&session_for(Platform::Telegram, "b")).await.unwrap();
    let c = store.create_session(&session_for(Platform::Telegram, "c")).await.unwrap();
    let all = store.list_sessions(&SessionFilter::default()).await.unwrap();
    let ids: Vec<&str> = all.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, [c.id.as_str(), b.id.as_str(), a.id.as_str()]);
    let filter =
        SessionFilter { source: Some(Platform::Telegram), limit: Some(1), ..Default::default() };
    let telegram = store.list_sessions(&filter).await.unwrap();
    assert_eq!(telegram.len(), 1);
    assert_eq!(telegram[0].id, c.id);
}
}

both! {
async fn titles_are_unique_and_resolve(store, scratch) {
    let a = store.create_session(&session_for(Platform::Cli, "a")).await.unwrap();
    let b = store.create_session(&session_for(Platform::Cli, "b")).await.unwrap();
    store.rename_session(&a.id, "groceries").await.unwrap();
    let taken = store.rename_session(&b.id, "groceries").await.unwrap_err();
    assert!(matches!(&taken, StoreError::TitleTaken { session_id, .. } if *session_id == a.id));
    assert_eq!(store.resolve_session("groceries").await.unwrap().id, a.id);
    assert_eq!(store.resolve_session(&b.id).await.unwrap().id, b.id);
    // UUIDv7 ids created together share their first characters.
    assert!(matches!(
        store.resolve_session(&a.id[..8]).await,
        Err(StoreError::AmbiguousSession { .. })
    ));
    assert_eq!(store.resolve_session(&b.id[..30]).await.unwrap().id, b.id);
    assert!(matches!(store.resolve_session("nope").await, Err(StoreError::SessionNotFound(_))));
    store.rename_session(&a.id, "").await.unwrap();
    assert_eq!(store.session(&a.id).await.unwrap().unwrap().title, None);
}
}

both! {
async fn deleting_a_parent_clears_the_childs_pointer(store, scratch) {
    let parent = store.create_session(&session_for(Platform::Telegram, "p")).await.unwrap();
    store.append_messages(&parent.id, turn(1)).await.unwrap();
    let child = NewSession {
        parent_session_id: Some(parent.id.clone()),
        ..session_for(Platform::Telegram, "p")
    };
    let child = store.create_session(&child).await.unwrap();
    assert_eq!(store.delete_session(&parent.id).await.unwrap(), 4);
    assert!(store.session(&parent.id).await.unwrap().is_none());
    assert!(store.history(&parent.id).await.unwrap().is_empty());
    let child = store.session(&child.id).await.unwrap().unwrap();
    assert_eq!(child.parent_session_id, None);
    assert!(matches!(store.delete_session(&parent.id).await, Err(StoreError::SessionNotFound(_))));
}
}

both! {
async fn a_deleted_sessions_messages_leave_the_search_index(store, scratch) {
    let session = store.create_session(&session_for(Platform::Telegram, "p")).await.unwrap();
    store.append_messages(&session.id, turn(1)).await.unwrap();
    store.delete_session(&session.id).await.unwrap();
    let hits = store.search(&herald_store::SearchQuery::new("question")).await.unwrap();
    assert!(hits.is_empty());
}
}

both! {
async fn prune_removes_only_old_ended_sessions(store, scratch) {
    let open_one = store.create_session(&session_for(Platform::Cli, "a")).await.unwrap();
    let ended = store.create_session(&session_for(Platform::Cli, "b")).await.unwrap();
    let other_source = store.create_session(&session_for(Platform::Slack, "c")).await.unwrap();
    store.end_session(&ended.id, "cli exit").await.unwrap();
    store.end_session(&other_source.id, "cli exit").await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;

    assert_eq!(store.prune_sessions(Duration::from_secs(3600), None).await.unwrap(), 0);
    let pruned = store.prune_sessions(Duration::from_millis(5), Some(Platform::Cli)).await.unwrap();
    assert_eq!(pruned, 1);
    assert!(store.session(&ended.id).await.unwrap().is_none());
    assert!(store.session(&open_one.id).await.unwrap().is_some());
    assert!(store.session(&other_source.id).await.unwrap().is_some());
}
}

both! {
async fn stats_count_sessions_and_messages(store, scratch) {
    let a = store.create_session(&session_for(Platform::Cli, "a")).await.unwrap();
    let b = store.create_session(&session_for(Platform::Telegram, "b")).await.unwrap();
    store.append_messages(&a.id, turn(1)).await.unwrap();
    store.append_messages(&b.id, turn(2)).await.unwrap();
    store.append_messages(&b.id, turn(3)).await.unwrap();
    store.end_session(&a.id, "cli exit").await.unwrap();
    let stats = store.stats().await.unwrap();
    assert_eq!((stats.sessions, stats.open_sessions, stats.messages), (2, 1, 12));
    assert_eq!(stats.by_source[0].source, Platform::Telegram);
    assert_eq!(stats.by_source[0].messages, 8);
    assert!(stats.size_bytes > 0);
}
}

both! {
async fn turns_add_their_tokens_and_sessions_reopen(store, scratch) {
    let s = store.create_session(&session_for(Platform::Cli, "me")).await.unwrap();
    let usage = herald_store::TokenUsage { input: 120, output: 30, context: 150 };
    store.append_turn(&s.id, turn(1), usage).await.unwrap();
    store.append_turn(&s.id, turn(2), usage).await.unwrap();
    store.end_session(&s.id, "cli exit").await.unwrap();
    store.reopen_session(&s.id).await.unwrap();
    let s = store.session(&s.id).await.unwrap().unwrap();
    assert_eq!((s.input_tokens, s.output_tokens), (240, 60));
    assert_eq!((s.ended_at, s.end_reason), (None, None));
}
}

both! {
async fn the_same_inbound_id_twice_in_one_batch_is_stored_once(store, scratch) {
    let s = store.create_session(&session_for(Platform::Telegram, "7")).await.unwrap();
    let msg = herald_store::NewMessage::user("hello");
    let (a, b) = tokio::join!(
        store.append_inbound(&s.id, Platform::Telegram, "55", msg.clone()),
        store.append_inbound(&s.id, Platform::Telegram, "55", msg),
    );
    let outcomes = [a.unwrap(), b.unwrap()];
    assert_eq!(outcomes.iter().filter(|o| **o == herald_store::Appended::Duplicate).count(), 1);
    assert_eq!(store.history(&s.id).await.unwrap().len(), 1);
    assert_eq!(store.session(&s.id).await.unwrap().unwrap().message_count, 1);
}
}

#[tokio::test]
async fn a_closed_store_refuses_writes_and_leaves_the_file_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = crate::open(&path).await;
    let s = store.create_session(&session_for(Platform::Cli, "me")).await.unwrap();
    store.append_messages(&s.id, turn(1)).await.unwrap();
    store.close().await;
    // Both write paths: the group commit (appends, a new session) and a transaction of its
    // own (a rename).
    let appended = store.append_messages(&s.id, turn(2)).await;
    assert!(matches!(appended, Err(StoreError::Closed)), "{appended:?}");
    let created = store.create_session(&session_for(Platform::Cli, "me")).await;
    assert!(matches!(created, Err(StoreError::Closed)), "{created:?}");
    let renamed = store.rename_session(&s.id, "late").await;
    assert!(matches!(renamed, Err(StoreError::Closed)), "{renamed:?}");
    // The last connection to close copied the WAL back and removed it.
    assert!(!dir.path().join("state.db-wal").exists());
    let reopened = crate::open(&path).await;
    assert_eq!(reopened.history(&s.id).await.unwrap().len(), 4);
}

both! {
async fn tokens_for_a_missing_session_fail_even_without_messages(store, scratch) {
    let s = store.create_session(&session_for(Platform::Cli, "me")).await.unwrap();
    let usage = herald_store::TokenUsage { input: 7, output: 3, context: 0 };
    // One batch; the empty append inserts no message whose foreign key could fail.
    let (bad, good) = tokio::join!(
        store.append_turn("no-such-session", Vec::new(), usage),
        store.append_turn(&s.id, Vec::new(), usage),
    );
    assert!(matches!(bad, Err(StoreError::SessionNotFound(_))), "{bad:?}");
    assert_eq!(good.unwrap(), Vec::<i64>::new());
    let stored = store.session(&s.id).await.unwrap().unwrap();
    assert_eq!((stored.input_tokens, stored.output_tokens), (7, 3));
}
}

both! {
async fn short_ids_are_unique_prefixes_that_resolve(store, scratch) {
    let mut ids = Vec::new();
    for _ in 0..20 {
        ids.push(store.create_session(&session_for(Platform::Cli, "me")).await.unwrap().id);
    }
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let short = store.short_ids(&refs).await.unwrap();
    for (id, short) in ids.iter().zip(&short) {
        assert!(id.starts_with(short.as_str()) && short.len() >= 8, "{short} of {id}");
        assert!(!short.ends_with('-'), "{short}");
        assert_eq!(store.resolve_session(short).await.unwrap().id, *id);
        assert_eq!(store.resolve_session(&format!("{short}…")).await.unwrap().id, *id);
    }
    // A title ending in `…` is still found as it is.
    store.rename_session(&ids[0], "to be continued…").await.unwrap();
    assert_eq!(store.resolve_session("to be continued…").await.unwrap().id, ids[0]);
}
}
