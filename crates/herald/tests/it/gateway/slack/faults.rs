//! Slack misbehaving under the daemon: rate limits, connections going away, refused or gone
//! silent, the whole service down for a while, and tokens refused while another platform goes
//! on.

use std::time::{Duration, Instant};

use herald_fakes::slack::{
    DisconnectReason, FakeSlack, MAX_CONNECTIONS, Post, ReadLimit, SlackFault, SocketEvent,
};
use serde_json::Value;

use super::super::health::{free_port, get};
use super::super::settle;
use super::{CHANNEL, PATIENCE, SlackDaemon, texts, user};

/// Polls `/healthz` at `base` until Slack's state there is `state`.
async fn slack_health(d: &SlackDaemon, base: &str, state: &str) -> Value {
    let started = Instant::now();
    loop {
        let (_, _, body) = get(&format!("{base}/healthz")).await;
        let body: Value = serde_json::from_str(&body).unwrap();
        if body["platforms"]["slack"]["state"] == state {
            return body;
        }
        assert!(started.elapsed() < PATIENCE, "/healthz never said {state}: {body}\n{}", d.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn slack_refused_connections_back_off_and_healthz_says_retrying() {
    // Other replicas hold every connection Slack allows the app.
    let slack = FakeSlack::start().await;
    slack.hold_connections(MAX_CONNECTIONS);
    let port = free_port();
    let health = format!("health_listen = \"127.0.0.1:{port}\"\n");
    let mut d = SlackDaemon::launch(slack, &health, "socket_connections = 2\n").await;
    let base = format!("http://127.0.0.1:{port}");
    let refused = |fake: &FakeSlack| {
        fake.socket_events().iter().filter(|e| matches!(e, SocketEvent::Refused { .. })).count()
    };
    assert!(d.slack.wait_for(PATIENCE, |fake| refused(fake) >= 2).await, "{}", d.logs());
    let body = slack_health(&d, &base, "retrying").await;
    assert!(body["platforms"]["slack"]["error"].as_str().unwrap().contains("too_many_websockets"));

    // A while of refusals: each try waits longer than the last, so few are made.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let opens = d.slack.calls_of("apps.connections.open").len();
    assert!(opens <= 16, "{opens} apps.connections.open calls in 5 s of refusals\n{}", d.logs());
    slack_health(&d, &base, "retrying").await;

    // Two places free up: both are taken, and never more.
    d.slack.hold_connections(MAX_CONNECTIONS - 2);
    let both = |fake: &FakeSlack| fake.open_connections() == 2;
    assert!(d.slack.wait_for(Duration::from_secs(30), both).await, "{}", d.logs());
    slack_health(&d, &base, "connected").await;
    let dm = FakeSlack::dm_channel(&user(1));
    d.slack.dm(&user(1), "room again");
    assert_eq!(texts(&d.replies(&dm, 1).await), ["echo: room again"]);
    assert_eq!(d.slack.peak_connections(), 2, "{:#?}", d.slack.socket_events());
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}

#[tokio::test(flavor = "multi_thread")]
async fn slack_a_silent_socket_is_closed_before_its_replacement_opens() {
    let mut d = SlackDaemon::start_with("socket_connections = 1\n", &[], false).await;
    let before = d.slack.socket_events().len();
    d.slack.silence();
    let replaced = |fake: &FakeSlack| {
        fake.socket_events()[before..].iter().any(|e| matches!(e, SocketEvent::Opened { .. }))
    };
    assert!(d.slack.wait_for(Duration::from_secs(60), replaced).await, "{}", d.logs());
    let events = d.slack.socket_events();
    let Some(SocketEvent::Opened { connection: silent }) = events[..before].last().cloned() else {
        panic!("the silenced connection was the last opened: {events:#?}");
    };
    let after = &events[before..];
    let closed = after.iter().position(|e| *e == SocketEvent::Closed { connection: silent });
    let opened = after.iter().position(|e| matches!(e, SocketEvent::Opened { .. }));
    assert!(closed.is_some() && closed < opened, "closed after the replacement: {events:#?}");
    assert_eq!(d.slack.peak_connections(), 1, "{events:#?}");
    let dm = FakeSlack::dm_channel(&user(1));
    d.slack.dm(&user(1), "still listening?");
    assert_eq!(texts(&d.replies(&dm, 1).await), ["echo: still listening?"]);
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}

#[tokio::test(flavor = "multi_thread")]
async fn slack_a_rate_limited_answer_is_posted_once_after_the_wait() {
    let mut d = SlackDaemon::start().await;
    d.slack.push_fault("chat.postMessage", SlackFault::RateLimited { retry_after: 1 });
    let dm = FakeSlack::dm_channel(&user(1));
    d.slack.dm(&user(1), "patience");
    assert_eq!(texts(&d.replies(&dm, 1).await), ["echo: patience"]);
    settle().await;
    assert_eq!(d.slack.posted().len(), 1);
    let calls = d.slack.calls_of("chat.postMessage");
    let refused: Vec<_> = calls.iter().filter(|c| c.status == 429).collect();
    assert_eq!((calls.len(), refused.len()), (2, 1), "{calls:#?}");
    // Slack refuses a 429 before it acts: nothing to look for.
    assert!(d.slack.calls_of("conversations.history").is_empty(), "{:#?}", d.slack.calls());
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}

#[tokio::test(flavor = "multi_thread")]
async fn slack_an_answer_stored_before_a_5xx_is_seen_once() {
    let mut d = SlackDaemon::start().await;
    let dm = FakeSlack::dm_channel(&user(1));
    let mut expected = Vec::new();
    for n in 0..5 {
        // Slack stores the post, then its answer is lost in a 5xx.
        d.slack.push_fault("chat.postMessage", SlackFault::StatusAfter { status: 500 });
        d.slack.dm(&user(1), &format!("try {n}"));
        expected.push(format!("echo: try {n}"));
        let posted = d.replies(&dm, n + 1).await;
        assert_eq!(texts(&posted), expected, "{posted:#?}");
    }
    // In a thread, the thread's replies are where the answer is looked for.
    d.slack.push_fault("chat.postMessage", SlackFault::StatusAfter { status: 503 });
    let post = d.slack.inject(Post::channel(CHANNEL, &user(2), "in a thread").mentioning_bot());
    let posted = d.replies(CHANNEL, 1).await;
    assert_eq!(posted[0].thread_ts.as_deref(), Some(post.ts.as_str()));
    settle().await;
    assert_eq!(texts(&d.slack.posted_in(&dm)), expected, "each answer once");
    assert_eq!(texts(&d.slack.posted_in(CHANNEL)), ["echo: in a thread"], "once in the thread");
    let looks = d.slack.calls_of("conversations.history");
    assert_eq!(looks.len(), 5, "one look after each 5xx: {looks:#?}");
    assert!(looks.iter().all(|c| c.error.is_none() && c.args["include_all_metadata"] == "true"));
    let threads = d.slack.calls_of("conversations.replies");
    assert_eq!(threads.len(), 1, "{threads:#?}");
    assert_eq!(threads[0].args["ts"], post.ts.as_str());
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}

#[tokio::test(flavor = "multi_thread")]
async fn slack_messages_after_a_disconnect_and_an_abrupt_close_are_answered() {
    let mut d = SlackDaemon::start().await;
    let dm = FakeSlack::dm_channel(&user(1));
    d.slack.disconnect(DisconnectReason::RefreshRequested);
    d.slack.dm(&user(1), "after the refresh");
    assert_eq!(texts(&d.replies(&dm, 1).await), ["echo: after the refresh"]);
    d.slack.drop_connections();
    d.slack.dm(&user(1), "after the drop");
    let posted = d.replies(&dm, 2).await;
    assert_eq!(texts(&posted), ["echo: after the refresh", "echo: after the drop"]);
    assert!(d.slack.connections_opened() >= 3, "{}", d.slack.connections_opened());
    d.every_event_acknowledged_in_time().await;
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}

#[tokio::test(flavor = "multi_thread")]
async fn slack_down_for_a_while_then_back_answers_what_came_meanwhile() {
    let mut d = SlackDaemon::start().await;
    let dm = FakeSlack::dm_channel(&user(1));
    d.slack.down_for(Duration::from_secs(3));
    d.slack.dm(&user(1), "while down");
    let posted = d.replies_within(&dm, 1, Duration::from_secs(45)).await;
    assert_eq!(texts(&posted), ["echo: while down"]);
    d.slack.dm(&user(1), "back again");
    assert_eq!(texts(&d.replies(&dm, 2).await)[1], "echo: back again");
    settle().await;
    assert_eq!(d.slack.posted_in(&dm).len(), 2, "nothing answered twice");
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}

#[tokio::test(flavor = "multi_thread")]
async fn slack_refused_tokens_are_one_line_naming_the_variable_and_telegram_goes_on() {
    // Slack refuses the bot token (a revoked app).
    let slack = {
        let mut d = SlackDaemon::start_with("", &[], true).await;
        // The first run's checks done, so that its log has no refusal of its own.
        d.wait_log("platform connected platform=slack").await;
        d.slack.set_invalid_auth(true);
        d.stop().await;
        d.spawn().await;
        d.wait_log("slack refused the token").await;
        d
    };
    let line = |d: &SlackDaemon, var: &str| -> Vec<String> {
        d.logs().lines().filter(|l| l.contains(var)).map(str::to_owned).collect()
    };
    let named = line(&slack, "SLACK_BOT_TOKEN");
    assert_eq!(named.len(), 1, "{}", slack.logs());
    assert!(named[0].contains("invalid_auth") && !named[0].contains(FakeSlack::BOT_TOKEN));
    let telegram = slack.telegram.as_ref().unwrap();
    telegram.dm(1001, "still here?");
    let sent = telegram.wait_sent(1, Duration::from_secs(20)).await;
    assert_eq!(sent[0].text, "echo: still here?");

    // The two tokens swapped: named before Slack is asked anything.
    let swapped =
        [("SLACK_BOT_TOKEN", FakeSlack::APP_TOKEN), ("SLACK_APP_TOKEN", FakeSlack::BOT_TOKEN)];
    let mut d = SlackDaemon::start_with("", &swapped, true).await;
    d.wait_log("cannot start").await;
    let named = line(&d, "SLACK_BOT_TOKEN");
    assert_eq!(named.len(), 1, "{}", d.logs());
    assert!(named[0].contains("must start with xoxb-"), "{}", named[0]);
    assert!(named[0].contains("slack.bot_token_env"), "{}", named[0]);
    assert!(!d.logs().contains("fake-slack-token"), "no token in the log: {}", d.logs());
    assert!(d.slack.calls().is_empty(), "{:#?}", d.slack.calls());
    let telegram = d.telegram.as_ref().unwrap();
    telegram.dm(1001, "and here?");
    assert_eq!(telegram.wait_sent(1, Duration::from_secs(20)).await[0].text, "echo: and here?");
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}

/// The mark herald puts on piece `piece` of the reply whose outbox entry is `key`.
fn herald_mark(key: u32, piece: u32) -> Value {
    serde_json::json!({
        "event_type": "herald_reply",
        "event_payload": {"key": key.to_string(), "piece": piece.to_string()},
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn slack_a_mark_from_another_bot_is_no_answer_of_ours() {
    let mut d = SlackDaemon::start().await;
    let dm = FakeSlack::dm_channel(&user(1));
    // Another bot (a herald on its own store) answered in this chat under the same outbox ids.
    for key in 1..=20 {
        let post = Post::dm(&user(1), "not ours").from_bot("B0OTHER");
        d.slack.inject(post.with_metadata(herald_mark(key, 0)));
    }
    // A 5xx before Slack acted: the look finds no post of ours, and the answer goes out.
    d.slack.push_fault("chat.postMessage", SlackFault::Status { status: 500 });
    d.slack.dm(&user(1), "mine");
    assert_eq!(texts(&d.replies(&dm, 1).await), ["echo: mine"]);
    settle().await;
    assert_eq!(d.slack.posted_in(&dm).len(), 1);
    let looks = d.slack.calls_of("conversations.history");
    assert_eq!(looks.len(), 1, "{looks:#?}");
    // Only what came since the reply was stored, give or take the clocks' skew, is read.
    let oldest: f64 = looks[0].args["oldest"].as_str().unwrap().parse().unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    let before = now.as_secs_f64() - oldest;
    assert!((300.0..400.0).contains(&before), "oldest is {before} s back");
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}

#[tokio::test(flavor = "multi_thread")]
async fn slack_a_look_that_fails_is_tried_again_before_anything_is_posted() {
    let mut d = SlackDaemon::start().await;
    let dm = FakeSlack::dm_channel(&user(1));
    // The post taken and its answer lost; the look rate limited, then a 5xx.
    d.slack.push_fault("chat.postMessage", SlackFault::StatusAfter { status: 500 });
    d.slack.push_fault("conversations.history", SlackFault::RateLimited { retry_after: 1 });
    d.slack.push_fault("conversations.history", SlackFault::Status { status: 503 });
    d.slack.dm(&user(1), "once");
    assert_eq!(texts(&d.replies(&dm, 1).await), ["echo: once"]);
    // Done once the third look came, or once the answer went out again.
    let done = |fake: &FakeSlack| {
        fake.calls_of("conversations.history").len() >= 3 || fake.posted_in(&dm).len() >= 2
    };
    assert!(d.slack.wait_for(PATIENCE, done).await, "{}", d.logs());
    settle().await;
    assert_eq!(texts(&d.slack.posted_in(&dm)), ["echo: once"], "found, not posted again");
    let statuses: Vec<u16> =
        d.slack.calls_of("conversations.history").iter().map(|c| c.status).collect();
    assert_eq!(statuses, [429, 503, 200]);

    // Slack's own limit on reading, tighter than Tier 3: the second look waits its turn.
    d.slack.limit_reads(Some(ReadLimit { calls: 1, window: Duration::from_secs(3) }));
    d.slack.push_faults("chat.postMessage", SlackFault::StatusAfter { status: 502 }, 2);
    let (alice, bob) = (FakeSlack::dm_channel(&user(2)), FakeSlack::dm_channel(&user(3)));
    d.slack.dm(&user(2), "one");
    d.slack.dm(&user(3), "two");
    d.replies(&alice, 1).await;
    d.replies(&bob, 1).await;
    let both = |fake: &FakeSlack| {
        fake.calls_of("conversations.history").iter().filter(|c| c.error.is_none()).count() >= 3
    };
    assert!(d.slack.wait_for(PATIENCE, both).await, "{}", d.logs());
    settle().await;
    assert_eq!(texts(&d.slack.posted_in(&alice)), ["echo: one"]);
    assert_eq!(texts(&d.slack.posted_in(&bob)), ["echo: two"]);
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}

#[tokio::test(flavor = "multi_thread")]
async fn slack_a_call_that_never_answers_is_given_up_and_the_chat_goes_on() {
    let mut d = SlackDaemon::start_with("api_timeout_s = 1\n", &[], false).await;
    let dm = FakeSlack::dm_channel(&user(1));
    // Slack takes the post and its answer never comes; the first look hangs too.
    d.slack.push_fault("chat.postMessage", SlackFault::StallAfter);
    d.slack.push_fault("conversations.history", SlackFault::Stall);
    d.slack.dm(&user(1), "hello?");
    assert_eq!(texts(&d.replies(&dm, 1).await), ["echo: hello?"]);
    d.slack.dm(&user(1), "still there?");
    let posted = d.replies(&dm, 2).await;
    assert_eq!(texts(&posted), ["echo: hello?", "echo: still there?"]);
    settle().await;
    assert_eq!(d.slack.posted_in(&dm).len(), 2, "the stalled post was found, not posted again");
    assert_eq!(d.slack.calls_of("conversations.history").len(), 2);
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}

#[tokio::test(flavor = "multi_thread")]
async fn slack_a_refresh_before_hello_is_not_opened_again_at_once() {
    let mut d = SlackDaemon::start_with("socket_connections = 1\n", &[], false).await;
    d.slack.refresh_before_hello(usize::MAX);
    let before = d.slack.calls_of("apps.connections.open").len();
    d.slack.drop_connections();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let opens = d.slack.calls_of("apps.connections.open").len() - before;
    assert!(opens <= 8, "{opens} apps.connections.open calls in 3 s of refreshes\n{}", d.logs());
    d.slack.refresh_before_hello(0);
    let dm = FakeSlack::dm_channel(&user(1));
    d.slack.dm(&user(1), "back");
    let posted = d.replies_within(&dm, 1, Duration::from_secs(45)).await;
    assert_eq!(texts(&posted), ["echo: back"]);
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}

#[tokio::test(flavor = "multi_thread")]
async fn slack_a_rate_limited_socket_open_waits_for_retry_after() {
    let mut d = SlackDaemon::start_with("socket_connections = 1\n", &[], false).await;
    let limited = SlackFault::RateLimited { retry_after: 4 };
    d.slack.push_faults("apps.connections.open", limited, 2);
    d.slack.drop_connections();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let refused = d.slack.calls_of("apps.connections.open");
    let refused = refused.iter().filter(|c| c.status == 429).count();
    assert_eq!(refused, 1, "another open before Retry-After passed\n{}", d.logs());
    let dm = FakeSlack::dm_channel(&user(1));
    d.slack.dm(&user(1), "back");
    let posted = d.replies_within(&dm, 1, Duration::from_secs(45)).await;
    assert_eq!(texts(&posted), ["echo: back"]);
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}
