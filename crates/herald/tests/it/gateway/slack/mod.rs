//! `herald gateway` as a child process with `[slack]`, against the fake Slack (driven by the
//! real slack-morphism client inside herald's Slack adapter) and the fake model; with
//! `[telegram]` beside it where a test needs a second platform.

mod conversation;
mod delivery;
mod faults;
mod restart;

use std::time::{Duration, Instant};

use herald_fakes::FakeModel;
use herald_fakes::slack::{Delivery, FakeSlack, Posted};
use herald_fakes::telegram::FakeTelegram;
use herald_store::{Store, StoreOptions};

use super::process::GatewayProcess;
use super::telegram_section;
use crate::common::World;

/// The channel the tests' channel posts go to.
pub const CHANNEL: &str = "C0TEAM";

/// The Slack user allowed as number `n` (`U1000` ..= `U1059` are on the allowlist).
pub fn user(n: usize) -> String {
    format!("U{}", 1000 + n)
}

/// How long a test waits for something the daemon should do.
const PATIENCE: Duration = Duration::from_secs(20);

/// A gateway child process with `[slack]` and its fakes.
pub struct SlackDaemon {
    pub world: World,
    pub slack: FakeSlack,
    pub model: FakeModel,
    /// The fake Telegram, when the daemon runs `[telegram]` too.
    pub telegram: Option<FakeTelegram>,
    process: GatewayProcess,
}

impl SlackDaemon {
    /// Fakes started and a gateway connected to the fake Slack on a fresh store.
    pub async fn start() -> SlackDaemon {
        SlackDaemon::start_with("", &[], false).await
    }

    /// Like [`SlackDaemon::start`]: `extra_slack` goes into `[slack]`, `env` overrides the
    /// gateway's environment (the tokens), `telegram` adds `[telegram]` with a fake Telegram.
    /// Waits until Slack's socket is open, or with `telegram` until Telegram is polled.
    pub async fn start_with(
        extra_slack: &str,
        env: &[(&str, &str)],
        telegram: bool,
    ) -> SlackDaemon {
        let slack = FakeSlack::start().await;
        let mut daemon = SlackDaemon::prepare(slack, "", extra_slack, env, telegram).await;
        daemon.spawn().await;
        daemon
    }

    /// A gateway against `slack` as the test set it up (connections held by others, say),
    /// with `extra_gateway` in `[gateway]` and `extra_slack` in `[slack]`; started without
    /// waiting for a connection.
    pub async fn launch(slack: FakeSlack, extra_gateway: &str, extra_slack: &str) -> SlackDaemon {
        let mut daemon = SlackDaemon::prepare(slack, extra_gateway, extra_slack, &[], false).await;
        daemon.process.launch(&daemon.world);
        daemon
    }

    async fn prepare(
        slack: FakeSlack,
        extra_gateway: &str,
        extra_slack: &str,
        env: &[(&str, &str)],
        telegram: bool,
    ) -> SlackDaemon {
        let model = FakeModel::start().await;
        let telegram = match telegram {
            true => Some(FakeTelegram::start().await),
            false => None,
        };
        let users: Vec<String> = (0..60).map(user).collect();
        let mut config = format!(
            "[model]\nbase_url = \"{}\"\nmodel = \"fake-model\"\nrequest_timeout_s = 5\n\
             [gateway]\ndrain_timeout_s = 10\n{extra_gateway}\n{}{extra_slack}\n",
            model.base_url(),
            slack_section(&slack, &users),
        );
        if let Some(telegram) = &telegram {
            config.push_str(&telegram_section(telegram, &[1001]));
        }
        let world = World::with_config(&config);
        let process = GatewayProcess::new(&world, env);
        SlackDaemon { world, slack, model, telegram, process }
    }

    /// Starts the gateway process and waits until it is connected (see [`Self::start_with`]).
    pub async fn spawn(&mut self) {
        let opened = self.slack.connections_opened();
        let polls = self.telegram.as_ref().map(|t| t.get_updates_offsets().len());
        self.process.launch(&self.world);
        let started = Instant::now();
        loop {
            let ready = match (&self.telegram, polls) {
                (Some(telegram), Some(polls)) => telegram.get_updates_offsets().len() > polls,
                _ => self.slack.connections_opened() > opened && self.slack.open_connections() > 0,
            };
            if ready {
                break;
            }
            assert!(started.elapsed() < PATIENCE, "the gateway never connected: {}", self.logs());
            self.process.assert_running("the gateway never connected");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGTERM, then the exit code.
    pub async fn stop(&mut self) -> i32 {
        self.process.stop(PATIENCE).await
    }

    /// What the gateway logged so far.
    pub fn logs(&self) -> String {
        self.process.logs()
    }

    /// Waits until the gateway has logged `text`.
    pub async fn wait_log(&self, text: &str) {
        let started = Instant::now();
        while !self.logs().contains(text) {
            assert!(started.elapsed() < PATIENCE, "never logged {text:?}: {}", self.logs());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until the bot posted at least `n` messages in `channel`, and returns them.
    pub async fn replies(&self, channel: &str, n: usize) -> Vec<Posted> {
        self.replies_within(channel, n, PATIENCE).await
    }

    /// [`Self::replies`] with its own patience.
    pub async fn replies_within(&self, channel: &str, n: usize, patience: Duration) -> Vec<Posted> {
        let enough = |fake: &FakeSlack| fake.posted_in(channel).len() >= n;
        let arrived = self.slack.wait_for(patience, enough).await;
        let posted = self.slack.posted_in(channel);
        assert!(
            arrived,
            "{channel} got {} of {n} replies: {posted:#?}\n{}",
            posted.len(),
            self.logs()
        );
        posted
    }

    /// Waits until every envelope sent so far is acknowledged, and asserts each was within
    /// Slack's 3 s.
    pub async fn all_acknowledged_in_time(&self) -> Vec<Delivery> {
        let acked = |fake: &FakeSlack| fake.deliveries().iter().all(|d| d.acked_ms.is_some());
        self.acknowledged_in_time(acked).await
    }

    /// Waits until every event sent so far is acknowledged in one of its envelopes, and
    /// asserts each acknowledgement was within Slack's 3 s: an envelope on a connection that
    /// went away cannot be acknowledged, and Slack sends its event again.
    pub async fn every_event_acknowledged_in_time(&self) -> Vec<Delivery> {
        let acked = |fake: &FakeSlack| {
            let deliveries = fake.deliveries();
            deliveries.iter().all(|d| {
                deliveries
                    .iter()
                    .any(|other| other.event_id == d.event_id && other.acked_ms.is_some())
            })
        };
        self.acknowledged_in_time(acked).await
    }

    async fn acknowledged_in_time(&self, done: impl Fn(&FakeSlack) -> bool) -> Vec<Delivery> {
        let all = self.slack.wait_for(PATIENCE, done).await;
        let deliveries = self.slack.deliveries();
        assert!(all, "unacknowledged: {deliveries:#?}\n{}", self.logs());
        let late: Vec<&Delivery> = deliveries
            .iter()
            .filter(|d| d.ack_delay().is_some_and(|delay| delay >= Duration::from_secs(3)))
            .collect();
        assert!(late.is_empty(), "acknowledged after 3 s: {late:#?}");
        deliveries
    }

    /// The store, opened beside the running gateway.
    pub async fn store(&self) -> Store {
        Store::open(StoreOptions::new(&self.world.db)).await.unwrap()
    }

    /// Runs `herald ARGS` in the daemon's world.
    pub fn herald(&self, args: &[&str]) -> crate::common::Run {
        self.world.herald(args)
    }
}

/// `[slack]` against `slack`, with `users` allowed.
pub fn slack_section(slack: &FakeSlack, users: &[String]) -> String {
    let users: Vec<String> = users.iter().map(|id| format!("\"{id}\"")).collect();
    format!("[slack]\napi_url = \"{}\"\nallowed_users = [{}]\n", slack.api_url(), users.join(", "))
}

/// The texts of `posted`.
pub fn texts(posted: &[Posted]) -> Vec<&str> {
    posted.iter().map(|p| p.text.as_str()).collect()
}
