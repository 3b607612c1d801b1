//! `store copy`: SQLite into PostgreSQL and back again, nothing lost or changed.

use herald_core::{ChatRef, Platform, UserRef};
use herald_store::scratch::{Kind, Scratch};
use herald_store::{
    Delivery, NewMessage, NewPairing, NewSession, SearchQuery, Store, StoreError, TokenUsage,
};

use crate::{session_for, turn};

/// A store with something of everything: turns with tool calls, other scripts, lineage, a
/// title, a route, queued and undelivered messages, pairing, cursors.
async fn filled(store: &Store) -> Vec<String> {
    let mut ids = Vec::new();
    for (n, user) in ["ann", "бор", "李", "ع"].iter().enumerate() {
        let key = format!("telegram:dm:{user}");
        let new =
            NewSession { session_key: Some(key.clone()), ..session_for(Platform::Telegram, user) };
        let (session, _) = store.route_or_create(&key, &new).await.unwrap();
        store.append_messages(&session.id, turn(n)).await.unwrap();
        let texts = ["聊天记录，记忆断裂问题复现了", "Привет, как дела? 👋🏽", "مرحبا بالعالم", ""];
        let usage = TokenUsage { input: 10, output: 5, context: 15 };
        store.append_turn(&session.id, vec![NewMessage::user(texts[n])], usage).await.unwrap();
        ids.push(session.id);
    }
    let continued = store
        .compress_session(&ids[0], vec![NewMessage::user("summary of before")], 99)
        .await
        .unwrap();
    ids.push(continued.id.clone());
    store.rename_session(&continued.id, "the long talk").await.unwrap();
    let chat = ChatRef::direct(Platform::Telegram, "ann");
    let delivery =
        Delivery { chat: chat.clone(), reply_to: Some("77".into()), text: "sent?".into() };
    store
        .append_reply(
            &ids[1],
            vec![NewMessage::assistant("sent?")],
            TokenUsage::default(),
            delivery,
        )
        .await
        .unwrap();
    let user = UserRef { id: "ann".into(), name: Some("Ann".into()) };
    store.queue_inbound("telegram:dm:ann", "501", &chat, &user, "queued one").await.unwrap();
    store.set_cursor(Platform::Telegram, "offset", "1234").await.unwrap();
    store.record_inbound(Platform::Slack, "C1:1700000000.000100").await.unwrap();
    let pairing = NewPairing {
        platform: Platform::Discord,
        code: "ABCD1234",
        user_id: "u9",
        display_name: Some("Zoë"),
        chat_id: "dm9",
        ttl_ms: 3_600_000,
        max_pending: 3,
    };
    store.request_pairing(&pairing).await.unwrap();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_to_postgres_and_back_loses_nothing() {
    let first = Scratch::new(Kind::Sqlite).await;
    let middle = Scratch::new(Kind::Postgres).await;
    let last = Scratch::new(Kind::Sqlite).await;
    let source = Store::open(first.options.clone()).await.unwrap();
    let ids = filled(&source).await;
    let before = source.fingerprint().await.unwrap();
    assert!(before.of("messages").unwrap().rows > 20);

    let pg = Store::open(middle.options.clone()).await.unwrap();
    let copied = source.copy_to(&pg, &mut |_, _| {}).await.unwrap();
    assert_eq!(copied, before);
    assert_eq!(pg.fingerprint().await.unwrap(), before);

    let back = Store::open(last.options.clone()).await.unwrap();
    pg.copy_to(&back, &mut |_, _| {}).await.unwrap();
    assert_eq!(back.fingerprint().await.unwrap(), before);

    // The copy is a working store, not only equal rows: histories, lineage and search.
    for id in &ids {
        assert_eq!(back.history(id).await.unwrap(), source.history(id).await.unwrap());
        assert_eq!(back.session(id).await.unwrap(), source.session(id).await.unwrap());
    }
    assert_eq!(back.resolve_session("the long talk").await.unwrap().id, ids[4]);
    let hits = back.search(&SearchQuery::new("记忆断裂")).await.unwrap();
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(back.undelivered().await.unwrap(), source.undelivered().await.unwrap());
    assert_eq!(back.queued_inbound().await.unwrap(), source.queued_inbound().await.unwrap());
    // New rows go after the copied ones.
    let fresh = back.create_session(&NewSession::new(Platform::Cli, "p")).await.unwrap();
    back.append_messages(&fresh.id, turn(9)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_copy_only_goes_into_an_empty_store() {
    let a = Scratch::new(Kind::Sqlite).await;
    let b = Scratch::new(Kind::Postgres).await;
    let source = Store::open(a.options.clone()).await.unwrap();
    filled(&source).await;
    let target = Store::open(b.options.clone()).await.unwrap();
    source.copy_to(&target, &mut |_, _| {}).await.unwrap();
    let again = source.copy_to(&target, &mut |_, _| {}).await.unwrap_err();
    assert!(
        matches!(&again, StoreError::CopyTarget(why) if why.contains("already holds")),
        "{again}"
    );
}
