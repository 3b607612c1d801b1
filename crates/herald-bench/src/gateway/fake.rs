//! The fake platform a `gateway` run writes on.

use std::time::{Duration, Instant};

use herald_fakes::discord::{FakeDiscord, InboundMessage};
use herald_fakes::slack::{Delivery, FakeSlack};
use herald_fakes::telegram::FakeTelegram;
use serde::Serialize;

/// The platforms `gateway` can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BenchPlatform {
    /// The Telegram adapter (long polling).
    Telegram,
    /// The Discord adapter (Gateway WebSocket and REST).
    Discord,
    /// The Slack adapter (Socket Mode and the Web API).
    Slack,
    /// All three adapters in one gateway, a third of the chats on each.
    All,
}

impl BenchPlatform {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            BenchPlatform::Telegram => "telegram",
            BenchPlatform::Discord => "discord",
            BenchPlatform::Slack => "slack",
            BenchPlatform::All => "all",
        }
    }
}

/// A running fake of one platform.
#[derive(Debug, Clone)]
pub(super) enum Fake {
    Telegram(FakeTelegram),
    Discord(FakeDiscord),
    Slack(FakeSlack),
}

impl Fake {
    /// The fakes `platform` runs on: one, or all three for [`BenchPlatform::All`].
    pub(super) async fn start(platform: BenchPlatform) -> Vec<Fake> {
        match platform {
            BenchPlatform::Telegram => vec![Fake::Telegram(FakeTelegram::start().await)],
            BenchPlatform::Discord => vec![Fake::Discord(FakeDiscord::start().await)],
            // The bot's own posts come back as `message` events, as on Slack (a DM app
            // subscribed to `message.im` gets them): the adapter must acknowledge and drop one
            // for every answer, which is part of the load measured.
            BenchPlatform::Slack => vec![Fake::Slack(FakeSlack::start().await)],
            BenchPlatform::All => vec![
                Fake::Telegram(FakeTelegram::start().await),
                Fake::Discord(FakeDiscord::start().await),
                Fake::Slack(FakeSlack::start().await),
            ],
        }
    }

    /// The platform this fake stands for.
    pub(super) fn platform(&self) -> BenchPlatform {
        match self {
            Fake::Telegram(_) => BenchPlatform::Telegram,
            Fake::Discord(_) => BenchPlatform::Discord,
            Fake::Slack(_) => BenchPlatform::Slack,
        }
    }

    pub(super) fn api_url(&self) -> String {
        match self {
            Fake::Telegram(fake) => fake.api_url(),
            Fake::Discord(fake) => fake.api_url(),
            Fake::Slack(fake) => fake.api_url(),
        }
    }

    pub(super) fn token(&self) -> &'static str {
        match self {
            Fake::Telegram(_) => FakeTelegram::TOKEN,
            Fake::Discord(_) => FakeDiscord::TOKEN,
            Fake::Slack(_) => FakeSlack::BOT_TOKEN,
        }
    }

    /// The app-level token, for a platform that has one (Slack's Socket Mode).
    pub(super) fn app_token(&self) -> Option<&'static str> {
        matches!(self, Fake::Slack(_)).then_some(FakeSlack::APP_TOKEN)
    }

    /// Every Socket Mode envelope and its acknowledgement, on Slack, once the last ones are
    /// acknowledged (the echoes of the last answers are still on their way when the run ends)
    /// or Slack's 3 s have passed.
    pub(super) async fn deliveries(&self) -> Option<Vec<Delivery>> {
        match self {
            Fake::Slack(fake) => {
                let acked =
                    |fake: &FakeSlack| fake.deliveries().iter().all(|d| d.acked_ms.is_some());
                fake.wait_for(Duration::from_secs(3), acked).await;
                Some(fake.deliveries())
            }
            Fake::Telegram(_) | Fake::Discord(_) => None,
        }
    }

    /// Waits until the gateway is connected and can hear a message written now: Telegram keeps
    /// updates until they are polled, Discord and Slack only send to a connection that is up.
    pub(super) async fn wait_connected(
        &self,
        daemon: &mut tokio::process::Child,
    ) -> anyhow::Result<()> {
        let connected = || match self {
            Fake::Telegram(_) => true,
            Fake::Discord(fake) => !fake.identifies().is_empty(),
            Fake::Slack(fake) => fake.open_connections() > 0,
        };
        let started = std::time::Instant::now();
        while !connected() {
            anyhow::ensure!(
                daemon.try_wait()?.is_none(),
                "the gateway process exited before it connected"
            );
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(30),
                "the gateway never connected to the fake platform"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if let Fake::Slack(fake) = self {
            // slack-morphism opens its connections a second apart; setting them up is not
            // measured, like the warm-up: the run starts once no new one came for 1.5 s.
            let (mut open, mut since) = (fake.open_connections(), std::time::Instant::now());
            while since.elapsed() < Duration::from_millis(1500)
                && started.elapsed() < Duration::from_secs(30)
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if fake.open_connections() != open {
                    (open, since) = (fake.open_connections(), std::time::Instant::now());
                }
            }
        }
        // Discord's READY follows IDENTIFY at once, Slack's hello the connection; the adapter
        // takes messages from then on.
        tokio::time::sleep(Duration::from_millis(200)).await;
        Ok(())
    }

    /// `user` writes `text` to the bot in a direct message.
    pub(super) fn dm(&self, user: i64, text: &str) {
        match self {
            Fake::Telegram(fake) => {
                fake.dm(user, text);
            }
            Fake::Discord(fake) => {
                fake.inject_message(InboundMessage::dm(user.unsigned_abs(), text));
            }
            Fake::Slack(fake) => {
                fake.dm(&format!("U{user}"), text);
            }
        }
    }

    /// The texts the bot posted after the first `from`, once there is one or `timeout` passed.
    pub(super) async fn wait_sent_after(&self, from: usize, timeout: Duration) -> Vec<String> {
        match self {
            Fake::Telegram(fake) => {
                fake.wait_sent_after(from, timeout).await.into_iter().map(|m| m.text).collect()
            }
            Fake::Discord(fake) => {
                fake.wait_sent_after(from, timeout).await.into_iter().map(|m| m.content).collect()
            }
            Fake::Slack(fake) => {
                fake.wait_posted_after(from, timeout).await.into_iter().map(|m| m.text).collect()
            }
        }
    }
}

/// Follows the bot's replies on each of `fakes`, sending `(index of the fake, text, when seen)`
/// into one channel, from the first `seen[i]` replies of fake `i` on, until the receiver goes.
/// One task per fake: a fake's wait returns as soon as it has news, so a quiet platform never
/// delays when another's replies are seen (that time is the measured latency).
pub(super) fn follow(
    fakes: &[Fake],
    seen: Vec<usize>,
) -> tokio::sync::mpsc::UnboundedReceiver<(usize, String, Instant)> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    for (i, (fake, mut seen)) in fakes.iter().cloned().zip(seen).enumerate() {
        let tx = tx.clone();
        tokio::spawn(async move {
            while !tx.is_closed() {
                let new = fake.wait_sent_after(seen, Duration::from_millis(500)).await;
                let now = Instant::now();
                seen += new.len();
                for text in new {
                    if tx.send((i, text, now)).is_err() {
                        return;
                    }
                }
            }
        });
    }
    rx
}
