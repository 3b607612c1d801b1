//! Restarts and redelivery: nothing answered twice, nothing left unanswered.

use std::time::Duration;

use super::{Daemon, settle};

#[tokio::test(flavor = "multi_thread")]
async fn a_restart_continues_without_replaying_or_skipping() {
    let mut d = Daemon::start("").await;
    d.telegram.dm(1001, "before");
    d.replies(1001, 1).await;
    assert_eq!(d.stop().await, 0, "{}", d.logs());

    d.telegram.dm(1001, "while down");
    d.spawn().await;
    let sent = d.replies(1001, 2).await;
    assert_eq!(sent[1].text, "echo: while down");
    settle().await;
    assert_eq!(d.telegram.sent_to(1001).len(), 2, "nothing answered twice");
    let last = d.model.requests().pop().unwrap();
    let said: Vec<&str> =
        last["messages"].as_array().unwrap().iter().filter_map(|m| m["content"].as_str()).collect();
    assert!(said.contains(&"before"), "the conversation continues: {said:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_redelivered_update_is_answered_once() {
    let d = Daemon::start("").await;
    let update = d.telegram.dm(1001, "only once");
    d.replies(1001, 1).await;
    d.telegram.redeliver(update);
    d.telegram.dm(1001, "next");
    let sent = d.replies(1001, 2).await;
    settle().await;
    assert_eq!(sent[1].text, "echo: next");
    assert_eq!(d.telegram.sent_to(1001).len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_lets_the_running_turn_finish() {
    let mut d = Daemon::start("").await;
    d.model.set_latency(Duration::from_millis(1500));
    d.telegram.dm(1001, "slow one");
    while d.model.request_count() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(d.stop().await, 0, "{}", d.logs());
    let sent = d.telegram.sent_to(1001);
    assert_eq!(sent.len(), 1, "the reply was delivered during the drain: {}", d.logs());
    assert_eq!(sent[0].text, "echo: slow one");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reply_stored_but_not_sent_before_a_crash_is_sent_after_the_restart() {
    let mut d = Daemon::start("").await;
    d.model.set_latency(Duration::from_millis(300));
    d.telegram.dm(1001, "keep me");
    while d.model.request_count() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The platform goes away while the model answers: the reply is stored, not delivered.
    d.telegram.set_offline(true);
    let store = d.store().await;
    let started = std::time::Instant::now();
    loop {
        let stored = store.undelivered().await.unwrap();
        if stored.iter().any(|r| r.delivery.text == "echo: keep me") {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "never stored: {}", d.logs());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    store.close().await;
    d.signal("KILL");
    d.stop().await;
    assert!(d.telegram.sent_to(1001).is_empty());

    d.telegram.set_offline(false);
    d.spawn().await;
    let sent = d.replies(1001, 1).await;
    assert_eq!(sent[0].text, "echo: keep me");
    settle().await;
    assert_eq!(d.telegram.sent_to(1001).len(), 1, "sent once: {}", d.logs());
    let store = d.store().await;
    assert!(store.undelivered().await.unwrap().is_empty());
    let messages = store.search(&herald_store::SearchQuery::new("keep")).await.unwrap();
    assert_eq!(messages.len(), 2, "the question and the answer, each stored once");
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}
