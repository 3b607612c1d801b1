//! `herald gateway` as a real child process, against the fake Telegram Bot API (driven by the
//! real teloxide client inside herald) and the fake model.

mod auth;
mod compression;
mod conversation;
mod delivery;
mod discord;
mod everywhere;
mod health;
mod kill;
mod notify;
mod poison;
mod process;
mod reload;
mod replicas;
mod restart;
mod slack;

use std::time::{Duration, Instant};

use herald_fakes::FakeModel;
use herald_fakes::telegram::{FakeTelegram, SentMessage};
use herald_store::{Store, StoreOptions};

use crate::common::World;
use process::GatewayProcess;

/// Users on the allowlist of every test daemon.
pub const ALLOWED: [i64; 3] = [1001, 1002, 1003];

/// A gateway child process with its fakes.
pub struct Daemon {
    pub world: World,
    pub telegram: FakeTelegram,
    pub model: FakeModel,
    process: GatewayProcess,
}

impl Daemon {
    /// Fakes started and a gateway running on a fresh store; `extra` goes into `[gateway]`.
    pub async fn start(extra_gateway: &str) -> Daemon {
        Daemon::start_with_env(extra_gateway, &[]).await
    }

    /// Like [`Daemon::start`], with extra environment variables for the gateway process.
    pub async fn start_with_env(extra_gateway: &str, env: &[(&str, &str)]) -> Daemon {
        let telegram = FakeTelegram::start().await;
        let model = FakeModel::start().await;
        let config = format!(
            "[model]\nbase_url = \"{}\"\nmodel = \"fake-model\"\nrequest_timeout_s = 5\n\
             [gateway]\ndrain_timeout_s = 10\n{extra_gateway}\n{}",
            model.base_url(),
            telegram_section(&telegram, &ALLOWED),
        );
        let mut world = World::with_config(&config);
        world.env("TELEGRAM_BOT_TOKEN", FakeTelegram::TOKEN);
        let process = GatewayProcess::new(&world, env);
        let mut daemon = Daemon { world, telegram, model, process };
        daemon.spawn().await;
        daemon
    }

    /// Starts the gateway process and waits until it polls the fake.
    pub async fn spawn(&mut self) {
        let polls = self.telegram.get_updates_offsets().len();
        self.process.launch(&self.world);
        let started = Instant::now();
        while self.telegram.get_updates_offsets().len() <= polls {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the gateway never polled: {}",
                self.logs()
            );
            self.process.assert_running("the gateway never polled");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the gateway, sets `key = value` in `[section]` of its config, and starts it again.
    pub async fn reconfigure(&mut self, settings: &[(&str, &str, &str)]) {
        assert_eq!(self.stop().await, 0, "{}", self.logs());
        let mut config = std::fs::read_to_string(&self.world.config).unwrap();
        for (section, key, value) in settings {
            let header = format!("[{section}]\n");
            if !config.contains(&header) {
                config.push_str(&format!("\n{header}"));
            }
            config = config.replacen(&header, &format!("{header}{key} = {value}\n"), 1);
        }
        std::fs::write(&self.world.config, config).unwrap();
        self.spawn().await;
    }

    /// Sends a signal (`HUP`, `TERM`) to the gateway process.
    pub fn signal(&self, name: &str) {
        self.process.signal(name);
    }

    /// The gateway's process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Whether the gateway process is still running.
    pub fn is_running(&mut self) -> bool {
        self.process.is_running()
    }

    /// Waits until the gateway has logged `text` at least `n` times.
    pub async fn wait_log(&self, text: &str, n: usize) {
        let started = Instant::now();
        while self.logs().matches(text).count() < n {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the gateway never logged {text:?} {n} times: {}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGTERM, then the exit code.
    pub async fn stop(&mut self) -> i32 {
        self.process.stop(Duration::from_secs(30)).await
    }

    /// What the gateway logged so far.
    pub fn logs(&self) -> String {
        self.process.logs()
    }

    /// Waits until `chat` got at least `n` messages, and returns them.
    pub async fn replies(&self, chat: i64, n: usize) -> Vec<SentMessage> {
        let started = Instant::now();
        loop {
            let sent = self.telegram.sent_to(chat);
            if sent.len() >= n {
                return sent;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "chat {chat} got {} of {n} replies: {sent:?}\n{}",
                sent.len(),
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
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

/// `[telegram]` against `telegram`, with `users` allowed.
pub fn telegram_section(telegram: &FakeTelegram, users: &[i64]) -> String {
    let users: Vec<String> = users.iter().map(|id| format!("\"{id}\"")).collect();
    format!(
        "[telegram]\napi_url = \"{}\"\nallowed_users = [{}]\n",
        telegram.api_url(),
        users.join(", ")
    )
}

/// Gives the gateway a moment to (not) do something.
pub async fn settle() {
    tokio::time::sleep(Duration::from_millis(400)).await;
}
