//! Outages: what was sent while the daemon was stopped, or while Discord was unreachable
//! past resuming, is fetched from each channel's cursor (or its session's newest message) and
//! answered once, whatever is heard live before the fetch; a refused token or
//! intent is one line in the log while Telegram keeps answering, and ends the daemon (status 1,
//! the reason in one line) when Discord was its only platform.

use herald_fakes::discord::{FakeDiscord, InboundMessage};
use sqlx::Connection;

use super::{DiscordDaemon, GUILD, Setup, TELEGRAM_USER, USERS, settle};

#[tokio::test(flavor = "multi_thread")]
async fn messages_sent_while_the_daemon_was_stopped_are_answered_once() {
    let mut d = DiscordDaemon::start("").await;
    let user = USERS[0];
    let dm = FakeDiscord::dm_channel(user);
    let channel = 44_001;
    d.dm(user, "before");
    d.mention(channel, USERS[1], "before, in a channel");
    d.replies(dm, 1).await;
    d.replies(channel, 1).await;
    assert_eq!(d.stop().await, 0, "{}", d.logs());

    d.dm(user, "while down 1");
    d.dm(user, "while down 2");
    let unaddressed = InboundMessage::channel(GUILD, channel, USERS[1], "chatter while down");
    d.discord.inject_message(unaddressed);
    d.mention(channel, USERS[2], "while down, in a channel");
    d.spawn().await;
    let sent = d.replies(dm, 3).await;
    assert_eq!(
        DiscordDaemon::texts(&sent),
        ["echo: before", "echo: while down 1", "echo: while down 2"]
    );
    let sent = d.replies(channel, 2).await;
    assert_eq!(sent[1].content, "echo: while down, in a channel");
    d.dm(user, "live again");
    d.replies(dm, 4).await;
    settle().await;
    assert_eq!(d.sent_to(dm).len(), 4, "{:?}", d.sent_to(dm));
    assert_eq!(d.sent_to(channel).len(), 2, "{:?}", d.sent_to(channel));
    assert_eq!(d.model.request_count(), 6, "the chatter never reached the model");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_newer_message_heard_before_the_fetch_leaves_the_gap_before_it_answered() {
    let mut d = DiscordDaemon::start("").await;
    // Six channels the bot answered in: four fetched at once after the restart, held by the
    // fake, while the fifth, whose cursor is read later, hears a newer message live.
    let channels: Vec<u64> = (45_001..=45_006).collect();
    let (live, unsaved) = (channels[4], channels[5]);
    for &channel in &channels {
        d.mention(channel, USERS[0], "before");
        d.replies(channel, 1).await;
    }
    assert_eq!(d.stop().await, 0, "{}", d.logs());
    // As after a crash before the channel's cursor was saved: only its session knows it.
    let url = format!("sqlite://{}", d.world.db.display());
    let mut db = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let forget = format!("DELETE FROM platform_cursors WHERE name = 'channel:{unsaved}'");
    sqlx::query(sqlx::AssertSqlSafe(forget)).execute(&mut db).await.unwrap();
    drop(db);

    for n in 1..=3 {
        d.mention(live, USERS[0], &format!("while down {n}"));
    }
    for n in 1..=2 {
        d.mention(unsaved, USERS[1], &format!("unsaved while down {n}"));
    }
    d.discord.hold_history(true);
    d.spawn().await;
    d.until("the first fetches never came", |d| d.discord.history_requests() >= 4).await;
    // Heard live while the gap before it is still being fetched: it waits for that gap, so
    // the channel's messages are answered in the order they were written.
    d.mention(live, USERS[0], "live");
    d.discord.hold_history(false);

    let sent = d.replies(live, 5).await;
    let expected = [
        "echo: before",
        "echo: while down 1",
        "echo: while down 2",
        "echo: while down 3",
        "echo: live",
    ];
    assert_eq!(DiscordDaemon::texts(&sent), expected, "{}", d.logs());
    let sent = d.replies(unsaved, 3).await;
    assert_eq!(
        DiscordDaemon::texts(&sent),
        ["echo: before", "echo: unsaved while down 1", "echo: unsaved while down 2"]
    );
    settle().await;
    assert_eq!(d.sent_to(live).len(), 5, "each once: {:?}", d.sent_to(live));
    assert_eq!(d.sent_to(unsaved).len(), 3, "each once: {:?}", d.sent_to(unsaved));
    assert_eq!(d.model.request_count(), 6 + 4 + 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn messages_sent_while_discord_was_down_past_resuming_are_answered_once() {
    let mut d = DiscordDaemon::start("").await;
    let user = USERS[1];
    let dm = FakeDiscord::dm_channel(user);
    let channel = 44_002;
    d.dm(user, "before");
    d.mention(channel, USERS[0], "before, in a channel");
    d.replies(dm, 1).await;
    d.replies(channel, 1).await;

    d.discord.set_offline(true);
    // The outage is reported (what /healthz shows) though serenity sends no stage update.
    d.wait_log("the gateway connection is down", 1).await;
    d.dm(user, "during the outage");
    d.mention(channel, USERS[0], "during the outage, in a channel");
    // Down long enough that Discord forgot the session: a RESUME gets op 9, the client
    // identifies afresh, and the dispatches of the gap never arrive as events.
    d.discord.invalid_session(false);
    d.discord.set_offline(false);
    d.until("never identified again", |d| d.discord.identifies().len() >= 2).await;
    let sent = d.replies(dm, 2).await;
    assert_eq!(sent[1].content, "echo: during the outage");
    let sent = d.replies(channel, 2).await;
    assert_eq!(sent[1].content, "echo: during the outage, in a channel");
    d.dm(user, "after");
    d.replies(dm, 3).await;
    settle().await;
    assert_eq!(d.sent_to(dm).len(), 3, "{:?}", d.sent_to(dm));
    assert_eq!(d.sent_to(channel).len(), 2, "{:?}", d.sent_to(channel));
}

/// Starts Discord beside Telegram with `refuse` applied to the fake Discord first, waits for
/// `line` in the log, and shows that Telegram still answers and `line` was logged once.
async fn refused_while_telegram_answers(
    env: &[(&str, &str)],
    refuse: impl Fn(&FakeDiscord),
    line: &str,
) {
    let mut d = DiscordDaemon::prepare(Setup { telegram: true, env, ..Setup::default() }).await;
    refuse(&d.discord);
    d.launch();
    d.wait_log(line, 1).await;
    let telegram = d.telegram.clone().expect("telegram runs");
    telegram.dm(TELEGRAM_USER, "still there?");
    d.until("telegram never answered", |_| !telegram.sent_to(TELEGRAM_USER).is_empty()).await;
    assert_eq!(telegram.sent_to(TELEGRAM_USER)[0].text, "echo: still there?");
    settle().await;
    let logs = d.logs();
    let lines: Vec<&str> = logs.lines().filter(|l| l.contains(line)).collect();
    assert_eq!(lines.len(), 1, "one line: {logs}");
    assert!(lines[0].contains("the other platforms keep running"), "{logs}");
    assert!(!logs.contains(FakeDiscord::TOKEN), "the token is never logged: {logs}");
    assert_eq!(d.stop().await, 0, "{logs}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_4014_close_names_the_message_content_intent_while_telegram_answers() {
    let line = "enable the Message Content intent for this bot in the developer portal";
    refused_while_telegram_answers(&[], |fake| fake.deny_message_content(true), line).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_4004_close_names_the_token_variable_while_telegram_answers() {
    let env = [("DISCORD_BOT_TOKEN", "not-the-token")];
    let line = "refused the token: the gateway closed with 4004 (authentication failed); check DISCORD_BOT_TOKEN";
    refused_while_telegram_answers(&env, |_| {}, line).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_token_on_the_only_platform_ends_the_daemon_with_the_reason() {
    let env = [("DISCORD_BOT_TOKEN", "not-the-token")];
    let mut d = DiscordDaemon::prepare(Setup { env: &env, ..Setup::default() }).await;
    d.launch();
    let code = d.exited().await;
    let logs = d.logs();
    assert_eq!(code, 1, "{logs}");
    let reason = "error: every platform stopped: discord refused the token: the gateway closed \
                  with 4004 (authentication failed); check DISCORD_BOT_TOKEN";
    let lines: Vec<&str> = logs.lines().filter(|l| l.contains("refused the token")).collect();
    assert_eq!(lines, [reason], "{logs}");
    assert!(!logs.contains(" ERROR "), "the reason is said once: {logs}");
    assert!(!logs.contains("not-the-token"), "the token is never logged: {logs}");
}
