//! Replies on their way out: tried again while the daemon runs, in order per chat across
//! restarts, and sent twice by a crash only within the documented window.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use herald_core::{ChatRef, Platform};
use herald_fakes::telegram::TelegramFault;
use herald_store::{Delivery, NewMessage, NewSession, TokenUsage};

use super::{Daemon, settle};

fn texts(d: &Daemon, chat: i64) -> Vec<String> {
    d.telegram.sent_to(chat).into_iter().map(|m| m.text).collect()
}

/// Sends `text` to chat 1001 and takes Telegram offline while the (slowed) model answers it.
async fn offline_while_answering(d: &Daemon, text: &str) {
    d.model.set_latency(Duration::from_millis(300));
    d.telegram.dm(1001, text);
    while d.model.request_count() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    d.telegram.set_offline(true);
}

/// Waits until the store's outbox holds a reply saying `text`.
async fn stored_undelivered(d: &Daemon, text: &str) {
    let store = d.store().await;
    let started = Instant::now();
    while !store.undelivered().await.unwrap().iter().any(|r| r.delivery.text == text) {
        assert!(started.elapsed() < Duration::from_secs(20), "never stored: {}", d.logs());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    store.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reply_that_missed_its_send_is_delivered_while_running_and_in_order() {
    let mut d = Daemon::start("").await;
    // Telegram goes away past the adapter's own retries: the reply stays in the outbox.
    offline_while_answering(&d, "one").await;
    d.wait_log("could not be delivered yet", 1).await;
    d.model.set_latency(Duration::ZERO);
    d.telegram.set_offline(false);
    d.telegram.dm(1001, "two");
    let sent = d.replies(1001, 2).await;
    assert_eq!(texts(&d, 1001), ["echo: one", "echo: two"], "in the order they were written");
    assert!(sent.iter().all(|m| m.text.starts_with("echo: ")));
    settle().await;
    assert_eq!(d.telegram.sent_to(1001).len(), 2, "each once: {}", d.logs());
    let store = d.store().await;
    assert!(store.undelivered().await.unwrap().is_empty(), "the outbox is empty");
    store.close().await;
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}

#[tokio::test(flavor = "multi_thread")]
async fn replies_stored_before_a_restart_go_before_the_new_ones() {
    let mut d = Daemon::start("").await;
    offline_while_answering(&d, "before the crash").await;
    stored_undelivered(&d, "echo: before the crash").await;
    d.signal("KILL");
    d.stop().await;

    // Back up, a new message waiting, and the stored reply's first try refused for a second:
    // the new answer must still come after it.
    d.model.set_latency(Duration::ZERO);
    d.telegram.set_offline(false);
    d.telegram.push_fault("sendMessage", TelegramFault::TooManyRequests { retry_after: 1 });
    d.telegram.dm(1001, "after the restart");
    d.spawn().await;
    d.replies(1001, 2).await;
    settle().await;
    assert_eq!(texts(&d, 1001), ["echo: before the crash", "echo: after the restart"]);
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}

/// Replies sent again at start-up that may be in flight at once (the gateway's figure).
const RESENDS_IN_FLIGHT: usize = 3;

#[tokio::test(flavor = "multi_thread")]
async fn kills_during_recovery_send_at_most_the_few_in_flight_twice() {
    let mut d = Daemon::start("").await;
    assert_eq!(d.stop().await, 0, "{}", d.logs());
    // 50 replies stored and never delivered, one per chat, as a crash during an outage leaves.
    let store = d.store().await;
    let chats: Vec<i64> = (0..50).map(|n| 5000 + n).collect();
    for chat in &chats {
        let key = format!("telegram:dm:{chat}");
        let new = NewSession {
            session_key: Some(key.clone()),
            chat_id: Some(chat.to_string()),
            user_id: Some(chat.to_string()),
            chat_type: Some("dm".into()),
            ..NewSession::new(Platform::Telegram, "You are herald.")
        };
        let (session, _) = store.route_or_create(&key, &new).await.unwrap();
        let text = format!("stored reply for {chat}");
        let delivery = Delivery {
            chat: ChatRef::direct(Platform::Telegram, chat.to_string()),
            reply_to: None,
            text: text.clone(),
        };
        let turn = vec![NewMessage::user("question"), NewMessage::assistant(text)];
        store.append_reply(&session.id, turn, TokenUsage::default(), delivery).await.unwrap();
    }
    assert_eq!(store.undelivered().await.unwrap().len(), 50);
    store.close().await;

    // Killed twice while it sends them, then left to finish.
    for kill_at in [10, 30] {
        d.spawn().await;
        let started = Instant::now();
        while d.telegram.sent().len() < kill_at {
            assert!(started.elapsed() < Duration::from_secs(20), "stalled: {}", d.logs());
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        d.signal("KILL");
        d.stop().await;
    }
    d.spawn().await;
    let started = Instant::now();
    let mut times: HashMap<String, usize> = HashMap::new();
    loop {
        times.clear();
        for message in d.telegram.sent() {
            *times.entry(message.text).or_default() += 1;
        }
        if times.len() == 50 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{times:?}\n{}", d.logs());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    settle().await;
    let sent = d.telegram.sent().len();
    let twice = sent - 50;
    eprintln!("two kills during the recovery of 50 stored replies: {twice} sent twice");
    assert!(
        twice <= 2 * RESENDS_IN_FLIGHT,
        "{twice} duplicates: more than the {RESENDS_IN_FLIGHT} in flight at each kill"
    );
    for chat in &chats {
        assert!(texts(&d, *chat).iter().all(|t| *t == format!("stored reply for {chat}")));
    }
    let store = d.store().await;
    assert!(store.undelivered().await.unwrap().is_empty(), "the outbox is empty");
    store.close().await;
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}

/// Sends the Telegram adapter runs at once: the most a kill under load can leave in flight.
const SENDS_IN_FLIGHT: usize = 32;

#[tokio::test(flavor = "multi_thread")]
async fn a_kill_in_a_burst_loses_nothing_and_resends_only_what_was_in_flight() {
    let mut d = Daemon::start("").await;
    assert_eq!(d.stop().await, 0, "{}", d.logs());
    let config = std::fs::read_to_string(&d.world.config).unwrap();
    let start = config.find("allowed_users = [").unwrap();
    let end = start + config[start..].find(']').unwrap() + 1;
    let config = format!("{}allowed_users = [\"*\"]{}", &config[..start], &config[end..]);
    std::fs::write(&d.world.config, config).unwrap();
    d.model.set_latency(Duration::from_millis(20));
    d.spawn().await;

    let chats: Vec<i64> = (0..50).map(|n| 6000 + n).collect();
    for chat in &chats {
        d.telegram.dm(*chat, &format!("burst {chat}"));
    }
    let started = Instant::now();
    while d.telegram.sent().len() < 15 {
        assert!(started.elapsed() < Duration::from_secs(20), "stalled: {}", d.logs());
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    d.signal("KILL");
    d.stop().await;
    d.spawn().await;
    let started = Instant::now();
    while !chats.iter().all(|chat| !d.telegram.sent_to(*chat).is_empty()) {
        assert!(started.elapsed() < Duration::from_secs(30), "not all answered: {}", d.logs());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    settle().await;
    for chat in &chats {
        let got = texts(&d, *chat);
        assert!(got.iter().all(|t| *t == format!("echo: burst {chat}")), "{chat}: {got:?}");
    }
    let twice = d.telegram.sent().len() - chats.len();
    eprintln!("a kill in a burst to 50 chats: {twice} replies sent twice");
    assert!(twice <= SENDS_IN_FLIGHT, "{twice} duplicates");
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}
