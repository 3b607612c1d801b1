//! Faults on Discord's side and in the daemon: a crash between a post and its delivered mark,
//! a 429, op 7 and dropped sockets (resumed), a resume that replays what was answered, and an
//! invalid session (identified again).

use std::path::Path;

use herald_fakes::discord::{FakeDiscord, InboundMessage, SendFault};
use sqlx::Connection;

use super::{DiscordDaemon, GUILD, USERS, settle};

/// What serenity logs when a session was resumed.
const RESUMED: &str = "] Resumed";

/// Takes the store's write lock from another connection, so the gateway's next write waits.
async fn hold_writes(db: &Path) -> sqlx::SqliteConnection {
    let url = format!("sqlite://{}", db.display());
    let mut connection = sqlx::SqliteConnection::connect(&url).await.unwrap();
    sqlx::query("BEGIN IMMEDIATE").execute(&mut connection).await.unwrap();
    connection
}

/// Sends `ask` with the first post of its answer refused with a 429; while the daemon waits to
/// post again, the store's writes are held, so when the fake has the post the daemon cannot
/// have marked it delivered: it is killed there and started again. The answer's channel.
async fn kill_between_post_and_mark(d: &mut DiscordDaemon, ask: impl Fn(&DiscordDaemon) -> u64) {
    d.discord.push_send_fault(SendFault::TooManyRequests { retry_after: 1.0, global: false });
    let channel = ask(d);
    let store = d.store().await;
    let started = std::time::Instant::now();
    while store.undelivered().await.unwrap().is_empty() {
        assert!(started.elapsed().as_secs() < 30, "the answer was never stored: {}", d.logs());
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    store.close().await;
    let lock = hold_writes(&d.world.db).await;
    d.until("the answer was never posted", |d| !d.sent_to(channel).is_empty()).await;
    d.signal("KILL");
    d.stop().await;
    drop(lock);
    let store = d.store().await;
    assert_eq!(store.undelivered().await.unwrap().len(), 1, "killed before the delivered mark");
    store.close().await;

    d.spawn().await;
    let store = d.store().await;
    let started = std::time::Instant::now();
    while !store.undelivered().await.unwrap().is_empty() {
        assert!(started.elapsed().as_secs() < 30, "never sent again: {}", d.logs());
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    store.close().await;
    settle().await;
    let sent = d.sent_to(channel);
    assert_eq!(sent.len(), 1, "the post sent again returned the first: {sent:?}\n{}", d.logs());
    assert!(sent[0].enforce_nonce && sent[0].nonce.is_some(), "{sent:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kill_between_the_post_and_its_delivered_mark_posts_once() {
    let mut d = DiscordDaemon::start("").await;
    let user = USERS[0];
    kill_between_post_and_mark(&mut d, |d| {
        d.dm(user, "exactly once");
        FakeDiscord::dm_channel(user)
    })
    .await;
    assert_eq!(d.sent_to(FakeDiscord::dm_channel(user))[0].content, "echo: exactly once");
    assert_eq!(d.model.request_count(), 1, "not asked again");
    d.dm(user, "and after");
    assert_eq!(d.replies(FakeDiscord::dm_channel(user), 2).await[1].content, "echo: and after");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kill_after_an_auto_thread_was_opened_opens_no_second_one() {
    let mut d = DiscordDaemon::start("auto_thread = true").await;
    let channel = 42_001;
    let asked = std::sync::Mutex::new(0);
    kill_between_post_and_mark(&mut d, |d| {
        let id = d.mention(channel, USERS[1], "a thread please");
        *asked.lock().unwrap() = id;
        id
    })
    .await;
    let thread = *asked.lock().unwrap();
    assert_eq!(d.sent_to(thread)[0].content, "echo: a thread please");
    assert_eq!(d.discord.threads().len(), 1, "{:?}", d.discord.threads());
    assert!(d.sent_to(channel).is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_429_then_success_is_answered_once() {
    let d = DiscordDaemon::start("").await;
    d.discord.push_send_fault(SendFault::TooManyRequests { retry_after: 0.5, global: false });
    d.discord.push_send_fault(SendFault::Status { status: 502 });
    let user = USERS[0];
    d.dm(user, "rate limited");
    let sent = d.replies(FakeDiscord::dm_channel(user), 1).await;
    assert_eq!(sent[0].content, "echo: rate limited");
    settle().await;
    assert_eq!(d.sent_to(FakeDiscord::dm_channel(user)).len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn op_7_and_an_abrupt_close_are_resumed() {
    let mut d = DiscordDaemon::start("").await;
    let user = USERS[0];
    let channel = FakeDiscord::dm_channel(user);
    d.dm(user, "before");
    d.replies(channel, 1).await;
    d.discord.reconnect();
    d.wait_log(RESUMED, 1).await;
    d.dm(user, "after op 7");
    assert_eq!(d.replies(channel, 2).await[1].content, "echo: after op 7");
    d.discord.drop_connections();
    d.wait_log(RESUMED, 2).await;
    d.dm(user, "after a drop");
    assert_eq!(d.replies(channel, 3).await[2].content, "echo: after a drop");
    assert_eq!(d.discord.identifies().len(), 1, "resumed, never identified again");
    settle().await;
    assert_eq!(d.sent_to(channel).len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn dispatches_replayed_on_a_resume_are_not_answered_again() {
    let mut d = DiscordDaemon::start("").await;
    let user = USERS[0];
    let channel = FakeDiscord::dm_channel(user);
    d.dm(user, "first");
    d.mention(43_001, USERS[1], "in a channel");
    d.replies(channel, 1).await;
    d.replies(43_001, 1).await;
    // 4007 (invalid seq): serenity resumes from seq 0, and the fake replays every dispatch
    // of the session, the answered messages (and the bot's own answers) included.
    d.discord.close_with(4007);
    d.wait_log(RESUMED, 1).await;
    assert!(
        d.logs().contains("Sequence off; them: 2, us: 0"),
        "replayed from the start: {}",
        d.logs()
    );
    d.dm(user, "second");
    assert_eq!(d.replies(channel, 2).await[1].content, "echo: second");
    settle().await;
    assert_eq!(d.sent_to(channel).len(), 2, "{:?}", d.sent_to(channel));
    assert_eq!(d.sent_to(43_001).len(), 1);
    assert_eq!(d.model.request_count(), 3);
    assert_eq!(d.discord.identifies().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_invalid_session_identifies_again() {
    let mut d = DiscordDaemon::start("").await;
    let user = USERS[2];
    let channel = FakeDiscord::dm_channel(user);
    d.dm(user, "before");
    d.replies(channel, 1).await;
    d.discord.invalid_session(false);
    d.until("never identified again", |d| d.discord.identifies().len() == 2).await;
    d.wait_log("connected to Discord", 2).await;
    d.dm(user, "after");
    assert_eq!(d.replies(channel, 2).await[1].content, "echo: after");
    let message = InboundMessage::channel(GUILD, 43_002, USERS[0], "and here").mentioning_bot();
    d.discord.inject_message(message);
    assert_eq!(d.replies(43_002, 1).await[0].content, "echo: and here");
    settle().await;
    assert_eq!(d.sent_to(channel).len(), 2);
}
