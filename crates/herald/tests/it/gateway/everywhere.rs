//! One `herald gateway` with `[telegram]`, `[discord]` and `[slack]` at once, against the three
//! fakes and the fake model: each platform's users answered on their own platform, in order,
//! and a SIGTERM that drains the turns running on all three.

use std::time::{Duration, Instant};

use herald_fakes::FakeModel;
use herald_fakes::discord::{FakeDiscord, InboundMessage};
use herald_fakes::slack::FakeSlack;
use herald_fakes::telegram::FakeTelegram;

use super::discord::discord_section;
use super::process::GatewayProcess;
use super::slack::slack_section;
use super::{settle, telegram_section};
use crate::common::World;

/// Telegram users (their DM chats have the same ids).
const TELEGRAM: [i64; 3] = [1001, 1002, 1003];
/// Discord users.
const DISCORD: [u64; 3] = [3001, 3002, 3003];
/// Slack users.
const SLACK: [&str; 3] = ["U1001", "U1002", "U1003"];
/// Messages each user sends.
const MESSAGES: usize = 4;
/// The longest wait for anything the daemon should do (nine conversations at once on a busy
/// machine).
const PATIENCE: Duration = Duration::from_secs(60);

/// A gateway child process with the three platforms and their fakes.
struct AllDaemon {
    world: World,
    telegram: FakeTelegram,
    discord: FakeDiscord,
    slack: FakeSlack,
    model: FakeModel,
    process: GatewayProcess,
}

impl AllDaemon {
    /// Fakes started and a gateway polling Telegram, with a Discord session ready and Slack's
    /// socket open (Discord and Slack send only to a connection that is up).
    async fn start() -> AllDaemon {
        let (telegram, discord) = (FakeTelegram::start().await, FakeDiscord::start().await);
        let (slack, model) = (FakeSlack::start().await, FakeModel::start().await);
        let config = format!(
            "[model]\nbase_url = \"{}\"\nmodel = \"fake-model\"\nrequest_timeout_s = 5\n\
             [gateway]\ndrain_timeout_s = 10\n{}{}{}",
            model.base_url(),
            telegram_section(&telegram, &TELEGRAM),
            discord_section(&discord, &DISCORD),
            slack_section(&slack, &SLACK.map(str::to_owned)),
        );
        let world = World::with_config(&config);
        let process = GatewayProcess::new(&world, &[]);
        let mut d = AllDaemon { world, telegram, discord, slack, model, process };
        d.process.launch(&d.world);
        d.until("the gateway never connected to all three", |d| {
            !d.telegram.get_updates_offsets().is_empty()
                && !d.discord.identifies().is_empty()
                && d.process.logs().contains("connected to Discord")
                && d.slack.open_connections() > 0
        })
        .await;
        d
    }

    /// Waits until `done` holds, failing with `what` and the log after [`PATIENCE`] or when the
    /// gateway exited.
    async fn until(&mut self, what: &str, done: impl Fn(&AllDaemon) -> bool) {
        let started = Instant::now();
        while !done(self) {
            assert!(started.elapsed() < PATIENCE, "{what}: {}", self.process.logs());
            self.process.assert_running(what);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// What each Telegram user's chat, Discord user's DM channel and Slack user's DM got, in
    /// that order, as texts.
    fn answers(&self) -> Vec<Vec<String>> {
        let telegram = TELEGRAM.iter().map(|&user| {
            self.telegram.sent_to(user).into_iter().map(|m| m.text).collect::<Vec<_>>()
        });
        let sent = self.discord.sent();
        let discord = DISCORD.iter().map(|&user| {
            let channel = FakeDiscord::dm_channel(user);
            let own = sent.iter().filter(|m| m.channel_id == channel);
            own.map(|m| m.content.clone()).collect::<Vec<_>>()
        });
        let slack = SLACK.iter().map(|user| {
            let posted = self.slack.posted_in(&FakeSlack::dm_channel(user));
            posted.into_iter().map(|p| p.text).collect::<Vec<_>>()
        });
        telegram.chain(discord).chain(slack).collect()
    }

    /// Every answer the bot gave on any platform, however addressed.
    fn answer_count(&self) -> usize {
        self.telegram.sent().len() + self.discord.sent().len() + self.slack.posted().len()
    }

    /// Message `m` of each user on each platform, in [`AllDaemon::answers`]'s order of chats.
    fn send_round(&self, m: usize) {
        for user in TELEGRAM {
            self.telegram.dm(user, &format!("telegram {user} m{m}"));
        }
        for user in DISCORD {
            self.discord.inject_message(InboundMessage::dm(user, &format!("discord {user} m{m}")));
        }
        for user in SLACK {
            self.slack.dm(user, &format!("slack {user} m{m}"));
        }
    }

    /// What the chats of [`AllDaemon::answers`] are sent by round `m` (the fake model echoes).
    fn expected(m: usize) -> Vec<String> {
        let telegram = TELEGRAM.iter().map(|user| format!("echo: telegram {user} m{m}"));
        let discord = DISCORD.iter().map(|user| format!("echo: discord {user} m{m}"));
        let slack = SLACK.iter().map(|user| format!("echo: slack {user} m{m}"));
        telegram.chain(discord).chain(slack).collect()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn telegram_discord_and_slack_in_one_daemon_answer_their_own_users_and_drain_together() {
    let mut d = AllDaemon::start().await;
    for m in 0..MESSAGES {
        d.send_round(m);
    }
    let chats = TELEGRAM.len() + DISCORD.len() + SLACK.len();
    d.until("not every message was answered", |d| {
        d.answers().iter().all(|chat| chat.len() >= MESSAGES)
    })
    .await;
    settle().await;
    let answers = d.answers();
    for (chat, got) in answers.iter().enumerate() {
        let expected: Vec<String> =
            (0..MESSAGES).map(|m| AllDaemon::expected(m)[chat].clone()).collect();
        assert_eq!(got, &expected, "chat {chat}, on its own platform, in order");
    }
    // Nothing went anywhere else: no answer crossed to another platform or chat.
    assert_eq!(d.answer_count(), chats * MESSAGES, "{answers:#?}");

    // A turn running on each platform when SIGTERM comes: all three finish and are delivered.
    d.model.set_latency(Duration::from_millis(1500));
    let asked = d.model.request_count();
    d.send_round(MESSAGES);
    d.until("the model never got the last round", |d| d.model.request_count() >= asked + chats)
        .await;
    assert_eq!(d.process.stop(PATIENCE).await, 0, "{}", d.process.logs());
    let answers = d.answers();
    for (chat, got) in answers.iter().enumerate() {
        let last = &AllDaemon::expected(MESSAGES)[chat];
        assert_eq!(got.len(), MESSAGES + 1, "chat {chat}: {got:#?}\n{}", d.process.logs());
        assert_eq!(&got[MESSAGES], last, "chat {chat} answered during the drain");
    }
    assert_eq!(d.answer_count(), chats * (MESSAGES + 1));
}
