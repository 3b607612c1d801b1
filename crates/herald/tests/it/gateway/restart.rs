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
