//! Long conversations: compressed into a child session that keeps the chat, the route and the
//! stored prompt; the model's refusal of a long request; a summary that fails; a kill in the
//! middle of compressing.

use std::time::{Duration, Instant};

use herald_core::Role;
use herald_fakes::{Fault, Reply};
use herald_store::{Session, SessionFilter, Store};

use super::{Daemon, settle};

const KEY: &str = "telegram:dm:1001";

/// The texts of the messages the model was sent in its last request.
fn last_request(d: &Daemon) -> Vec<String> {
    let request = d.model.requests().pop().expect("a model request");
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .collect()
}

async fn sessions(store: &Store) -> Vec<Session> {
    let mut all =
        store.list_sessions(&SessionFilter { limit: None, ..Default::default() }).await.unwrap();
    all.sort_by(|a, b| a.started_at.cmp(&b.started_at).then(a.id.cmp(&b.id)));
    all
}

/// Sends `text` to chat 1001 and waits for its answer, the `n`th message sent there.
async fn say(d: &Daemon, text: &str, n: usize) -> String {
    d.telegram.dm(1001, text);
    d.replies(1001, n).await[n - 1].text.clone()
}

/// A session whose tool results always follow the call that asked for them.
fn assert_calls_stay_with_results(history: &[herald_store::StoredMessage]) {
    for (i, message) in history.iter().enumerate() {
        if message.role == Role::Tool {
            let call = history[..i].iter().rev().find(|m| m.role != Role::Tool);
            assert!(
                call.is_some_and(|m| m.role == Role::Assistant && m.tool_calls.is_some()),
                "a tool result without its call: {history:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_conversation_past_the_threshold_continues_in_a_child_that_keeps_everything() {
    let mut d = Daemon::start("").await;
    d.reconfigure(&[
        ("model", "context_window", "4000"),
        ("compression", "keep_recent_tokens", "60"),
    ])
    .await;
    assert_eq!(
        say(&d, "please keep /srv/app/config.toml and ticket 4711 in mind", 1).await,
        "echo: please keep /srv/app/config.toml and ticket 4711 in mind"
    );
    say(&d, "search for config", 2).await;
    // The model reports a prompt near the window: the next turn compresses first.
    d.model.push_usage(3300, 20);
    say(&d, "third message", 3).await;
    d.model.push_reply(Reply::text("The user keeps /srv/app/config.toml and ticket 4711 in mind."));
    assert_eq!(
        say(&d, "what did I ask you to remember?", 4).await,
        "echo: what did I ask you to remember?"
    );

    let sent = last_request(&d);
    assert!(
        sent.iter().any(|t| t.contains("ticket 4711 in mind.") && t.contains("session_search")),
        "{sent:?}"
    );
    assert!(
        !sent.iter().any(|t| t.starts_with("please keep")),
        "the old messages stay behind: {sent:?}"
    );
    assert_eq!(sent.last().map(String::as_str), Some("what did I ask you to remember?"));

    let store = d.store().await;
    let all = sessions(&store).await;
    assert_eq!(all.len(), 2, "{all:?}");
    let (parent, child) = (&all[0], &all[1]);
    assert_eq!(parent.end_reason.as_deref(), Some("compressed"));
    assert!(child.ended_at.is_none());
    assert_eq!(child.parent_session_id.as_deref(), Some(parent.id.as_str()));
    for (a, b) in [
        (&child.session_key, &parent.session_key),
        (&child.chat_id, &parent.chat_id),
        (&child.user_id, &parent.user_id),
        (&child.chat_type, &parent.chat_type),
        (&child.model, &parent.model),
        (&child.system_prompt_hash, &parent.system_prompt_hash),
    ] {
        assert_eq!(a, b, "the child keeps the chat's metadata");
    }
    assert_eq!(
        store.system_prompt(&child.id).await.unwrap(),
        store.system_prompt(&parent.id).await.unwrap(),
        "the same prompt bytes"
    );
    assert_eq!(store.routed_session(KEY).await.unwrap().unwrap().id, child.id, "the route moved");
    assert_calls_stay_with_results(&store.history(&child.id).await.unwrap());
    let parent_history = store.history(&parent.id).await.unwrap();
    assert!(parent_history.iter().any(|m| m.content.starts_with("please keep")), "nothing deleted");
    store.close().await;

    // The next message goes to the child.
    say(&d, "and now?", 5).await;
    let store = d.store().await;
    let child_history = store.history(&child.id).await.unwrap();
    assert!(child_history.iter().any(|m| m.content == "and now?"));
    assert_eq!(sessions(&store).await.len(), 2);
    store.close().await;
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refusal_as_too_long_compresses_and_the_turn_is_tried_once_more() {
    let mut d = Daemon::start("").await;
    d.reconfigure(&[("compression", "keep_recent_tokens", "1100")]).await;
    for n in 1..=3 {
        say(&d, &format!("{n} {}", "word ".repeat(400)), n).await;
    }
    // The model's window is smaller than the conversation now, larger than its summary call.
    d.model.set_context_window(Some(2500));
    d.model.push_reply(Reply::text("Three long messages of words."));
    assert_eq!(say(&d, "short one", 4).await, "echo: short one", "{}", d.logs());
    let store = d.store().await;
    let all = sessions(&store).await;
    assert_eq!(all.len(), 2, "compressed once: {all:?}");
    assert_eq!(all[0].end_reason.as_deref(), Some("compressed"));
    store.close().await;
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_or_useless_summary_costs_no_answer_and_a_later_turn_compresses() {
    let mut d = Daemon::start("").await;
    d.reconfigure(&[
        ("model", "context_window", "2000"),
        ("compression", "keep_recent_tokens", "60"),
        ("compression", "summary_timeout_s", "1"),
    ])
    .await;
    // One long message (its echo still one Telegram message) fills the window: every turn
    // after it wants to compress.
    let long = format!("remember this: {}", "lorem ipsum ".repeat(300));
    say(&d, &long, 1).await;
    // The summary call is refused: the answer comes all the same.
    d.model.push_fault(Fault::status(400));
    assert_eq!(say(&d, "2", 2).await, "echo: 2", "{}", d.logs());
    // The next turn sits out; the one after tries again, and the summary is too slow.
    assert_eq!(say(&d, "3", 3).await, "echo: 3");
    d.model.push_fault(Fault::Delay(Duration::from_secs(3)));
    assert_eq!(say(&d, "4", 4).await, "echo: 4");
    // Two turns out; then a summary longer than what it summarizes is not used.
    say(&d, "5", 5).await;
    say(&d, "6", 6).await;
    d.model.push_reply(Reply::text("x".repeat(40_000)));
    assert_eq!(say(&d, "7", 7).await, "echo: 7");
    let store = d.store().await;
    assert_eq!(sessions(&store).await.len(), 1, "nothing compressed yet: {}", d.logs());
    store.close().await;
    // Four turns out; then it works.
    for n in 8..=11 {
        say(&d, &n.to_string(), n).await;
    }
    d.model.push_reply(Reply::text("Asked to remember some lorem ipsum."));
    assert_eq!(say(&d, "12", 12).await, "echo: 12");
    let store = d.store().await;
    let all = sessions(&store).await;
    assert_eq!(all.len(), 2, "{all:?}\n{}", d.logs());
    let parent = store.history(&all[0].id).await.unwrap();
    let said = parent.iter().filter(|m| m.role == Role::User).count();
    assert_eq!(said, 12, "every message kept in the parent");
    store.close().await;
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kill_while_compressing_leaves_one_current_session_and_nothing_lost() {
    let mut d = Daemon::start("").await;
    d.reconfigure(&[
        ("model", "context_window", "4000"),
        ("compression", "keep_recent_tokens", "60"),
    ])
    .await;
    say(&d, "one", 1).await;
    d.model.push_usage(3300, 20);
    say(&d, "two", 2).await;
    // The summary is slow; the gateway is killed while it waits for it.
    d.model.push_fault(Fault::Delay(Duration::from_secs(5)));
    let before = d.model.request_count();
    d.telegram.dm(1001, "three");
    let started = Instant::now();
    while d.model.request_count() == before {
        assert!(started.elapsed() < Duration::from_secs(20), "{}", d.logs());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    d.signal("KILL");
    d.stop().await;

    d.model.reset();
    d.spawn().await;
    let sent = d.replies(1001, 3).await;
    assert_eq!(sent[2].text, "echo: three", "the message is answered after the restart");
    settle().await;
    let store = d.store().await;
    let all = sessions(&store).await;
    let current: Vec<&Session> = all.iter().filter(|s| s.ended_at.is_none()).collect();
    assert_eq!(current.len(), 1, "exactly one current session: {all:?}");
    assert_eq!(store.routed_session(KEY).await.unwrap().unwrap().id, current[0].id);
    let mut said = Vec::new();
    for session in &all {
        for m in store.history(&session.id).await.unwrap() {
            if m.role == Role::User && !m.content.starts_with('[') {
                said.push(m.content);
            }
        }
    }
    said.sort();
    said.dedup();
    assert_eq!(said, ["one", "three", "two"], "every message present");
    store.close().await;
    say(&d, "four", 4).await;
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}

#[tokio::test(flavor = "multi_thread")]
async fn compress_on_request_and_status_shows_the_chain() {
    let mut d = Daemon::start("").await;
    d.reconfigure(&[("compression", "keep_recent_tokens", "10")]).await;
    say(&d, "tell me about the harbour at Hội An", 1).await;
    say(&d, "and the old town", 2).await;
    d.model.push_reply(Reply::text("Asked about Hội An: the harbour, the old town."));
    let answer = say(&d, "/compress", 3).await;
    assert!(answer.starts_with("Compressed:"), "{answer}");
    let status = say(&d, "/status", 4).await;
    assert!(status.contains("continues 1 earlier"), "{status}");
    let store = d.store().await;
    let all = sessions(&store).await;
    assert_eq!(all.len(), 2);
    let found = store.search(&herald_store::SearchQuery::new("harbour")).await.unwrap();
    let from: Vec<&str> = found.iter().map(|h| h.session_id.as_str()).collect();
    assert!(from.contains(&all[0].id.as_str()), "the parent's text is still found: {from:?}");
    store.close().await;
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_turn_stopped_after_compressing_leaves_the_conversation_in_the_child() {
    let mut d = Daemon::start("busy_input = \"interrupt\"").await;
    d.reconfigure(&[
        ("model", "context_window", "4000"),
        ("compression", "keep_recent_tokens", "10"),
    ])
    .await;
    say(&d, "one", 1).await;
    d.model.push_usage(3300, 20);
    say(&d, "two", 2).await;
    d.model.push_reply(Reply::text("Said one and two."));
    d.model.set_latency(Duration::from_millis(800));
    let before = d.model.request_count();
    d.telegram.dm(1001, "three");
    // The summary, then the answer: the conversation is compressed and the answer runs.
    let started = Instant::now();
    while d.model.request_count() < before + 2 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{} of {before}: {:?}\n{}",
            d.model.request_count(),
            d.telegram.sent_to(1001),
            d.logs()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    d.model.set_latency(Duration::ZERO);
    // A new message stops that answer (interrupt mode) and is answered instead.
    d.telegram.dm(1001, "four");
    let started = Instant::now();
    while !d.telegram.sent_to(1001).iter().any(|m| m.text == "echo: four") {
        assert!(started.elapsed() < Duration::from_secs(20), "{}", d.logs());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let store = d.store().await;
    let all = sessions(&store).await;
    assert_eq!(all.len(), 2, "{all:?}");
    let parent = store.history(&all[0].id).await.unwrap();
    assert!(!parent.iter().any(|m| m.content == "four"), "nothing written to the ended session");
    let child = store.history(&all[1].id).await.unwrap();
    assert!(child.iter().any(|m| m.content == "four"), "{child:?}");
    store.close().await;
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}
