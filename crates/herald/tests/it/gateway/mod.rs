//! `herald gateway` as a real child process, against the fake Telegram Bot API (driven by the
//! real teloxide client inside herald) and the fake model.

mod auth;
mod compression;
mod conversation;
mod delivery;
mod discord;
mod health;
mod notify;
mod poison;
mod reload;
mod restart;
mod slack;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use herald_fakes::FakeModel;
use herald_fakes::telegram::{FakeTelegram, SentMessage};
use herald_store::{Store, StoreOptions};

use crate::common::World;

/// Users on the allowlist of every test daemon.
pub const ALLOWED: [i64; 3] = [1001, 1002, 1003];

/// A gateway child process with its fakes.
pub struct Daemon {
    pub world: World,
    pub telegram: FakeTelegram,
    pub model: FakeModel,
    child: Option<Child>,
    log: std::path::PathBuf,
    /// Extra environment variables for the gateway process.
    env: Vec<(String, String)>,
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
        let allowed: Vec<String> = ALLOWED.iter().map(|id| format!("\"{id}\"")).collect();
        let config = format!(
            "[model]\nbase_url = \"{}\"\nmodel = \"fake-model\"\nrequest_timeout_s = 5\n\
             [gateway]\ndrain_timeout_s = 10\n{extra_gateway}\n\
             [telegram]\napi_url = \"{}\"\nallowed_users = [{}]\n",
            model.base_url(),
            telegram.api_url(),
            allowed.join(", ")
        );
        let mut world = World::with_config(&config);
        world.env("TELEGRAM_BOT_TOKEN", FakeTelegram::TOKEN);
        let log = world.dir().join("gateway.log");
        let env = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        let mut daemon = Daemon { world, telegram, model, child: None, log, env };
        daemon.spawn().await;
        daemon
    }

    /// Starts the gateway process and waits until it polls the fake.
    pub async fn spawn(&mut self) {
        let polls = self.telegram.get_updates_offsets().len();
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_herald"));
        command
            .arg("gateway")
            .env_clear()
            .env("HOME", self.world.dir().join("home"))
            .env("HERALD_CONFIG", &self.world.config)
            .env("TELEGRAM_BOT_TOKEN", FakeTelegram::TOKEN)
            .env("RUST_LOG", "info")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        self.child = Some(command.spawn().expect("starting herald gateway"));
        let started = Instant::now();
        while self.telegram.get_updates_offsets().len() <= polls {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the gateway never polled: {}",
                self.logs()
            );
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("the gateway exited with {status}: {}", self.logs());
            }
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

    /// The gateway process's id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("a running gateway").id()
    }

    /// Sends a signal (`HUP`, `TERM`) to the gateway process.
    pub fn signal(&self, name: &str) {
        let pid = self.pid().to_string();
        let status = Command::new("kill").args([&format!("-{name}"), &pid]).status().expect("kill");
        assert!(status.success(), "kill -{name} {pid} failed");
    }

    /// Whether the gateway process is still running.
    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| c.try_wait().unwrap().is_none())
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
        let mut child = self.child.take().expect("a running gateway");
        let pid = child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().expect("kill");
        let started = Instant::now();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status.code().unwrap_or(-1);
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the gateway did not stop: {}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// What the gateway logged so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
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

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Gives the gateway a moment to (not) do something.
pub async fn settle() {
    tokio::time::sleep(Duration::from_millis(400)).await;
}
