//! Context compression's chain of sessions: the child continues the parent in one
//! transaction, titles number along the chain, and every session of it stays findable.

use std::time::Duration;

use herald_core::{Platform, Role};
use herald_store::{
    Delivery, NewMessage, NewSession, SearchQuery, Session, SessionFilter, Store, StoreError,
    TokenUsage,
};

use crate::turn;

const KEY: &str = "telegram:group:-100:7";

/// A Telegram group topic's session, routed from [`KEY`], with every piece of chat metadata
/// set, one turn in it.
async fn routed(store: &Store) -> Session {
    let new = NewSession {
        session_key: Some(KEY.to_owned()),
        chat_id: Some("-100".to_owned()),
        thread_id: Some("7".to_owned()),
        user_id: Some("42".to_owned()),
        chat_type: Some("group".to_owned()),
        model: Some("gpt-test".to_owned()),
        ..NewSession::new(Platform::Telegram, "You are Herald.\n  Be brief. ✓")
    };
    let (session, created) = store.route_or_create(KEY, &new).await.unwrap();
    assert!(created);
    store.append_messages(&session.id, turn(1)).await.unwrap();
    session
}

/// What a compression stores in the child: a summary, then a tool call and its result kept
/// together, then the last answer.
fn summary_and_tail(words: &str) -> Vec<NewMessage> {
    let call = serde_json::json!([{"id": "call_9", "type": "function",
        "function": {"name": "current_time", "arguments": "{}"}}]);
    vec![
        NewMessage::new(Role::User, format!("Summary of the conversation so far: {words}")),
        NewMessage::assistant("").with_tool_calls(call),
        NewMessage::tool("call_9", "current_time", "10:00"),
        NewMessage::assistant("it is ten"),
    ]
}

/// Compresses `id` with a summary mentioning `words`.
async fn compress(store: &Store, id: &str, words: &str) -> Session {
    store.compress_session(id, summary_and_tail(words), 900).await.unwrap()
}

/// The sessions of [`KEY`] that have not ended.
async fn current(store: &Store) -> Vec<Session> {
    let all = store.list_sessions(&SessionFilter::default()).await.unwrap();
    all.into_iter()
        .filter(|s| s.session_key.as_deref() == Some(KEY) && s.ended_at.is_none())
        .collect()
}

fn ids(sessions: &[Session]) -> Vec<&str> {
    sessions.iter().map(|s| s.id.as_str()).collect()
}

both! {
async fn compression_continues_the_chat_in_a_child_and_moves_the_route(store, scratch) {
    let parent = routed(&store).await;
    let child = compress(&store, &parent.id, "the user wants a haiku").await;

    assert_ne!(child.id, parent.id);
    assert_eq!(child.parent_session_id.as_deref(), Some(parent.id.as_str()));
    let metadata = |s: &Session| {
        (
            s.source,
            s.session_key.clone(),
            s.chat_id.clone(),
            s.thread_id.clone(),
            s.user_id.clone(),
            s.chat_type.clone(),
            s.model.clone(),
            s.system_prompt_hash.clone(),
        )
    };
    assert_eq!(metadata(&child), metadata(&parent));
    let prompt = store.system_prompt(&child.id).await.unwrap().unwrap();
    assert_eq!(prompt.as_bytes(), "You are Herald.\n  Be brief. ✓".as_bytes());
    assert_eq!((child.ended_at, child.title.as_deref()), (None, None));
    assert_eq!(child.context_tokens, 900);
    assert_eq!((child.message_count, child.tool_call_count), (4, 1));

    let parent = store.session(&parent.id).await.unwrap().unwrap();
    assert!(parent.ended_at.is_some());
    assert_eq!(parent.end_reason.as_deref(), Some("compressed"));
    assert_eq!(store.history(&parent.id).await.unwrap().len(), 4, "the parent keeps its history");

    assert_eq!(store.routed_session(KEY).await.unwrap().unwrap().id, child.id);
    assert_eq!(ids(&current(&store).await), [child.id.as_str()]);

    // The child's messages are ordinary messages, tool call and result kept as given.
    let history = store.history(&child.id).await.unwrap();
    let expected = summary_and_tail("the user wants a haiku");
    assert_eq!(history.len(), expected.len());
    for (stored, given) in history.iter().zip(&expected) {
        assert_eq!(
            (stored.role, &stored.content, &stored.tool_calls, &stored.tool_call_id),
            (given.role, &given.content, &given.tool_calls, &given.tool_call_id)
        );
        assert_eq!(stored.tool_name, given.tool_name);
    }
    // The next turn goes to the child.
    store.append_messages(&child.id, turn(2)).await.unwrap();
    assert_eq!(store.session(&child.id).await.unwrap().unwrap().message_count, 8);
}
}

both! {
async fn a_compressed_session_is_not_compressed_again(store, scratch) {
    let parent = routed(&store).await;
    let child = compress(&store, &parent.id, "first").await;
    let again = store.compress_session(&parent.id, summary_and_tail("second"), 10).await;
    let Err(StoreError::AlreadyContinued { id, newest }) = &again else {
        panic!("a second compression of the parent went through: {again:?}")
    };
    assert_eq!((id, newest.as_deref()), (&parent.id, Some(child.id.as_str())));
    let message = again.unwrap_err().to_string();
    assert!(message.contains(&child.id) && !message.contains('\n'), "{message}");

    // Two at once: one wins, the other is refused, and the chain does not split.
    let (a, b) = tokio::join!(
        store.compress_session(&child.id, summary_and_tail("a"), 10),
        store.compress_session(&child.id, summary_and_tail("b"), 10),
    );
    assert_eq!([&a, &b].iter().filter(|r| r.is_ok()).count(), 1, "{a:?} {b:?}");
    assert!([a, b].into_iter().any(|r| matches!(r, Err(StoreError::AlreadyContinued { .. }))));
    assert_eq!(current(&store).await.len(), 1);
    assert_eq!(store.chain(&parent.id).await.unwrap().len(), 3);

    // A session that ended without being continued is refused too, naming no successor.
    let closed = store.create_session(&NewSession::new(Platform::Cli, "p")).await.unwrap();
    store.end_session(&closed.id, "cli exit").await.unwrap();
    let refused = store.compress_session(&closed.id, Vec::new(), 0).await;
    assert!(
        matches!(refused, Err(StoreError::AlreadyContinued { newest: None, .. })),
        "{refused:?}"
    );
    let missing = store.compress_session("no-such-session", Vec::new(), 0).await;
    assert!(matches!(missing, Err(StoreError::SessionNotFound(_))), "{missing:?}");
}
}

both! {
async fn titles_number_along_the_chain_and_the_name_reaches_the_newest(store, scratch) {
    let first = routed(&store).await;
    store.rename_session(&first.id, "trip").await.unwrap();
    assert_eq!(store.resolve_session("trip").await.unwrap().id, first.id);
    let second = compress(&store, &first.id, "one").await;
    let third = compress(&store, &second.id, "two").await;
    let titles: Vec<Option<String>> =
        store.chain(&first.id).await.unwrap().into_iter().map(|s| s.title).collect();
    assert_eq!(titles, [Some("trip".into()), Some("trip #2".into()), Some("trip #3".into())]);

    assert_eq!(store.resolve_session("trip").await.unwrap().id, third.id);
    assert_eq!(store.resolve_session("trip #2").await.unwrap().id, second.id);
    assert_eq!(store.resolve_session(&first.id).await.unwrap().id, first.id, "an id is exact");

    // A number already taken elsewhere is skipped.
    let other = store.create_session(&NewSession::new(Platform::Cli, "p")).await.unwrap();
    store.rename_session(&other.id, "trip #4").await.unwrap();
    let fourth = compress(&store, &third.id, "three").await;
    assert_eq!(fourth.title.as_deref(), Some("trip #5"));
    assert_eq!(store.resolve_session("trip").await.unwrap().id, fourth.id);
}
}

both! {
async fn the_chain_is_the_same_from_any_member(store, scratch) {
    let a = routed(&store).await;
    let b = compress(&store, &a.id, "one").await;
    let c = compress(&store, &b.id, "two").await;
    let unrelated = store.create_session(&NewSession::new(Platform::Cli, "p")).await.unwrap();
    for member in [&a, &b, &c] {
        let chain = store.chain(&member.id).await.unwrap();
        assert_eq!(ids(&chain), [&a.id, &b.id, &c.id].map(String::as_str));
        assert_eq!(store.newest_in_chain(&member.id).await.unwrap().id, c.id);
    }
    assert_eq!(ids(&store.chain(&unrelated.id).await.unwrap()), [unrelated.id.as_str()]);
    assert!(matches!(store.chain("nope").await, Err(StoreError::SessionNotFound(_))));
    assert!(matches!(store.newest_in_chain("nope").await, Err(StoreError::SessionNotFound(_))));
}
}

both! {
async fn deleting_inside_a_chain_keeps_the_rest_linked(store, scratch) {
    let a = routed(&store).await;
    let b = compress(&store, &a.id, "one").await;
    let c = compress(&store, &b.id, "two").await;
    store.delete_session(&b.id).await.unwrap();
    let chain = store.chain(&c.id).await.unwrap();
    assert_eq!(ids(&chain), [a.id.as_str(), c.id.as_str()]);
    assert_eq!(chain[1].parent_session_id.as_deref(), Some(a.id.as_str()));

    // Deleting the root leaves its child the new root.
    store.delete_session(&a.id).await.unwrap();
    let c = store.session(&c.id).await.unwrap().unwrap();
    assert_eq!(c.parent_session_id, None);
    assert_eq!(ids(&store.chain(&c.id).await.unwrap()), [c.id.as_str()]);
}
}

both! {
async fn pruning_the_old_part_of_a_chain_keeps_the_current_session_whole(store, scratch) {
    let a = routed(&store).await;
    let b = compress(&store, &a.id, "one").await;
    let c = compress(&store, &b.id, "two").await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(store.prune_sessions(Duration::ZERO, None).await.unwrap(), 2);
    let c = store.session(&c.id).await.unwrap().unwrap();
    assert_eq!((c.parent_session_id, c.ended_at), (None, None));
    assert_eq!(store.routed_session(KEY).await.unwrap().unwrap().id, c.id);
    assert_eq!(store.history(&c.id).await.unwrap().len(), 4);
    let health = store.health().await.unwrap();
    assert!(health.integrity == ["ok"] && health.search_index_ok, "{health:?}");
}
}

both! {
async fn search_finds_every_session_of_a_chain_and_names_each(store, scratch) {
    let a = routed(&store).await;
    store.append_messages(&a.id, vec![NewMessage::user("pack the walrus kit")]).await.unwrap();
    let b = compress(&store, &a.id, "walrus kit packed").await;
    let c = compress(&store, &b.id, "walrus kit packed, tickets booked").await;
    store.append_messages(&c.id, vec![NewMessage::user("where is the walrus now")]).await.unwrap();

    let hits = store.search(&SearchQuery::new("walrus")).await.unwrap();
    let mut found: Vec<&str> = hits.iter().map(|h| h.session_id.as_str()).collect();
    found.sort_unstable();
    found.dedup();
    let mut chain = vec![a.id.as_str(), b.id.as_str(), c.id.as_str()];
    chain.sort_unstable();
    assert_eq!(found, chain);
    assert_eq!(hits.len(), 4);
    // Narrowed to one session of the chain, only its messages.
    let only_b = SearchQuery { session_id: Some(b.id.clone()), ..SearchQuery::new("walrus") };
    let hits = store.search(&only_b).await.unwrap();
    assert_eq!(hits.iter().map(|h| h.session_id.as_str()).collect::<Vec<_>>(), [b.id.as_str()]);
}
}

both! {
async fn context_tokens_follow_the_last_reported_call(store, scratch) {
    let s = routed(&store).await;
    let context = |store: &Store, id: String| {
        let store = store.clone();
        async move { store.session(&id).await.unwrap().unwrap().context_tokens }
    };
    assert_eq!(context(&store, s.id.clone()).await, 0);
    let usage = |input, output, context| TokenUsage { input, output, context };
    store.append_turn(&s.id, turn(2), usage(100, 20, 120)).await.unwrap();
    assert_eq!(context(&store, s.id.clone()).await, 120);
    // Not reported: the stored value stays.
    store.append_turn(&s.id, turn(3), usage(5, 5, 0)).await.unwrap();
    assert_eq!(context(&store, s.id.clone()).await, 120);
    let delivery = Delivery {
        chat: herald_core::ChatRef::direct(Platform::Telegram, "-100"),
        reply_to: None,
        text: "answer number 4".into(),
    };
    store.append_reply(&s.id, turn(4), usage(300, 40, 340), delivery).await.unwrap();
    let stored = store.session(&s.id).await.unwrap().unwrap();
    assert_eq!((stored.input_tokens, stored.output_tokens, stored.context_tokens), (405, 65, 340));

    // In one batch of the group commit, trusting and careful (a missing session sends the
    // batch the careful way): each session gets its own.
    let other = store.create_session(&NewSession::new(Platform::Cli, "p")).await.unwrap();
    let (x, y) = tokio::join!(
        store.append_turn(&s.id, turn(5), usage(1, 1, 500)),
        store.append_turn(&other.id, turn(5), usage(1, 1, 77)),
    );
    x.unwrap();
    y.unwrap();
    assert_eq!(context(&store, s.id.clone()).await, 500);
    assert_eq!(context(&store, other.id.clone()).await, 77);
    let (x, y, missing) = tokio::join!(
        store.append_turn(&s.id, turn(6), usage(1, 1, 600)),
        store.append_turn(&other.id, turn(6), usage(1, 1, 0)),
        store.append_turn("no-such-session", turn(6), usage(1, 1, 9)),
    );
    x.unwrap();
    y.unwrap();
    assert!(matches!(missing, Err(StoreError::SessionNotFound(_))), "{missing:?}");
    assert_eq!(context(&store, s.id.clone()).await, 600);
    assert_eq!(context(&store, other.id.clone()).await, 77);
}
}

/// A compression whose last statement fails on PostgreSQL undoes the child, the parent's end
/// and the moved route with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compression_that_fails_part_way_changes_nothing_on_postgres() {
    use sqlx::{ConnectOptions, Executor};
    let (store, scratch) = crate::fresh_on(herald_store::scratch::Kind::Postgres).await;
    let parent = routed(&store).await;
    store.rename_session(&parent.id, "trip").await.unwrap();
    let mut options: sqlx::postgres::PgConnectOptions = scratch.url.parse().unwrap();
    if let Some(password) = herald_store::scratch::password() {
        options = options.password(&password);
    }
    let mut conn = options.connect().await.unwrap();
    conn.execute(
        "CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN IF new.content = 'boom' THEN RAISE EXCEPTION 'boom'; END IF; RETURN new; END $$;
         CREATE TRIGGER boom BEFORE INSERT ON messages FOR EACH ROW EXECUTE FUNCTION boom();",
    )
    .await
    .unwrap();
    let messages = vec![NewMessage::user("summary"), NewMessage::user("boom")];
    assert!(store.compress_session(&parent.id, messages, 10).await.is_err());
    let sessions = store.list_sessions(&SessionFilter::default()).await.unwrap();
    assert_eq!(ids(&sessions), [parent.id.as_str()]);
    assert_eq!((sessions[0].ended_at, sessions[0].end_reason.as_deref()), (None, None));
    assert_eq!(store.routed_session(KEY).await.unwrap().unwrap().id, parent.id);

    conn.execute("DROP TRIGGER boom ON messages").await.unwrap();
    let child = store.compress_session(&parent.id, vec![NewMessage::user("ok")], 10).await;
    assert_eq!(child.unwrap().title.as_deref(), Some("trip #2"));
}
