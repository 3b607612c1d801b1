use std::collections::HashSet;

use herald_core::{ChatKind, ChatRef, Platform, Role, UserRef};
use herald_store::{
    Appended, ApproveError, Delivery, NewMessage, NewSession, PairingIssue, QueuedInbound, Routed,
    SearchQuery, Session, Store, StoreError,
};

use herald_store::scratch::{Kind, Scratch};

use crate::{fresh_on, reopen, session_for, turn};

/// The session a chat key is routed to, created when there is none.
async fn routed(store: &Store, key: &str) -> Session {
    let new =
        NewSession { session_key: Some(key.to_owned()), ..session_for(Platform::Telegram, key) };
    store.route_or_create(key, &new).await.unwrap().0
}

/// Queues `text` as the Telegram message `id` from user 42 in their DM.
async fn queue(store: &Store, session: &Session, id: &str, text: &str) -> Option<i64> {
    let chat = ChatRef::direct(Platform::Telegram, "42");
    let user = UserRef { id: "42".into(), name: None };
    let key = session.session_key.as_deref().unwrap_or("telegram:dm:42");
    store.queue_inbound(key, id, &chat, &user, text).await.unwrap()
}

/// What a search for `text` finds, as message texts.
async fn found(store: &Store, text: &str) -> Vec<String> {
    let hits = store.search(&SearchQuery::new(text)).await.unwrap();
    hits.into_iter().map(|h| h.snippet).collect()
}

/// Another fresh store on the backend of `scratch`.
async fn fresh_like(scratch: &Scratch) -> (Store, Scratch) {
    let kind = if scratch.options.postgres.is_some() { Kind::Postgres } else { Kind::Sqlite };
    fresh_on(kind).await
}

both! {
async fn cursors_are_kept_per_platform_and_name_across_restarts(store, scratch) {
    assert_eq!(store.cursor(Platform::Telegram, "offset").await.unwrap(), None);
    store.set_cursor(Platform::Telegram, "offset", "100").await.unwrap();
    assert_eq!(store.cursor(Platform::Telegram, "offset").await.unwrap().as_deref(), Some("100"));
    store.set_cursor(Platform::Telegram, "offset", "101").await.unwrap();
    store.set_cursor(Platform::Telegram, "backlog", "b").await.unwrap();
    store.set_cursor(Platform::Discord, "offset", "d").await.unwrap();
    store.close().await;

    let store = reopen(&scratch).await;
    let table = [
        (Platform::Telegram, "offset", Some("101")),
        (Platform::Telegram, "backlog", Some("b")),
        (Platform::Discord, "offset", Some("d")),
        (Platform::Discord, "backlog", None),
        (Platform::Slack, "offset", None),
    ];
    for (platform, name, expected) in table {
        let value = store.cursor(platform, name).await.unwrap();
        assert_eq!(value.as_deref(), expected, "{platform} {name}");
    }
}

async fn open_sessions_say_where_their_chats_stand(store, scratch) {
    let routed_in = async |key: &str, chat: &str, thread: Option<&str>| {
        let new = NewSession {
            session_key: Some(key.to_owned()),
            chat_id: Some(chat.to_owned()),
            thread_id: thread.map(str::to_owned),
            ..session_for(Platform::Discord, key)
        };
        store.route_or_create(key, &new).await.unwrap().0
    };
    let inbound = async |session: &Session, id: &str| {
        let message = NewMessage::user(format!("message {id}"));
        store.append_inbound(&session.id, Platform::Discord, id, message).await.unwrap();
    };
    let dm = routed_in("discord:dm:1", "501", None).await;
    inbound(&dm, "900").await;
    inbound(&dm, "1000").await;
    store.append_messages(&dm.id, vec![NewMessage::assistant("answer")]).await.unwrap();
    let thread = routed_in("discord:thread:2", "600", Some("601")).await;
    inbound(&thread, "950").await;
    let ended = routed_in("discord:dm:3", "503", None).await;
    inbound(&ended, "970").await;
    store.end_session(&ended.id, "new").await.unwrap();
    let _empty = routed_in("discord:dm:4", "504", None).await;
    let elsewhere = NewSession {
        session_key: Some("telegram:dm:5".into()),
        ..session_for(Platform::Telegram, "5")
    };
    let telegram = store.route_or_create("telegram:dm:5", &elsewhere).await.unwrap().0;
    store.append_inbound(&telegram.id, Platform::Telegram, "7", NewMessage::user("hi")).await.unwrap();

    let newest = store.newest_inbound(Platform::Discord).await.unwrap();
    let expected = [("501", "1000"), ("601", "950")].map(|(c, m)| (c.to_owned(), m.to_owned()));
    assert_eq!(newest, expected);
}

async fn queued_messages_keep_arrival_order_and_who_wrote_them_across_restarts(store, scratch) {
    let dm = routed(&store, "telegram:dm:42").await;
    let group = routed(&store, "telegram:group:-7:topic:3").await;
    let dm_chat = ChatRef::direct(Platform::Telegram, "42");
    let topic = ChatRef {
        platform: Platform::Telegram,
        id: "-7".into(),
        kind: ChatKind::Group,
        thread: Some("3".into()),
    };
    let ann = UserRef { id: "42".into(), name: Some("Ann".into()) };
    let bob = UserRef { id: "43".into(), name: None };
    let arrivals = [
        (&dm, "11", &dm_chat, &ann, "first"),
        (&group, "12", &topic, &bob, "second"),
        (&dm, "13", &dm_chat, &ann, "third"),
    ];
    let mut expected = Vec::new();
    for (session, id, chat, user, text) in arrivals {
        let key = session.session_key.clone().unwrap();
        let seq = store.queue_inbound(&key, id, chat, user, text).await.unwrap();
        let seq = seq.unwrap_or_else(|| panic!("message {id} was new"));
        expected.push(QueuedInbound {
            seq,
            session_key: key,
            message_id: id.into(),
            chat: chat.clone(),
            user: user.clone(),
            content: text.into(),
        });
    }
    let seqs: Vec<i64> = expected.iter().map(|q| q.seq).collect();
    assert!(seqs.is_sorted() && seqs[0] < seqs[1] && seqs[1] < seqs[2], "{seqs:?}");
    assert_eq!(store.queued_inbound().await.unwrap(), expected);
    store.close().await;

    let store = reopen(&scratch).await;
    assert_eq!(store.queued_inbound().await.unwrap(), expected);
    // queued, not answered: nothing is in the histories yet
    assert!(store.history(&dm.id).await.unwrap().is_empty());
}

async fn a_redelivered_message_is_queued_once(store, scratch) {
    let s = routed(&store, "telegram:dm:42").await;
    assert!(queue(&store, &s, "1", "hello").await.is_some());
    assert_eq!(queue(&store, &s, "1", "hello").await, None);
    // already answered: stored straight into the history before
    let answered = store.append_inbound(&s.id, Platform::Telegram, "2", NewMessage::user("hi"));
    assert!(matches!(answered.await.unwrap(), Appended::Stored(_)));
    assert_eq!(queue(&store, &s, "2", "hi").await, None);
    // and the other way round: queued first, then delivered again while idle
    assert!(queue(&store, &s, "3", "later").await.is_some());
    let again = store.append_inbound(&s.id, Platform::Telegram, "3", NewMessage::user("later"));
    assert_eq!(again.await.unwrap(), Appended::Duplicate);
    // the same id on another platform is another message
    let discord = ChatRef::direct(Platform::Discord, "42");
    let user = UserRef { id: "42".into(), name: None };
    let other = store.queue_inbound("discord:dm:42", "1", &discord, &user, "hello");
    assert!(other.await.unwrap().is_some());

    let queued = store.queued_inbound().await.unwrap();
    let ids: Vec<(Platform, &str)> =
        queued.iter().map(|q| (q.chat.platform, q.message_id.as_str())).collect();
    assert_eq!(
        ids,
        [(Platform::Telegram, "1"), (Platform::Telegram, "3"), (Platform::Discord, "1")]
    );
    assert_eq!(store.history(&s.id).await.unwrap().len(), 1);
}

async fn taking_queued_messages_appends_them_in_the_given_order_once(store, scratch) {
    let s = routed(&store, "telegram:dm:42").await;
    store.append_messages(&s.id, turn(1)).await.unwrap();
    let a = queue(&store, &s, "21", "alpha").await.unwrap();
    let b = queue(&store, &s, "22", "beta").await.unwrap();
    let c = queue(&store, &s, "23", "gamma").await.unwrap();

    assert_eq!(store.take_queued(&s.id, &[c, a]).await.unwrap().len(), 2);
    // `a` is gone already: only `b` is appended
    assert_eq!(store.take_queued(&s.id, &[a, b]).await.unwrap().len(), 1);
    assert!(store.take_queued(&s.id, &[a, b, c]).await.unwrap().is_empty());
    assert!(store.queued_inbound().await.unwrap().is_empty());
    store.close().await;

    let store = reopen(&scratch).await;
    let history = store.history(&s.id).await.unwrap();
    let tail: Vec<(Role, &str, Option<&str>)> = history[4..]
        .iter()
        .map(|m| (m.role, m.content.as_str(), m.platform_message_id.as_deref()))
        .collect();
    let expected = [
        (Role::User, "gamma", Some("23")),
        (Role::User, "alpha", Some("21")),
        (Role::User, "beta", Some("22")),
    ];
    assert_eq!(tail, expected);
    assert_eq!(store.session(&s.id).await.unwrap().unwrap().message_count, 7);
    assert!(store.queued_inbound().await.unwrap().is_empty());
    // once in the history, a redelivery is still recognized
    assert_eq!(queue(&store, &s, "21", "alpha").await, None);
}

async fn queued_messages_taken_beside_other_writes_keep_each_session_in_order(store, scratch) {
    let s = routed(&store, "telegram:dm:42").await;
    let other = routed(&store, "telegram:dm:43").await;
    let a = queue(&store, &s, "41", "первый 🙂").await.unwrap();
    let b = queue(&store, &s, "42", "第二条").await.unwrap();
    // At once, so that a store grouping its writes has them together: the take and the answer
    // behind it (one after the other, as a worker writes them), another session's turn, and
    // one message queued twice (two connections delivered it). Two writes of one session
    // issued at once have no order to keep: on PostgreSQL two rounds may commit them either
    // way.
    let seqs = [a, b];
    let ours = async {
        let taken = store.take_queued(&s.id, &seqs).await;
        (taken, store.append_messages(&s.id, vec![NewMessage::assistant("ответ")]).await)
    };
    let ((taken, answer), theirs, once, twice) = tokio::join!(
        ours,
        store.append_messages(&other.id, turn(1)),
        queue(&store, &other, "50", "¿otra vez?"),
        queue(&store, &other, "50", "¿otra vez?"),
    );
    assert_eq!(usize::from(once.is_some()) + usize::from(twice.is_some()), 1);
    let (taken, answer) = (taken.unwrap(), answer.unwrap());
    assert_eq!(taken.len(), 2);
    assert!(taken.iter().all(|id| answer[0] > *id), "{taken:?} then {answer:?}");
    assert_eq!(theirs.unwrap().len(), 4);
    let history = store.history(&s.id).await.unwrap();
    let said: Vec<(Role, &str)> = history.iter().map(|m| (m.role, m.content.as_str())).collect();
    assert_eq!(
        said,
        [(Role::User, "первый 🙂"), (Role::User, "第二条"), (Role::Assistant, "ответ")]
    );
    assert_eq!(store.session(&s.id).await.unwrap().unwrap().message_count, 3);
    assert_eq!(store.session(&other.id).await.unwrap().unwrap().message_count, 4);
    let queued = store.queued_inbound().await.unwrap();
    let texts: Vec<&str> = queued.iter().map(|q| q.content.as_str()).collect();
    assert_eq!(texts, ["¿otra vez?"]);
    // Taken out without a history (a command): once.
    assert!(store.unqueue(queued[0].seq).await.unwrap());
    assert!(!store.unqueue(queued[0].seq).await.unwrap());
    assert!(store.queued_inbound().await.unwrap().is_empty());
}

async fn taking_into_a_missing_session_loses_nothing(store, scratch) {
    let s = routed(&store, "telegram:dm:42").await;
    let seq = queue(&store, &s, "31", "keep me").await.unwrap();
    let taken = store.take_queued("no-such-session", &[seq]).await;
    assert!(matches!(taken, Err(StoreError::SessionNotFound(_))), "{taken:?}");
    let queued = store.queued_inbound().await.unwrap();
    assert_eq!(queued.iter().map(|q| q.seq).collect::<Vec<_>>(), [seq]);
    assert_eq!(store.take_queued(&s.id, &[seq]).await.unwrap().len(), 1);
}

async fn only_open_routed_sessions_waiting_for_an_answer_are_unanswered(store, scratch) {
    let waiting = routed(&store, "telegram:dm:1").await;
    store.append_messages(&waiting.id, turn(1)).await.unwrap();
    store.append_messages(&waiting.id, vec![NewMessage::user("still there?")]).await.unwrap();
    let answered = routed(&store, "telegram:dm:2").await;
    store.append_messages(&answered.id, turn(2)).await.unwrap();
    let ended = routed(&store, "telegram:dm:3").await;
    store.append_messages(&ended.id, vec![NewMessage::user("bye")]).await.unwrap();
    store.end_session(&ended.id, "new").await.unwrap();
    let unrouted = store.create_session(&session_for(Platform::Cli, "me")).await.unwrap();
    store.append_messages(&unrouted.id, vec![NewMessage::user("cli")]).await.unwrap();
    let empty = routed(&store, "telegram:dm:4").await;

    let check = |listed: &[Session], cases: &[(&Session, bool)]| {
        let ids: HashSet<&str> = listed.iter().map(|s| s.id.as_str()).collect();
        for (session, expected) in cases {
            let key = session.session_key.as_deref().unwrap_or("unrouted");
            assert_eq!(ids.contains(session.id.as_str()), *expected, "{key}");
        }
        assert_eq!(ids.len(), cases.iter().filter(|(_, e)| *e).count());
    };
    let listed = store.unanswered_sessions().await.unwrap();
    check(
        &listed,
        &[
            (&waiting, true),
            (&answered, false),
            (&ended, false),
            (&unrouted, false),
            (&empty, false),
        ],
    );

    // The same question asked of one key, as a worker starting on a shared store asks it.
    let keys = [(1, true), (2, false), (3, false), (4, false), (5, false)];
    for (chat, expected) in keys {
        let key = format!("telegram:dm:{chat}");
        assert_eq!(store.left_unanswered(&key).await.unwrap(), expected, "{key}");
        // And as part of the one read a worker starts with, beside its session and prompt.
        let opening = store.opening(&key).await.unwrap();
        assert!(!opening.queued, "{key}");
        match store.routed_session(&key).await.unwrap() {
            Some(session) => {
                let routed = opening.routed.expect("a routed key opens its session");
                let prompt = store.system_prompt(&session.id).await.unwrap().unwrap();
                assert_eq!((routed.session, routed.system_prompt), (session, prompt), "{key}");
                assert_eq!(routed.unanswered, expected, "{key}");
            }
            None => assert_eq!(opening.routed, None, "{key}"),
        }
    }
    // A message queued for a key shows in its opening, routed or not; only its own key's.
    let (chat, user) = (ChatRef::direct(Platform::Telegram, "5"), UserRef::new("5"));
    for key in ["telegram:dm:2", "telegram:dm:5"] {
        store.queue_inbound(key, &format!("q{key}"), &chat, &user, "你好").await.unwrap();
        let opening = store.opening(key).await.unwrap();
        assert!(opening.queued, "{key}");
        assert_eq!(opening.routed.is_some(), key.ends_with('2'), "{key}");
    }
    assert!(!store.opening("telegram:dm:3").await.unwrap().queued);
    // Created only where there is no route: then routed, with its prompt, waiting for nothing.
    for key in ["telegram:dm:1", "telegram:dm:5", "telegram:dm:6"] {
        let before = store.opening(key).await.unwrap();
        let new = NewSession {
            session_key: Some(key.to_owned()),
            system_prompt: "Ты — Herald 🙂".into(),
            ..session_for(Platform::Telegram, key)
        };
        let opened = store.opening_or_create(key, &new).await.unwrap();
        let routed = opened.routed.clone().expect("opened or created");
        assert_eq!(opened.queued, before.queued, "{key}");
        assert_eq!(Some(&routed.session), store.routed_session(key).await.unwrap().as_ref());
        match before.routed {
            Some(before) => assert_eq!(routed, before, "{key}"),
            None => {
                assert!(routed.created && !routed.unanswered, "{key}");
                assert_eq!(routed.system_prompt, new.system_prompt, "{key}");
                let again = store.opening_or_create(key, &new).await.unwrap();
                assert_eq!(again.routed, Some(Routed { created: false, ..routed }), "{key}");
            }
        }
    }

    store.append_messages(&waiting.id, vec![NewMessage::assistant("yes")]).await.unwrap();
    let listed = store.unanswered_sessions().await.unwrap();
    check(&listed, &[(&waiting, false)]);
    assert!(!store.left_unanswered("telegram:dm:1").await.unwrap());
}

async fn undo_drops_the_last_exchange_with_its_tool_calls(store, scratch) {
    // Removed text must leave search whether or not it was indexed before the undo.
    for indexed_first in [true, false] {
        let (store, _scratch) = fresh_like(&scratch).await;
        let s = routed(&store, "telegram:dm:42").await;
        let bystander = routed(&store, "telegram:dm:43").await;
        store.append_messages(&bystander.id, turn(3)).await.unwrap();
        store.append_messages(&s.id, turn(1)).await.unwrap();
        let kept = store.history(&s.id).await.unwrap();
        let calls = serde_json::json!([
            {"id": "z1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}},
            {"id": "z2", "type": "function", "function": {"name": "lookup", "arguments": "{}"}},
        ]);
        let exchange = vec![
            NewMessage::user("tell me about zeppelins"),
            NewMessage::assistant("").with_tool_calls(calls),
            NewMessage::tool("z1", "lookup", "zeppelins are airships"),
            NewMessage::tool("z2", "lookup", "zeppelins float"),
            NewMessage::assistant("zeppelins are rigid airships"),
        ];
        store.append_messages(&s.id, exchange).await.unwrap();
        if indexed_first {
            store.index_pending().await.unwrap();
        }
        assert_eq!(found(&store, "zeppelins").await.len(), 4, "indexed first: {indexed_first}");

        assert_eq!(store.undo_last_exchange(&s.id).await.unwrap(), 5);
        assert_eq!(store.history(&s.id).await.unwrap(), kept);
        let counts = store.session(&s.id).await.unwrap().unwrap();
        assert_eq!((counts.message_count, counts.tool_call_count), (4, 1));
        assert!(found(&store, "zeppelins").await.is_empty(), "indexed first: {indexed_first}");
        assert_eq!(found(&store, "answer").await.len(), 2);

        assert_eq!(store.undo_last_exchange(&s.id).await.unwrap(), 4);
        let counts = store.session(&s.id).await.unwrap().unwrap();
        assert_eq!((counts.message_count, counts.tool_call_count), (0, 0));
        assert_eq!(store.undo_last_exchange(&s.id).await.unwrap(), 0);
        assert_eq!(store.history(&bystander.id).await.unwrap().len(), 4);
    }
}

async fn undo_without_a_user_message_removes_nothing(store, scratch) {
    let s = routed(&store, "telegram:dm:42").await;
    assert_eq!(store.undo_last_exchange(&s.id).await.unwrap(), 0);
    store.append_messages(&s.id, vec![NewMessage::assistant("welcome")]).await.unwrap();
    assert_eq!(store.undo_last_exchange(&s.id).await.unwrap(), 0);
    assert_eq!(store.history(&s.id).await.unwrap().len(), 1);
    assert_eq!(store.session(&s.id).await.unwrap().unwrap().message_count, 1);
}

async fn retry_keeps_the_question_and_drops_the_answer(store, scratch) {
    let s = routed(&store, "telegram:dm:42").await;
    store.append_messages(&s.id, turn(1)).await.unwrap();
    store.append_messages(&s.id, turn(2)).await.unwrap();
    store.index_pending().await.unwrap();
    let before = store.history(&s.id).await.unwrap();

    let text = store.reset_last_answer(&s.id).await.unwrap();
    assert_eq!(text.as_deref(), Some("question number 2"));
    assert_eq!(store.history(&s.id).await.unwrap(), before[..5]);
    let counts = store.session(&s.id).await.unwrap().unwrap();
    assert_eq!((counts.message_count, counts.tool_call_count), (5, 1));
    assert_eq!(found(&store, "answer").await, ["**answer** number 1"]);
    // the question waits for an answer again, and retrying twice asks the same question
    let unanswered = store.unanswered_sessions().await.unwrap();
    assert_eq!(unanswered.iter().map(|u| &u.id).collect::<Vec<_>>(), [&s.id]);
    let again = store.reset_last_answer(&s.id).await.unwrap();
    assert_eq!(again.as_deref(), Some("question number 2"));
    assert_eq!(store.history(&s.id).await.unwrap().len(), 5);

    let silent = routed(&store, "telegram:dm:43").await;
    assert_eq!(store.reset_last_answer(&silent.id).await.unwrap(), None);
    store.append_messages(&silent.id, vec![NewMessage::assistant("hello")]).await.unwrap();
    assert_eq!(store.reset_last_answer(&silent.id).await.unwrap(), None);
    assert_eq!(store.history(&silent.id).await.unwrap().len(), 1);
}

async fn a_reply_stays_in_the_outbox_until_delivered_or_undone(store, scratch) {
    let session = routed(&store, "telegram:dm:42").await;
    let chat = ChatRef::direct(Platform::Telegram, "42");
    let delivery =
        |text: &str| Delivery { chat: chat.clone(), reply_to: None, text: text.to_owned() };
    let reply = |text: &str| vec![NewMessage::user("q"), NewMessage::assistant(text)];
    let first = store
        .append_reply(&session.id, reply("one"), Default::default(), delivery("one"))
        .await
        .unwrap();
    store
        .append_reply(&session.id, reply("two"), Default::default(), delivery("two"))
        .await
        .unwrap();
    store.close().await;

    let store = reopen(&scratch).await;
    let waiting = store.undelivered().await.unwrap();
    let texts: Vec<&str> = waiting.iter().map(|u| u.delivery.text.as_str()).collect();
    assert_eq!(texts, ["one", "two"]);
    assert_eq!(waiting[0].message_id, *first.last().unwrap());
    assert_eq!(waiting[0].delivery.chat, chat);
    store.delivered(waiting[0].message_id).await.unwrap();
    // /undo takes the last exchange back, its undelivered reply with it.
    store.undo_last_exchange(&session.id).await.unwrap();
    assert!(store.undelivered().await.unwrap().is_empty());
}
}

both! {
async fn pairing_gives_one_code_per_user_up_to_the_platform_limit(store, scratch) {
    let ask = |user: &'static str, code: &'static str| herald_store::NewPairing {
        platform: Platform::Telegram,
        code,
        user_id: user,
        display_name: Some("Ann"),
        chat_id: user,
        ttl_ms: 3_600_000,
        max_pending: 2,
    };
    let first = store.request_pairing(&ask("1", "AAAAAAAA")).await.unwrap();
    assert!(matches!(&first, PairingIssue::Issued(r) if r.code == "AAAAAAAA"), "{first:?}");
    let again = store.request_pairing(&ask("1", "BBBBBBBB")).await.unwrap();
    assert!(matches!(&again, PairingIssue::Pending(r) if r.code == "AAAAAAAA"), "{again:?}");
    let second = store.request_pairing(&ask("2", "CCCCCCCC")).await.unwrap();
    assert!(matches!(second, PairingIssue::Issued(_)), "{second:?}");
    assert_eq!(store.request_pairing(&ask("3", "DDDDDDDD")).await.unwrap(), PairingIssue::Full);
    let pending = store.pairing_requests().await.unwrap();
    let users: Vec<&str> = pending.iter().map(|p| p.user_id.as_str()).collect();
    assert_eq!(users, ["1", "2"]);

    assert!(!store.is_approved(Platform::Telegram, "1").await.unwrap());
    let approved = store.approve_pairing(Platform::Telegram, " aaaaaaaa ").await.unwrap().unwrap();
    assert_eq!((approved.user_id.as_str(), approved.display_name.as_deref()), ("1", Some("Ann")));
    assert!(store.is_approved(Platform::Telegram, "1").await.unwrap());
    assert!(!store.is_approved(Platform::Discord, "1").await.unwrap());
    let used = store.approve_pairing(Platform::Telegram, "AAAAAAAA").await.unwrap();
    assert_eq!(used, Err(ApproveError::Unknown("AAAAAAAA".into())));
    let freed = store.request_pairing(&ask("3", "DDDDDDDD")).await.unwrap();
    assert!(matches!(freed, PairingIssue::Issued(_)), "an approval frees its place: {freed:?}");
    store.close().await;

    let store = reopen(&scratch).await;
    let users = store.approved_users().await.unwrap();
    assert_eq!(users.iter().map(|u| u.user_id.as_str()).collect::<Vec<_>>(), ["1"]);
    assert!(store.revoke_user(Platform::Telegram, "1").await.unwrap());
    assert!(!store.revoke_user(Platform::Telegram, "1").await.unwrap());
    assert!(!store.is_approved(Platform::Telegram, "1").await.unwrap());
}

async fn an_expired_code_is_refused_and_forgotten(store, scratch) {
    let ask = |user: &'static str, code: &'static str, ttl_ms| herald_store::NewPairing {
        platform: Platform::Slack,
        code,
        user_id: user,
        display_name: None,
        chat_id: user,
        ttl_ms,
        max_pending: 1,
    };
    store.request_pairing(&ask("1", "EEEEEEEE", -1)).await.unwrap();
    assert!(store.pairing_requests().await.unwrap().is_empty());
    let late = store.approve_pairing(Platform::Slack, "EEEEEEEE").await.unwrap();
    assert_eq!(late, Err(ApproveError::Expired("EEEEEEEE".into())));
    assert!(!store.is_approved(Platform::Slack, "1").await.unwrap());
    // the expired code took no place
    store.request_pairing(&ask("2", "FFFFFFFF", -1)).await.unwrap();
    let next = store.request_pairing(&ask("3", "GGGGGGGG", 60_000)).await.unwrap();
    assert!(matches!(next, PairingIssue::Issued(_)), "{next:?}");
}
}
