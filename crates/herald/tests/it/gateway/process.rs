//! The `herald gateway` child process every gateway harness runs: started in a test's world
//! with every fake's tokens, its stderr kept in a log file across restarts, stopped with
//! SIGTERM, and killed when the test ends so that a failing test leaves no daemon behind.

use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use herald_fakes::discord::FakeDiscord;
use herald_fakes::slack::FakeSlack;
use herald_fakes::telegram::FakeTelegram;

use crate::common::World;

/// One gateway process at a time in one world, and the log of all of them.
pub struct GatewayProcess {
    child: Option<Child>,
    log: PathBuf,
    /// Extra environment variables, set after the tokens (so they can override them).
    env: Vec<(String, String)>,
}

impl GatewayProcess {
    /// No process yet; the log is `gateway.log` in `world`.
    pub fn new(world: &World, env: &[(&str, &str)]) -> GatewayProcess {
        let env = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        GatewayProcess { child: None, log: world.dir().join("gateway.log"), env }
    }

    /// Starts `herald gateway` in `world` without waiting for anything.
    pub fn launch(&mut self, world: &World) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_herald"));
        command
            .arg("gateway")
            .env_clear()
            .env("HOME", world.dir().join("home"))
            .env("HERALD_CONFIG", &world.config)
            .env("TELEGRAM_BOT_TOKEN", FakeTelegram::TOKEN)
            .env("DISCORD_BOT_TOKEN", FakeDiscord::TOKEN)
            .env("SLACK_BOT_TOKEN", FakeSlack::BOT_TOKEN)
            .env("SLACK_APP_TOKEN", FakeSlack::APP_TOKEN)
            .env("RUST_LOG", "info")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        self.child = Some(command.spawn().expect("starting herald gateway"));
    }

    /// How the process ended, once it has; `None` while it runs or when none was started.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.as_mut().and_then(|child| child.try_wait().unwrap())
    }

    /// Panics with `what` and the log when the process has exited.
    pub fn assert_running(&mut self, what: &str) {
        if let Some(status) = self.exited() {
            panic!("{what}: the gateway exited with {status}: {}", self.logs());
        }
    }

    /// The running process's id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("a running gateway").id()
    }

    /// Sends a signal (`HUP`, `TERM`, `KILL`) to the process.
    pub fn signal(&self, name: &str) {
        let pid = self.pid().to_string();
        let status = Command::new("kill").args([&format!("-{name}"), &pid]).status().expect("kill");
        assert!(status.success(), "kill -{name} {pid} failed");
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.child.is_some() && self.exited().is_none()
    }

    /// SIGTERM (unless it ended already), then the exit code once it ended within `patience`.
    pub async fn stop(&mut self, patience: Duration) -> i32 {
        let mut child = self.child.take().expect("a running gateway");
        if child.try_wait().unwrap().is_none() {
            let pid = child.id().to_string();
            Command::new("kill").args(["-TERM", &pid]).status().expect("kill");
        }
        let started = Instant::now();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status.code().unwrap_or(-1);
            }
            assert!(started.elapsed() < patience, "the gateway did not stop: {}", self.logs());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// What the gateway logged so far, across its starts.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
