//! `herald gateway` as a real child process against the fake Discord (REST and the Gateway
//! WebSocket, driven by the real serenity client inside herald) and the fake model.
//!
//! Discord dispatches a message only to a session that is connected, so every start waits
//! until the gateway identified and the adapter said it is connected; what is sent while the
//! daemon is down comes back at the next start through the REST backfill from each known
//! channel's cursor.

mod auth;
mod commands;
mod conversation;
mod faults;
mod outage;
mod servers;

use std::time::{Duration, Instant};

use herald_fakes::FakeModel;
use herald_fakes::discord::{FakeDiscord, InboundMessage, SentMessage};
use herald_fakes::telegram::FakeTelegram;
use herald_store::{Store, StoreOptions};

use super::process::GatewayProcess;
use super::telegram_section;
use crate::common::World;

/// Discord users on the allowlist of every test daemon.
pub const USERS: [u64; 3] = [3001, 3002, 3003];
/// The server the channel tests talk in.
pub const GUILD: u64 = 77_000;
/// The Telegram user allowed when Telegram runs beside Discord.
pub const TELEGRAM_USER: i64 = 1001;

/// What the adapter logs once a gateway session is ready.
const CONNECTED: &str = "connected to Discord";
/// The longest wait for anything the daemon should do.
const PATIENCE: Duration = Duration::from_secs(30);

/// How a test daemon is set up.
#[derive(Default)]
pub struct Setup<'a> {
    /// Extra lines for `[discord]`.
    pub discord: &'a str,
    /// Extra lines for `[gateway]`.
    pub gateway: &'a str,
    /// Run Telegram (against the fake Telegram) beside Discord.
    pub telegram: bool,
    /// Extra environment variables for the gateway process.
    pub env: &'a [(&'a str, &'a str)],
}

/// A gateway child process with its fakes.
pub struct DiscordDaemon {
    pub world: World,
    pub discord: FakeDiscord,
    pub model: FakeModel,
    pub telegram: Option<FakeTelegram>,
    process: GatewayProcess,
}

impl DiscordDaemon {
    /// Fakes started and a gateway connected to the fake Discord; `discord` goes into
    /// `[discord]`.
    pub async fn start(discord: &str) -> DiscordDaemon {
        DiscordDaemon::start_with(Setup { discord, ..Setup::default() }).await
    }

    /// Fakes started and a gateway running as `setup` says.
    pub async fn start_with(setup: Setup<'_>) -> DiscordDaemon {
        let mut daemon = DiscordDaemon::prepare(setup).await;
        daemon.spawn().await;
        daemon
    }

    /// Fakes started and the config written as `setup` says; no gateway yet (see
    /// [`DiscordDaemon::spawn`] and [`DiscordDaemon::launch`]).
    pub async fn prepare(setup: Setup<'_>) -> DiscordDaemon {
        let discord = FakeDiscord::start().await;
        let model = FakeModel::start().await;
        let telegram = if setup.telegram { Some(FakeTelegram::start().await) } else { None };
        let mut config = format!(
            "[model]\nbase_url = \"{}\"\nmodel = \"fake-model\"\nrequest_timeout_s = 5\n\
             [gateway]\ndrain_timeout_s = 10\n{}\n{}{}\n",
            model.base_url(),
            setup.gateway,
            discord_section(&discord, &USERS),
            setup.discord,
        );
        if let Some(telegram) = &telegram {
            config.push_str(&telegram_section(telegram, &[TELEGRAM_USER]));
        }
        let world = World::with_config(&config);
        let process = GatewayProcess::new(&world, setup.env);
        DiscordDaemon { world, discord, model, telegram, process }
    }

    /// Starts the gateway process without waiting for anything.
    pub fn launch(&mut self) {
        self.process.launch(&self.world);
    }

    /// Starts the gateway process and waits until its Discord session is ready.
    pub async fn spawn(&mut self) {
        let identified = self.discord.identifies().len();
        let connected = self.logs().matches(CONNECTED).count();
        self.launch();
        self.until("the gateway never connected to the fake Discord", |d| {
            d.discord.identifies().len() > identified
                && d.logs().matches(CONNECTED).count() > connected
        })
        .await;
    }

    /// Waits until `done` holds, failing with `what` and the log after [`PATIENCE`] or when the
    /// gateway exited.
    pub async fn until(&mut self, what: &str, done: impl Fn(&DiscordDaemon) -> bool) {
        let started = Instant::now();
        while !done(self) {
            assert!(started.elapsed() < PATIENCE, "{what}: {}", self.logs());
            self.process.assert_running(what);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Sends a signal (`HUP`, `TERM`, `KILL`) to the gateway process.
    pub fn signal(&self, name: &str) {
        self.process.signal(name);
    }

    /// Waits until the gateway has logged `text` at least `n` times.
    pub async fn wait_log(&mut self, text: &str, n: usize) {
        let what = format!("the gateway never logged {text:?} {n} times");
        self.until(&what, |d| d.logs().matches(text).count() >= n).await;
    }

    /// Waits until the gateway exits by itself, and returns its exit code.
    pub async fn exited(&mut self) -> i32 {
        let started = Instant::now();
        while self.process.is_running() {
            assert!(started.elapsed() < PATIENCE, "the gateway kept running: {}", self.logs());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.process.stop(PATIENCE).await
    }

    /// SIGTERM (unless it was killed already), then the exit code.
    pub async fn stop(&mut self) -> i32 {
        self.process.stop(PATIENCE).await
    }

    /// What the gateway logged so far.
    pub fn logs(&self) -> String {
        self.process.logs()
    }

    /// What the bot posted in `channel` so far.
    pub fn sent_to(&self, channel: u64) -> Vec<SentMessage> {
        self.discord.sent().into_iter().filter(|m| m.channel_id == channel).collect()
    }

    /// Waits until `channel` got at least `n` messages, and returns them.
    pub async fn replies(&self, channel: u64, n: usize) -> Vec<SentMessage> {
        let started = Instant::now();
        loop {
            let sent = self.sent_to(channel);
            if sent.len() >= n {
                return sent;
            }
            assert!(
                started.elapsed() < PATIENCE,
                "channel {channel} got {} of {n} messages: {sent:?}\n{}",
                sent.len(),
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// A DM from `user`; its message id.
    pub fn dm(&self, user: u64, text: &str) -> u64 {
        self.discord.inject_message(InboundMessage::dm(user, text)).0
    }

    /// A message in server channel `channel` of [`GUILD`] mentioning the bot; its id.
    pub fn mention(&self, channel: u64, user: u64, text: &str) -> u64 {
        let message = InboundMessage::channel(GUILD, channel, user, text).mentioning_bot();
        self.discord.inject_message(message).0
    }

    /// The texts of `messages`.
    pub fn texts(messages: &[SentMessage]) -> Vec<&str> {
        messages.iter().map(|m| m.content.as_str()).collect()
    }

    /// The store, opened beside the running gateway.
    pub async fn store(&self) -> Store {
        Store::open(StoreOptions::new(&self.world.db)).await.unwrap()
    }

    /// The user messages the model received in its last request.
    pub fn last_prompt(&self) -> Vec<String> {
        let last = self.model.requests().pop().expect("a model request");
        last["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "user")
            .filter_map(|m| m["content"].as_str().map(str::to_owned))
            .collect()
    }
}

/// `[discord]` against `discord`, with `users` allowed.
pub fn discord_section(discord: &FakeDiscord, users: &[u64]) -> String {
    let users: Vec<String> = users.iter().map(|id| format!("\"{id}\"")).collect();
    format!(
        "[discord]\napi_url = \"{}\"\nallowed_users = [{}]\n",
        discord.api_url(),
        users.join(", ")
    )
}

/// Gives the gateway a moment to (not) do something.
pub async fn settle() {
    tokio::time::sleep(Duration::from_millis(500)).await;
}
