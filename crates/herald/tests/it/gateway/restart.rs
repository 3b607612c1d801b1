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

/// Waits until the store holds a message queued behind a running turn.
async fn queued_behind(d: &Daemon) {
    let store = d.store().await;
    let started = std::time::Instant::now();
    while store.queued_inbound().await.unwrap().is_empty() {
        assert!(started.elapsed() < Duration::from_secs(20), "never queued: {}", d.logs());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    store.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_turn_cut_short_is_answered_on_its_own_before_the_message_queued_behind_it() {
    let mut d = Daemon::start("").await;
    d.model.set_latency(Duration::from_secs(30));
    d.telegram.dm(1001, "first, cut short");
    while d.model.request_count() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    d.telegram.dm(1001, "second, queued");
    queued_behind(&d).await;
    d.signal("KILL");
    d.stop().await;

    d.model.set_latency(Duration::ZERO);
    d.spawn().await;
    let sent = d.replies(1001, 2).await;
    settle().await;
    let texts: Vec<String> = d.telegram.sent_to(1001).into_iter().map(|m| m.text).collect();
    assert_eq!(texts, ["echo: first, cut short", "echo: second, queued"], "{}", d.logs());
    assert_eq!(sent.len(), 2);
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_long_reply_cut_short_by_a_crash_goes_on_from_the_piece_not_taken() {
    use herald_fakes::Reply;
    use herald_fakes::telegram::TelegramFault;
    let mut d = Daemon::start("").await;
    // Two pieces on Telegram (4096 UTF-16 units each): Cyrillic, then Chinese and emoji.
    let long = format!("{} {}", "Привет, мир. ".repeat(330), "你好🙂 ".repeat(200));
    d.model.push_reply(Reply::text(long.clone()));
    // The first piece goes through; every try of the second fails, until the crash.
    d.telegram.push_fault("sendMessage", TelegramFault::Pass);
    for _ in 0..100 {
        d.telegram.push_fault("sendMessage", TelegramFault::Status(502));
    }
    d.telegram.dm(1001, "a long answer, please");
    let store = d.store().await;
    let started = std::time::Instant::now();
    while !store.undelivered().await.unwrap().iter().any(|r| r.pieces == 1) {
        assert!(started.elapsed() < Duration::from_secs(20), "never part way: {}", d.logs());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    store.close().await;
    d.signal("KILL");
    d.stop().await;
    assert_eq!(d.telegram.sent_to(1001).len(), 1, "the first piece, before the crash");
    d.telegram.clear_faults();

    d.spawn().await;
    let sent = d.replies(1001, 2).await;
    settle().await;
    let sent_now: Vec<String> =
        d.telegram.sent_to(1001).iter().map(|m| m.text.chars().take(20).collect()).collect();
    assert_eq!(sent_now.len(), 2, "each piece once: {sent_now:?}\n{}", d.logs());
    assert!(sent[0].text.starts_with("Привет"), "{}", sent[0].text);
    assert!(sent[1].text.contains("你好🙂"), "{}", sent[1].text);
    assert!(d.store().await.undelivered().await.unwrap().is_empty());
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}
