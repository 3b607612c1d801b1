//! A temporary home for one test, the `herald` binary to run in it, and a seeded store.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use herald_core::Platform;
use herald_store::{NewMessage, NewSession, Store, StoreOptions};
use serde_json::json;
use tempfile::TempDir;

/// One test's world: a directory holding the config, the store and the home directory.
pub struct World {
    dir: TempDir,
    /// The config file HERALD_CONFIG points at.
    pub config: PathBuf,
    /// The store's database file.
    pub db: PathBuf,
    extra_env: Vec<(String, String)>,
    config_var: bool,
}

/// What a run of the binary did.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Asserts success and returns stdout.
    #[track_caller]
    pub fn ok(self) -> String {
        assert_eq!(self.code, 0, "herald failed: {self:?}");
        self.stdout
    }

    /// Asserts this exit code and exactly one line on stderr, and returns that line.
    #[track_caller]
    pub fn fails(self, code: i32) -> String {
        assert_eq!(self.code, code, "{self:?}");
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "expected one line on stderr: {self:?}");
        assert!(lines[0].starts_with("error: "), "{self:?}");
        lines[0].to_owned()
    }
}

impl World {
    /// A world whose config only sets the store path.
    pub fn new() -> World {
        World::with_config("")
    }

    /// A world whose config sets the store path and then `extra`.
    pub fn with_config(extra: &str) -> World {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let db = dir.path().join("data").join("state.db");
        let config = dir.path().join("config.toml");
        let text = format!("[store]\npath = \"{}\"\n{extra}", db.display());
        std::fs::write(&config, text).expect("writing the config");
        World { dir, config, db, extra_env: Vec::new(), config_var: true }
    }

    /// The temporary directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Sets an extra environment variable for every later run.
    pub fn env(&mut self, name: &str, value: &str) {
        self.extra_env.push((name.to_owned(), value.to_owned()));
    }

    /// A copy of this world's settings with `USER` set, as the person at the terminal.
    pub fn env_for(&self, user: &str) -> WorldView<'_> {
        WorldView { world: self, user: user.to_owned() }
    }

    /// Leaves HERALD_CONFIG unset in later runs, so herald looks for its config itself.
    pub fn unset_config_var(&mut self) {
        self.config_var = false;
    }

    /// Runs `herald ARGS` with nothing from the real environment.
    pub fn herald(&self, args: &[&str]) -> Run {
        self.herald_with_input(args, None)
    }

    /// Runs `herald ARGS` with `input` piped to its stdin.
    pub fn herald_input(&self, args: &[&str], input: &str) -> Run {
        self.herald_with_input(args, Some(input))
    }

    fn herald_with_input(&self, args: &[&str], input: Option<&str>) -> Run {
        self.run_as(args, input, None)
    }

    fn run_as(&self, args: &[&str], input: Option<&str>, user: Option<&str>) -> Run {
        let home = self.dir.path().join("home");
        let mut command = Command::new(env!("CARGO_BIN_EXE_herald"));
        command
            .args(args)
            .env_clear()
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("XDG_DATA_HOME", home.join(".local/share"))
            .env("TZ", "UTC")
            .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if self.config_var {
            command.env("HERALD_CONFIG", &self.config);
        }
        for (name, value) in &self.extra_env {
            command.env(name, value);
        }
        if let Some(user) = user {
            command.env("USER", user);
        }
        let mut child = command.spawn().expect("running herald");
        if let Some(input) = input {
            use std::io::Write;
            let mut stdin = child.stdin.take().expect("a piped stdin");
            // herald may exit before it reads (a config error, say): a closed pipe then
            // is its answer, not the test's failure.
            if let Err(error) = stdin.write_all(input.as_bytes()) {
                assert_eq!(error.kind(), std::io::ErrorKind::BrokenPipe, "writing herald's stdin");
            }
        }
        let output = child.wait_with_output().expect("running herald");
        Run {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8(output.stdout).expect("utf-8 stdout"),
            stderr: String::from_utf8(output.stderr).expect("utf-8 stderr"),
        }
    }

    /// Runs `f` on the world's store, opened and closed around it.
    pub fn with_store<T>(&self, f: impl AsyncFnOnce(&Store) -> T) -> T {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        runtime.block_on(async {
            let store =
                Store::open(StoreOptions::new(&self.db)).await.expect("opening the test store");
            let value = f(&store).await;
            store.close().await;
            value
        })
    }

    /// Seeds three sessions, oldest first: a titled Telegram chat with a tool call, a
    /// terminal chat, and a Discord session continuing the Telegram one.
    pub fn seed(&self) -> Seeded {
        self.with_store(async |store| {
            let mut telegram = NewSession::new(Platform::Telegram, "You are Herald.");
            telegram.user_id = Some("42".into());
            telegram.chat_id = Some("42".into());
            telegram.chat_type = Some("dm".into());
            let telegram = store.create_session(&telegram).await.expect("seeding the store");
            store.rename_session(&telegram.id, "deploy notes").await.expect("seeding the store");
            let calls = json!([{"id": "call_1", "type": "function", "function":
                {"name": "session_search", "arguments": "{\"query\": \"deploy\"}"}}]);
            let result: Vec<String> = (1..=10).map(|i| format!("result line {i}")).collect();
            let turn = vec![
                NewMessage::user("TODO: fix the deploy script"),
                NewMessage::assistant("").with_tool_calls(calls),
                NewMessage::tool("call_1", "session_search", result.join("\n")),
                NewMessage::assistant("Fixed it: the script now checks the exit code."),
            ];
            store.append_messages(&telegram.id, turn).await.expect("seeding the store");

            let cli = store
                .create_session(&NewSession::new(Platform::Cli, "You are Herald."))
                .await
                .expect("seeding the store");
            let turn =
                vec![NewMessage::user("hello there"), NewMessage::assistant("hi, what's up")];
            store.append_messages(&cli.id, turn).await.expect("seeding the store");

            let mut discord = NewSession::new(Platform::Discord, "You are Herald, on Discord.");
            discord.user_id = Some("7".into());
            discord.parent_session_id = Some(telegram.id.clone());
            let discord = store.create_session(&discord).await.expect("seeding the store");
            let turn = vec![NewMessage::user("chat-send is broken again")];
            store.append_messages(&discord.id, turn).await.expect("seeding the store");
            Seeded { telegram: telegram.id, cli: cli.id, discord: discord.id }
        })
    }
}

impl World {
    /// A chain of three terminal sessions as context compression leaves it, titled `trip`,
    /// `trip #2` and `trip #3`, each mentioning a walrus once. Returns their ids, oldest first.
    pub fn chain(&self) -> [String; 3] {
        self.with_store(async |store| {
            let mut new = NewSession::new(Platform::Cli, "You are Herald.");
            new.user_id = Some("ada".into());
            let first = store.create_session(&new).await.expect("seeding the store");
            store.rename_session(&first.id, "trip").await.expect("seeding the store");
            let turn = vec![NewMessage::user("pack the walrus kit"), NewMessage::assistant("ok")];
            store.append_messages(&first.id, turn).await.expect("seeding the store");
            let mut ids = vec![first.id];
            for summary in ["the walrus kit is packed", "tickets booked for the walrus"] {
                let parent = ids.last().expect("a session").clone();
                let messages = vec![
                    NewMessage::user(format!("Summary of the conversation so far: {summary}")),
                    NewMessage::assistant("noted"),
                ];
                let child = store.compress_session(&parent, messages, 100).await;
                ids.push(child.expect("compressing a seeded session").id);
            }
            ids.try_into().expect("three sessions")
        })
    }
}

/// A world run as one terminal user.
pub struct WorldView<'a> {
    world: &'a World,
    user: String,
}

impl WorldView<'_> {
    /// Runs `herald ARGS` as this user with `input` on stdin.
    pub fn herald_input(&mut self, args: &[&str], input: &str) -> Run {
        self.world.run_as(args, Some(input), Some(&self.user))
    }
}

/// The ids of the seeded sessions.
pub struct Seeded {
    pub telegram: String,
    pub cli: String,
    pub discord: String,
}

/// Parses stdout as JSON.
#[track_caller]
pub fn json(stdout: &str) -> serde_json::Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

/// The `id` of each object of a JSON array.
#[track_caller]
pub fn ids(value: &serde_json::Value) -> Vec<String> {
    let items = value.as_array().expect("a JSON array");
    items.iter().map(|s| s["id"].as_str().expect("an id").to_owned()).collect()
}
