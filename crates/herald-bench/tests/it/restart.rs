//! What one process wrote, the next one reads back identically.

use std::collections::{HashMap, HashSet};

use herald_core::Platform;
use herald_store::SessionFilter;
use serde_json::Value;

use crate::{Worker, assert_acks_stored, open};

#[tokio::test(flavor = "multi_thread")]
async fn a_new_process_reads_back_exactly_what_was_written() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("restart.db");
    let mut worker = Worker::start(&format!("sqlite://{}", db.display()), 3, 4);
    let mut sessions = Vec::new();
    let mut acks = Vec::new();
    let mut done = None;
    while let Some(event) = worker.next_event() {
        match event["event"].as_str() {
            Some("session") => sessions.push(event),
            Some("ack") => acks.push(event),
            Some("done") => done = Some(event),
            _ => panic!("unexpected event {event}"),
        }
    }
    assert!(worker.child.wait().expect("worker exits").success());
    let done = done.expect("a done report");
    assert_eq!(done["errors"], 0, "{done}");
    assert_eq!((sessions.len(), acks.len()), (3, 12));

    let store = open(&db).await;
    let stored = store.list_sessions(&SessionFilter::default()).await.expect("list");
    let ids: HashSet<&str> = stored.iter().map(|s| s.id.as_str()).collect();
    let written: HashSet<&str> = sessions.iter().map(|s| s["id"].as_str().expect("id")).collect();
    assert_eq!(ids, written);
    for event in &sessions {
        let id = event["id"].as_str().expect("id");
        let session = store.session(id).await.expect("lookup").expect("session exists");
        assert_eq!(session.source, Platform::Telegram);
        assert_eq!(Some(event["chat_id"].as_str().expect("chat")), session.chat_id.as_deref());
        assert_eq!(Some(event["user_id"].as_str().expect("user")), session.user_id.as_deref());
        let prompt = store.system_prompt(id).await.expect("prompt").expect("a stored prompt");
        assert_eq!(Value::from(prompt), event["system_prompt"]);
    }

    let histories = assert_acks_stored(&store, &acks).await;
    // Same order and nothing else: each history is its acknowledged turns, in turn order.
    let mut expected: HashMap<&str, Vec<i64>> = HashMap::new();
    for ack in &acks {
        let session = expected.entry(ack["session"].as_str().expect("session")).or_default();
        session
            .extend(ack["ids"].as_array().expect("ids").iter().map(|id| id.as_i64().expect("id")));
    }
    for (session, history) in &histories {
        let ids: Vec<i64> = history.iter().map(|m| m.id).collect();
        assert_eq!(ids, expected[session.as_str()], "session {session}");
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
    }
}
