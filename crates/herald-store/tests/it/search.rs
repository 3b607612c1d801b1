use herald_core::{Platform, Role};
use herald_store::{NewMessage, SearchHit, SearchQuery, Store};
use proptest::prelude::*;

use crate::{reopen, session_for};

/// A few conversations worth searching, in `store`.
async fn corpus(store: &Store) {
    let alice = store.create_session(&session_for(Platform::Telegram, "alice")).await.unwrap();
    let bob = store.create_session(&session_for(Platform::Slack, "bob")).await.unwrap();
    let messages = |texts: &[&str]| texts.iter().map(|t| NewMessage::user(*t)).collect();
    store
        .append_messages(
            &alice.id,
            messages(&[
                "TODO: fix the chat-send retry before v2.1 ships",
                "the deploy script failed on the staging box",
                "deployment notes: run migrations first",
                "my cat knocked the router off the shelf (again)",
                "聊天记录，记忆断裂问题复现了",
                "emoji 🎉 party at the café",
                "下周一起测试通信协议",
            ]),
        )
        .await
        .unwrap();
    store
        .append_messages(
            &bob.id,
            vec![
                NewMessage::user("router router router firmware upgrade"),
                NewMessage::assistant("the router firmware is at v2.1 now"),
                NewMessage::tool("c1", "current_time", "2026-12-02T10:00:00Z"),
            ],
        )
        .await
        .unwrap();
}

async fn search(store: &Store, text: &str) -> Vec<SearchHit> {
    store.search(&SearchQuery::new(text)).await.unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

both! {
async fn hostile_input_never_errors(store, scratch) {
    corpus(&store).await;
    // (input, how many hits)
    let table: &[(&str, usize)] = &[
        ("TODO: fix", 1),
        ("chat-send", 1),
        ("v2.1", 2),
        ("\"chat-send retry\"", 1),
        ("(router", 3),
        ("router)", 3),
        ("router OR deploy", 4),
        ("OR router", 3),
        ("router AND", 3),
        ("NOT router", 3),
        ("router NOT firmware", 1),
        ("AND OR NOT", 0),
        ("\"unbalanced quote", 0),
        ("deploy*", 2),
        ("*", 0),
        ("🎉", 0),
        ("🎉 party", 1),
        ("cafe", 1),
        ("café", 1),
        ("", 0),
        ("   ", 0),
        ("content:router", 0),
        ("tool_name:current", 0),
        ("current_time", 1),
        ("NEAR(router firmware)", 0),
        ("^router", 3),
        ("'single quotes'", 0),
        ("a\"b\"c", 0),
        ("-- DROP TABLE messages;", 0),
        ("{router}", 3),
        ("router:", 3),
        ("\\", 0),
        ("记忆断裂", 1),
        ("通信", 1),
        ("复现", 1),
        ("记忆断裂 OR 通信", 2),
        ("记忆断裂 OR router", 4),
        ("通信 router", 0),
        ("记忆断裂问题 NOT 通信", 1),
        ("協議", 0),
    ];
    let mut wrong = Vec::new();
    for (input, expected) in table {
        let hits = search(&store, input).await.len();
        if hits != *expected {
            wrong.push(format!("{input:?}: {hits} hits, expected {expected}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    // Words inside unspaced text are found and marked, by the trigram index or literally.
    assert!(search(&store, "记忆断裂").await[0].snippet.contains("**记忆断裂**"));
    assert!(search(&store, "通信").await[0].snippet.contains("**通信**"));
    // The index survived all of that.
    assert_eq!(search(&store, "router").await.len(), 3);
}
}

both! {
async fn hits_are_ranked_and_marked(store, scratch) {
    corpus(&store).await;
    let hits = search(&store, "router").await;
    assert_eq!(hits.len(), 3);
    // BM25: the message that says "router" three times ranks first.
    assert!(hits[0].snippet.starts_with("**router** **router**"), "{:?}", hits[0].snippet);
    assert!(hits[0].rank <= hits[1].rank);
    assert_eq!(hits[0].source, Platform::Slack);
    assert!(hits[1].snippet.contains("**router**"));
}
}

both! {
async fn filters_narrow_the_hits(store, scratch) {
    corpus(&store).await;
    let query = |f: fn(&mut SearchQuery)| {
        let mut q = SearchQuery::new("v2.1");
        f(&mut q);
        q
    };
    let by_source = store.search(&query(|q| q.source = Some(Platform::Telegram))).await.unwrap();
    assert_eq!(by_source.len(), 1);
    assert_eq!(by_source[0].source, Platform::Telegram);
    let by_role = store.search(&query(|q| q.role = Some(Role::Assistant))).await.unwrap();
    assert_eq!(by_role.len(), 1);
    assert_eq!(by_role[0].role, Role::Assistant);
    let by_user = store.search(&query(|q| q.user_id = Some("bob".into()))).await.unwrap();
    assert_eq!(by_user.len(), 1);
    assert_eq!(by_user[0].source, Platform::Slack);
    let nobody = store.search(&query(|q| q.user_id = Some("carol".into()))).await.unwrap();
    assert!(nobody.is_empty());
    let limited = store.search(&SearchQuery { limit: 1, ..SearchQuery::new("router") }).await;
    assert_eq!(limited.unwrap().len(), 1);
    // Filters combine, and a role filter finds the tool's name as well as its text.
    let tool = store.search(&query(|q| q.role = Some(Role::Tool))).await.unwrap();
    assert!(tool.is_empty(), "v2.1 is not in the tool's result: {tool:?}");
    let named = |q: &mut SearchQuery| {
        q.text = "current_time".into();
        q.role = Some(Role::Tool);
        q.source = Some(Platform::Slack);
        q.user_id = Some("bob".into());
    };
    let mut by_name = SearchQuery::new("");
    named(&mut by_name);
    assert_eq!(store.search(&by_name).await.unwrap().len(), 1);
    by_name.source = Some(Platform::Telegram);
    assert!(store.search(&by_name).await.unwrap().is_empty());
}
}

both! {
async fn a_session_filter_and_deletes_keep_the_filters_exact(store, scratch) {
    corpus(&store).await;
    let router = search(&store, "router").await;
    let slack = router.iter().find(|h| h.source == Platform::Slack).unwrap().session_id.clone();
    let mut in_session = SearchQuery::new("router");
    in_session.session_id = Some(slack.clone());
    let hits = store.search(&in_session).await.unwrap();
    assert_eq!(hits.len(), 2);
    assert!(hits.iter().all(|h| h.session_id == slack));
    // What a filter matches on is not text: the platform, the role and the ids are not hits.
    // Filter tokens start with U+E000, which typed text cannot carry in.
    let typed = ["slack", "telegram", "user", "assistant", "bob", "alice", slack.as_str()];
    let marked = ["\u{E000}slack", "\u{E000}telegram", "\u{E000}u626F62", "\u{E000}u626F62*"];
    for text in typed.into_iter().chain(marked) {
        assert!(search(&store, text).await.is_empty(), "{text:?} matched a filter column");
    }
    // An id that only starts like another one is another id.
    let mut prefix = SearchQuery::new("router");
    prefix.user_id = Some("bo".into());
    assert!(store.search(&prefix).await.unwrap().is_empty());
    // Undoing messages and deleting a session take them out of the index, exactly.
    store.index_pending().await.unwrap();
    let alice = search(&store, "deploy").await[0].session_id.clone();
    assert!(store.undo_last_exchange(&alice).await.unwrap() > 0);
    assert!(store.health().await.unwrap().search_index_ok);
    store.delete_session(&slack).await.unwrap();
    assert!(store.search(&in_session).await.unwrap().is_empty());
    assert_eq!(search(&store, "router").await.len(), 1);
    let health = store.health().await.unwrap();
    assert!(health.search_index_ok, "{health:?}");
}
}

both! {
async fn prefixes_find_every_word_they_start(store, scratch) {
    corpus(&store).await;
    let s = store.create_session(&session_for(Platform::Cli, "erin")).await.unwrap();
    store
        .append_messages(
            &s.id,
            vec![
                NewMessage::user("Deployed twice, then the DEPLOYER crashed"),
                NewMessage::user("a déploiement in French, a deployable in English"),
                NewMessage::user("configs and conference calls"),
            ],
        )
        .await
        .unwrap();
    // (query, hits): spelled out as words (ASCII, three letters or more) or left to FTS5
    // (short, accented, inside a phrase), the same messages are found.
    let table: &[(&str, usize)] = &[
        ("deploy*", 4),
        ("DEPLOY*", 4),
        ("deploye*", 1),
        ("déploi*", 1),
        ("dep*", 4),
        ("de*", 4),
        ("deploy* NOT crashed", 3),
        ("deploy* AND conf*", 0),
        ("conf* OR router", 4),
        ("zzqx*", 0),
        ("router NOT zzqx*", 3),
        ("\"deploy script\"*", 1),
        ("\"the deploy\"*", 2),
    ];
    let mut wrong = Vec::new();
    for (input, expected) in table {
        let hits = search(&store, input).await;
        if hits.len() != *expected {
            wrong.push(format!("{input:?}: {} hits, expected {expected}", hits.len()));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    // Every word a prefix stood for is marked in the snippet.
    let hits = search(&store, "deploy*").await;
    let marked = hits.iter().find(|h| h.snippet.contains("**Deployed**")).expect("Deployed");
    assert!(marked.snippet.contains("**DEPLOYER**"), "{:?}", marked.snippet);
}
}

both! {
async fn arbitrary_text_never_errors(store, scratch) {
    corpus(&store).await;
    // One store for every case: searching changes nothing a later case could trip on.
    let config = ProptestConfig { cases: 256, ..ProptestConfig::default() };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let inputs = (any::<String>(), "[ a-zA-Z0-9\"():*^.-]{0,40}");
    let runtime = tokio::runtime::Handle::current();
    tokio::task::block_in_place(|| {
        runner.run(&inputs, |(text, typed)| {
            for input in [&text, &typed] {
                let result = runtime.block_on(store.search(&SearchQuery::new(input.as_str())));
                prop_assert!(result.is_ok(), "{:?}: {:?}", input, result);
            }
            Ok(())
        })
    })
    .unwrap();
}
}

both! {
async fn deferred_indexing_catches_up_and_stays_consistent(store, scratch) {
    corpus(&store).await;
    let s = store.create_session(&session_for(Platform::Cli, "carol")).await.unwrap();
    let ids = store
        .append_messages(&s.id, vec![NewMessage::user("zebra crossing 斑马线测试")])
        .await
        .unwrap();
    // The background indexer catches up once writes go quiet.
    for _ in 0..250 {
        if store.unindexed().await.unwrap() == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(store.unindexed().await.unwrap(), 0);
    assert_eq!(search(&store, "zebra").await[0].message_id, ids[0]);
    // Deleting indexed and unindexed messages keeps both indexes consistent.
    let other = store.create_session(&session_for(Platform::Cli, "dave")).await.unwrap();
    store
        .append_messages(&other.id, vec![NewMessage::user("unindexed 斑马线测试 zebra")])
        .await
        .unwrap();
    store.delete_session(&s.id).await.unwrap();
    store.delete_session(&other.id).await.unwrap();
    let health = store.health().await.unwrap();
    assert!(health.search_index_ok, "{health:?}");
    assert!(search(&store, "zebra").await.is_empty());
    assert!(search(&store, "斑马线").await.is_empty());
    store
        .append_messages(
            &store.create_session(&session_for(Platform::Cli, "e")).await.unwrap().id,
            vec![NewMessage::user("late write")],
        )
        .await
        .unwrap();
    store.close().await;
    let reopened = reopen(&scratch).await;
    assert_eq!(reopened.unindexed().await.unwrap(), 0, "close indexes what is pending");
    assert!(reopened.health().await.unwrap().search_index_ok);
}
}
