//! The fake platform a `gateway` run writes on.

use std::time::Duration;

use herald_fakes::discord::{FakeDiscord, InboundMessage};
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
}

impl BenchPlatform {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            BenchPlatform::Telegram => "telegram",
            BenchPlatform::Discord => "discord",
        }
    }
}

/// A running fake of one platform.
#[derive(Debug, Clone)]
pub(super) enum Fake {
    Telegram(FakeTelegram),
    Discord(FakeDiscord),
}

impl Fake {
    pub(super) async fn start(platform: BenchPlatform) -> Fake {
        match platform {
            BenchPlatform::Telegram => Fake::Telegram(FakeTelegram::start().await),
            BenchPlatform::Discord => Fake::Discord(FakeDiscord::start().await),
        }
    }

    pub(super) fn api_url(&self) -> String {
        match self {
            Fake::Telegram(fake) => fake.api_url(),
            Fake::Discord(fake) => fake.api_url(),
        }
    }

    pub(super) fn token(&self) -> &'static str {
        match self {
            Fake::Telegram(_) => FakeTelegram::TOKEN,
            Fake::Discord(_) => FakeDiscord::TOKEN,
        }
    }

    /// Waits until the gateway is connected and can hear a message written now: Telegram keeps
    /// updates until they are polled, Discord only dispatches to a session that is up.
    pub(super) async fn wait_connected(
        &self,
        daemon: &mut tokio::process::Child,
    ) -> anyhow::Result<()> {
        let Fake::Discord(fake) = self else { return Ok(()) };
        let started = std::time::Instant::now();
        while fake.identifies().is_empty() {
            anyhow::ensure!(
                daemon.try_wait()?.is_none(),
                "the gateway process exited before it connected"
            );
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(30),
                "the gateway never connected to the fake Discord"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // READY follows IDENTIFY at once; the adapter reads messages from its handler on.
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
        }
    }
}
