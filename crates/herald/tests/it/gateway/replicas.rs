//! Several `herald gateway` replicas on one PostgreSQL store, against the three fakes: Telegram
//! in webhook mode behind a load balancer, Discord with two shards, Slack with every replica's
//! sockets open. Every message answered once and in order, whichever replica received it; a
//! replica killed in the middle of the load leaves nothing unanswered; two replicas receiving
//! one conversation's messages at once run it one turn at a time; a command that takes a
//! session over waits for what another replica queued; and a store that goes away for ten
//! seconds loses nothing.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use herald_core::{ChatKind, ChatRef, Platform, UserRef};
use herald_fakes::FakeModel;
use herald_fakes::balancer::Balancer;
use herald_fakes::discord::{FakeDiscord, InboundMessage};
use herald_fakes::slack::FakeSlack;
use herald_fakes::telegram::FakeTelegram;
use herald_store::{Store, StoreOptions};

use super::discord::discord_section;
use super::process::GatewayProcess;
use super::slack::slack_section;
use super::telegram_section;
use crate::common::World;

/// The longest wait for anything the replicas should do (a busy machine, three daemons).
const PATIENCE: Duration = Duration::from_secs(90);
/// Discord's shards in these tests.
const SHARDS: u64 = 2;

/// A port nobody listens on right now.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Who writes: 20 Telegram users, 15 Discord users (DMs, shard 0, and a server channel each
/// on shard 1), 15 Slack users. 50 chats.
struct People {
    telegram: Vec<i64>,
    discord: Vec<u64>,
    slack: Vec<String>,
}

impl People {
    fn new(telegram: usize, discord: usize, slack: usize) -> People {
        People {
            telegram: (0..telegram as i64).map(|i| 1001 + i).collect(),
            discord: (0..discord as u64).map(|i| 3001 + i).collect(),
            slack: (0..slack).map(|i| format!("U{}", 5001 + i)).collect(),
        }
    }

    fn chats(&self) -> usize {
        self.telegram.len() + self.discord.len() + self.slack.len()
    }
}

/// The fakes, the store and N replicas.
struct Replicas {
    telegram: FakeTelegram,
    discord: FakeDiscord,
    slack: FakeSlack,
    model: FakeModel,
    balancer: Balancer,
    people: People,
    store: StoreOptions,
    worlds: Vec<World>,
    processes: Vec<GatewayProcess>,
}

impl Replicas {
    /// The fakes, a new database, and `n` replicas started and serving.
    async fn start(n: usize, people: People, store_url: String, password: String) -> Replicas {
        let telegram = FakeTelegram::start().await;
        let discord = FakeDiscord::start().await;
        discord.set_shards(SHARDS);
        let (slack, model) = (FakeSlack::start().await, FakeModel::start().await);
        let ports: Vec<u16> = (0..n).map(|_| free_port()).collect();
        let backends = ports.iter().map(|p| format!("http://127.0.0.1:{p}")).collect();
        let balancer = Balancer::start(backends).await.unwrap();
        let mut worlds = Vec::new();
        let mut processes = Vec::new();
        for port in &ports {
            let world = World::new();
            let config = format!(
                "[store]\nurl = \"{store_url}\"\n\
                 [model]\nbase_url = \"{}\"\nmodel = \"fake-model\"\nrequest_timeout_s = 10\n\
                 [gateway]\ndrain_timeout_s = 10\n\
                 {}webhook_url = \"{}/telegram\"\nwebhook_listen = \"127.0.0.1:{port}\"\n\
                 {}shards = {SHARDS}\n{}",
                model.base_url(),
                telegram_section(&telegram, &people.telegram),
                balancer.url(),
                discord_section(&discord, &people.discord),
                slack_section(&slack, &people.slack),
            );
            std::fs::write(&world.config, config).unwrap();
            let process = GatewayProcess::new(&world, &[("HERALD_STORE_PASSWORD", &password)]);
            worlds.push(world);
            processes.push(process);
        }
        let store = StoreOptions::postgres(store_url, Some(password.clone()));
        let mut r = Replicas {
            telegram,
            discord,
            slack,
            model,
            balancer,
            people,
            store,
            worlds,
            processes,
        };
        for i in 0..n {
            r.processes[i].launch(&r.worlds[i]);
        }
        r.until("the replicas never came up", |r| {
            r.telegram.webhook_url().is_some()
                && r.shards_held()
                && r.slack.open_connections() >= r.processes.len()
        })
        .await;
        r
    }

    /// A new database on the test server, and its password.
    async fn database() -> (String, String) {
        let url = herald_store::scratch::fresh_database().await;
        (url, herald_store::scratch::password().unwrap_or_default())
    }

    /// Whether every Discord shard has exactly one connection.
    fn shards_held(&self) -> bool {
        let connections = self.discord.connections();
        (0..SHARDS).all(|shard| connections.iter().filter(|c| c[0] == shard).count() == 1)
    }

    /// Waits until `done` holds, failing with `what` and the logs after [`PATIENCE`].
    async fn until(&mut self, what: &str, done: impl Fn(&Replicas) -> bool) {
        let started = Instant::now();
        while !done(self) {
            assert!(started.elapsed() < PATIENCE, "{what}:\n{}", self.logs());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn logs(&self) -> String {
        let mut all = String::new();
        for (i, process) in self.processes.iter().enumerate() {
            let log = process.logs();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            all.push_str(&format!("--- replica {i} ---\n{}\n", tail.join("\n")));
        }
        all
    }

    /// Message `m` of every chat: a Telegram DM, a Discord DM (even users) or server message
    /// (odd users, in a server on the other shard), a Slack DM.
    fn send_round(&self, m: usize) {
        for &user in &self.people.telegram {
            self.telegram.dm(user, &format!("telegram {user} m{m}"));
        }
        for &user in &self.people.discord {
            let text = format!("discord {user} m{m}");
            self.discord.inject_message(self.discord_message(user, &text));
        }
        for user in &self.people.slack {
            self.slack.dm(user, &format!("slack {user} m{m}"));
        }
    }

    fn discord_message(&self, user: u64, text: &str) -> InboundMessage {
        if user.is_multiple_of(2) {
            return InboundMessage::dm(user, text);
        }
        let guild = FakeDiscord::guild_on_shard(1, SHARDS, user);
        InboundMessage::channel(guild, user, user, text).mentioning_bot()
    }

    /// Every chat's answers, as texts, in the order the platforms got them.
    fn answers(&self) -> HashMap<String, Vec<String>> {
        let mut all = HashMap::new();
        for &user in &self.people.telegram {
            let got = self.telegram.sent_to(user).into_iter().map(|m| m.text).collect();
            all.insert(format!("telegram {user}"), got);
        }
        let sent = self.discord.sent();
        for &user in &self.people.discord {
            let channel = match user % 2 {
                0 => FakeDiscord::dm_channel(user),
                _ => user,
            };
            let got = sent.iter().filter(|m| m.channel_id == channel).map(|m| m.content.clone());
            all.insert(format!("discord {user}"), got.collect());
        }
        for user in &self.people.slack {
            let posted = self.slack.posted_in(&FakeSlack::dm_channel(user));
            all.insert(format!("slack {user}"), posted.into_iter().map(|p| p.text).collect());
        }
        all
    }

    /// Whether every chat has at least `n` answers.
    fn answered(&self, n: usize) -> bool {
        self.answers().values().all(|got| got.len() >= n)
    }

    /// Waits until every chat has at least `n` answers; on failure names the chats short of it.
    async fn until_answered(&mut self, n: usize, what: &str) {
        let started = Instant::now();
        while !self.answered(n) {
            if started.elapsed() > PATIENCE {
                let short: Vec<String> = self
                    .answers()
                    .into_iter()
                    .filter(|(_, got)| got.len() < n)
                    .map(|(chat, got)| format!("{chat}: {got:?}"))
                    .collect();
                let ids: Vec<String> = short
                    .iter()
                    .filter_map(|c| c.split([' ', ':']).nth(1).map(str::to_owned))
                    .collect();
                let mut related = String::new();
                for (i, process) in self.processes.iter().enumerate() {
                    for line in process.logs().lines() {
                        if !line.contains("Sequence off")
                            && ids.iter().any(|id| line.contains(id.as_str()))
                        {
                            related.push_str(&format!("[{i}] {line}\n"));
                        }
                    }
                }
                let store = Store::open(self.store.clone()).await.unwrap();
                let mut stored = String::new();
                for session in store.list_sessions(&Default::default()).await.unwrap() {
                    let key = session.session_key.clone().unwrap_or_default();
                    if ids.iter().any(|id| key.contains(id.as_str())) {
                        let history = store.history(&session.id).await.unwrap();
                        let texts: Vec<&str> = history.iter().map(|m| m.content.as_str()).collect();
                        stored.push_str(&format!("{key}: {texts:?}\n"));
                    }
                }
                let undelivered = store.undelivered().await.unwrap();
                let queued = store.queued_inbound().await.unwrap();
                stored.push_str(&format!("undelivered: {undelivered:?}\nqueued: {queued:?}\n"));
                panic!("{what}: short of {n} answers: {short:#?}\n{stored}\n{related}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Checks that every chat got `echo: <chat> m0..mN` in order; answers that came twice in a
    /// row (a reply resent after its replica died between sending and recording it) are
    /// counted and returned.
    fn check_in_order(&self, rounds: usize) -> usize {
        let mut repeated = 0;
        for (chat, got) in self.answers() {
            let mut deduped: Vec<String> = Vec::new();
            for text in got {
                if deduped.last() == Some(&text) {
                    eprintln!("sent twice: {chat}: {text}");
                    repeated += 1;
                } else {
                    deduped.push(text);
                }
            }
            let expected: Vec<String> = (0..rounds).map(|m| format!("echo: {chat} m{m}")).collect();
            assert_eq!(deduped, expected, "{chat}: answered once each, in order\n{}", self.logs());
        }
        repeated
    }

    /// Sends the rounds `from..to`, each once every chat's previous message was answered (as
    /// people wait for an answer), calling `between(round)` before each round is sent.
    async fn converse(&mut self, from: usize, to: usize) {
        for m in from..to {
            self.send_round(m);
            self.until_answered(m + 1, &format!("round {m} was not answered everywhere")).await;
        }
    }

    /// Stops every replica still running (SIGTERM, so they drain).
    async fn stop(&mut self) {
        for process in &mut self.processes {
            if process.is_running() {
                process.stop(PATIENCE).await;
            }
        }
        self.balancer.shutdown();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_answer_fifty_chats_once_each_in_order() {
    let (url, password) = Replicas::database().await;
    let mut r = Replicas::start(3, People::new(20, 15, 15), url, password).await;
    assert_eq!(r.people.chats(), 50);
    r.converse(0, 10).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let repeated = r.check_in_order(10);
    assert_eq!(repeated, 0, "nothing was sent twice with every replica alive");
    // Telegram's updates went through the balancer to all three replicas.
    let posts = r.telegram.webhook_posts();
    assert!(posts.len() >= 200, "{} webhook posts", posts.len());
    // The work was shared: each replica started some of the conversations.
    for (i, process) in r.processes.iter().enumerate() {
        assert!(process.logs().contains("session started"), "replica {i} ran no session");
    }
    let store = Store::open(r.store.clone()).await.unwrap();
    let sessions = store.list_sessions(&Default::default()).await.unwrap();
    assert_eq!(sessions.len(), 50, "one session per chat");
    store.close().await;
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_killed_mid_load_leaves_nothing_unanswered_or_answered_twice() {
    let (url, password) = Replicas::database().await;
    let mut r = Replicas::start(3, People::new(20, 15, 15), url, password).await;
    r.converse(0, 3).await;
    // The model slows down so that turns are running everywhere when the replica dies.
    r.model.set_latency(Duration::from_millis(300));
    r.send_round(3);
    r.until("round 3 never reached the model", |r| r.model.request_count() >= 50 * 3 + 10).await;
    r.processes[0].signal("KILL");
    let killed_at = Instant::now();
    r.until_answered(4, "round 3 was not answered after the kill").await;
    r.model.set_latency(Duration::ZERO);
    r.converse(4, 10).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let repeated = r.check_in_order(10);
    // Only replies in flight when the replica died may come twice: at most one per chat, and
    // only on the platforms with no idempotency key (Discord's nonce absorbs its own).
    assert!(repeated <= 50, "{repeated} answers repeated");
    eprintln!(
        "replies sent twice after the kill: {repeated}; recovered in {:?}",
        killed_at.elapsed()
    );
    // The dead replica's shards are held by the others now, one connection each.
    r.until("a shard was not taken over", Replicas::shards_held).await;
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_receiving_one_conversation_at_once_run_it_one_turn_at_a_time() {
    let (url, password) = Replicas::database().await;
    let mut r = Replicas::start(2, People::new(1, 1, 1), url, password).await;
    // Slack spreads envelopes over every open connection, both replicas': the messages of one
    // DM arrive on both at the same moment.
    r.model.set_latency(Duration::from_millis(100));
    let user = r.people.slack[0].clone();
    for m in 0..12 {
        r.slack.dm(&user, &format!("slack {user} m{m}"));
    }
    let channel = FakeSlack::dm_channel(&user);
    r.until("not all 12 were answered", |r| r.slack.posted_in(&channel).len() >= 12).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(r.slack.posted_in(&channel).len(), 12, "each answered once");

    // The session's history alternates question and answer: no two turns overlapped, and the
    // answers went out in the order the questions were taken.
    let store = Store::open(r.store.clone()).await.unwrap();
    let key = format!("slack:dm:{channel}");
    let sessions = store.list_sessions(&Default::default()).await.unwrap();
    let session = sessions.iter().find(|s| s.source == Platform::Slack).expect("the Slack session");
    let history = store.history(&session.id).await.unwrap();
    let texts: Vec<String> = history.iter().map(|m| m.content.clone()).collect();
    assert_eq!(history.len(), 24, "{key}: {texts:#?}");
    for pair in history.chunks(2) {
        assert_eq!(pair[1].content, format!("echo: {}", pair[0].content), "{texts:#?}");
    }
    let answered: Vec<String> =
        history.iter().skip(1).step_by(2).map(|m| m.content.clone()).collect();
    let posted: Vec<String> = r.slack.posted_in(&channel).into_iter().map(|p| p.text).collect();
    assert_eq!(posted, answered, "answers posted in the order of the history");
    store.close().await;
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_command_that_starts_a_session_here_waits_for_what_another_replica_queued() {
    let (url, password) = Replicas::database().await;
    let mut r = Replicas::start(1, People::new(1, 0, 0), url, password).await;
    let user = r.people.telegram[0];
    // Another replica stored a question for this chat and died before answering it; the
    // person then writes /new here. The question is answered first, in the old session.
    let store = Store::open(r.store.clone()).await.unwrap();
    let chat = ChatRef {
        platform: Platform::Telegram,
        id: user.to_string(),
        kind: ChatKind::Direct,
        thread: None,
    };
    let key = format!("telegram:dm:{user}");
    let person = UserRef::new(user.to_string());
    let question = "¿sigues ahí? 还在吗";
    let queued = store.queue_inbound(&key, "elsewhere-1", &chat, &person, question).await;
    queued.unwrap().expect("queued");
    r.telegram.dm(user, "/new");
    r.until("the question and /new were not both answered", |r| {
        r.telegram.sent_to(user).len() >= 2
    })
    .await;
    let sent: Vec<String> = r.telegram.sent_to(user).into_iter().map(|m| m.text).collect();
    assert_eq!(sent[0], "echo: ¿sigues ahí? 还在吗", "{sent:#?}");
    assert!(sent[1].starts_with("Started a new conversation"), "{sent:#?}");
    let sessions = store.list_sessions(&Default::default()).await.unwrap();
    assert_eq!(sessions.len(), 2, "{sessions:#?}");
    let ended = sessions.iter().find(|s| s.ended_at.is_some()).expect("the old session ended");
    let history = store.history(&ended.id).await.unwrap();
    let texts: Vec<&str> = history.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(texts, ["¿sigues ahí? 还在吗", "echo: ¿sigues ahí? 还在吗"]);
    store.close().await;
    r.stop().await;
}

/// A throwaway PostgreSQL server of this test's own, which it can stop and start.
struct OwnServer {
    dir: PathBuf,
    url: String,
    password: String,
}

impl OwnServer {
    fn script() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/pg-throwaway")
    }

    fn start() -> OwnServer {
        let dir = tempfile::Builder::new().prefix("herald-pg-own").tempdir().unwrap().keep();
        let out = Command::new(Self::script()).arg("start").arg(&dir).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8(out.stdout).unwrap();
        let value = |name: &str| {
            let line = text.lines().find(|l| l.contains(name)).unwrap();
            line.split('\'').nth(1).unwrap().to_owned()
        };
        OwnServer { dir, url: value("HERALD_TEST_PG"), password: value("HERALD_STORE_PASSWORD") }
    }

    fn run(&self, what: &str) {
        let status = Command::new(Self::script()).arg(what).arg(&self.dir).status().unwrap();
        assert!(status.success(), "pg-throwaway {what}");
    }
}

/// Waits until `done` holds, failing with `what` and the log after [`PATIENCE`] or when the
/// gateway exited.
async fn wait_for(what: &str, done: impl Fn() -> bool, process: &mut GatewayProcess) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < PATIENCE, "{what}: {}", process.logs());
        process.assert_running(what);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        let _ = Command::new(Self::script()).arg("stop").arg(&self.dir).status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_store_gone_for_ten_seconds_is_waited_for_reported_and_loses_nothing() {
    let server = OwnServer::start();
    let health = free_port();
    let telegram = FakeTelegram::start().await;
    let model = FakeModel::start().await;
    let world = World::new();
    let config = format!(
        "[store]\nurl = \"{}\"\nwrite_patience_ms = 2000\n\
         [model]\nbase_url = \"{}\"\nmodel = \"fake-model\"\n\
         [gateway]\nhealth_listen = \"127.0.0.1:{health}\"\n{}",
        server.url,
        model.base_url(),
        telegram_section(&telegram, &[1001, 1002])
    );
    std::fs::write(&world.config, config).unwrap();
    let mut process = GatewayProcess::new(&world, &[("HERALD_STORE_PASSWORD", &server.password)]);
    process.launch(&world);
    let healthz = format!("http://127.0.0.1:{health}/healthz");
    let answers =
        |user: i64| telegram.sent_to(user).into_iter().map(|m| m.text).collect::<Vec<_>>();
    telegram.dm(1001, "before");
    wait_for("the first message was not answered", || answers(1001).len() == 1, &mut process).await;

    server.run("pause");
    let down = Instant::now();
    for text in ["during one", "during two"] {
        telegram.dm(1001, text);
    }
    telegram.dm(1002, "during three");
    // /healthz says the store is failing while it is down.
    let mut reported = None;
    while down.elapsed() < Duration::from_secs(10) {
        if let Ok(response) = reqwest::get(&healthz).await {
            let code = response.status().as_u16();
            let body: serde_json::Value = response.json().await.unwrap_or_default();
            if code == 503 && body["store"]["ok"] == false {
                reported = Some(body);
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let reported =
        reported.unwrap_or_else(|| panic!("/healthz never reported the store: {}", process.logs()));
    assert_eq!(reported["status"], "failed", "{reported}");
    process.assert_running("the gateway gave up while the store was down");
    assert_eq!(answers(1001).len(), 1, "nothing answered without the store");

    server.run("resume");
    wait_for(
        "the messages sent during the outage were not answered",
        || answers(1001).len() == 3 && answers(1002).len() == 1,
        &mut process,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(answers(1001), ["echo: before", "echo: during one", "echo: during two"]);
    assert_eq!(answers(1002), ["echo: during three"]);
    let started = Instant::now();
    loop {
        let response = reqwest::get(&healthz).await.unwrap();
        let code = response.status().as_u16();
        let body = response.text().await.unwrap_or_default();
        if code == 200 {
            break;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "/healthz stayed unhealthy: {body}\n{}",
            process.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(process.stop(PATIENCE).await, 0, "{}", process.logs());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn doctor_checks_the_postgres_connection_schema_and_extensions() {
    let (url, password) = Replicas::database().await;
    // The first replica to start migrates the database; doctor then finds it current.
    Store::open(StoreOptions::postgres(url.clone(), Some(password.clone())))
        .await
        .unwrap()
        .close()
        .await;
    let world = World::new();
    std::fs::write(&world.config, format!("[store]\nurl = \"{url}\"\n")).unwrap();
    let doctor = |password: &str| {
        Command::new(env!("CARGO_BIN_EXE_herald"))
            .arg("doctor")
            .env_clear()
            .env("HOME", world.dir())
            .env("HERALD_CONFIG", &world.config)
            .env("HERALD_STORE_PASSWORD", password)
            .output()
            .unwrap()
    };
    let out = doctor(&password);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    for line in ["ok    server    PostgreSQL", "ok    schema", "ok    extension", "ok    search"] {
        assert!(text.contains(line), "{line} in:\n{text}");
    }
    // A wrong password fails the store check in one line, without the password.
    let out = doctor("not-the-password");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    let store = text.lines().find(|l| l.contains("store")).unwrap();
    assert!(store.starts_with("FAIL"), "{text}");
    assert!(!text.contains("not-the-password") && !text.contains(&password), "{text}");
}

/// Ends every database connection that holds a claim or a session's lock (advisory locks).
async fn cut_claim_connections(url: &str, password: &str) -> u64 {
    use sqlx::ConnectOptions;
    let options: sqlx::postgres::PgConnectOptions = url.parse().unwrap();
    let mut conn = options.password(password).connect().await.unwrap();
    let ended: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_locks
         WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid()",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    ended.len() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_whose_polling_another_took_over_reports_healthy() {
    let (url, password) = Replicas::database().await;
    let telegram = FakeTelegram::start().await;
    let model = FakeModel::start().await;
    let ports = [free_port(), free_port()];
    let mut worlds = Vec::new();
    let mut processes = Vec::new();
    for port in ports {
        let world = World::new();
        let config = format!(
            "[store]\nurl = \"{url}\"\n\
             [model]\nbase_url = \"{}\"\nmodel = \"fake-model\"\n\
             [gateway]\ndrain_timeout_s = 10\nhealth_listen = \"127.0.0.1:{port}\"\n{}",
            model.base_url(),
            telegram_section(&telegram, &[1001]),
        );
        std::fs::write(&world.config, config).unwrap();
        processes.push(GatewayProcess::new(&world, &[("HERALD_STORE_PASSWORD", &password)]));
        worlds.push(world);
    }
    let healthy = |port: u16| async move {
        let response = reqwest::get(format!("http://127.0.0.1:{port}/healthz")).await;
        match response {
            Ok(response) => (response.status().as_u16(), response.text().await.unwrap_or_default()),
            Err(e) => (0, e.to_string()),
        }
    };
    // The first replica polls; the second only sends.
    processes[0].launch(&worlds[0]);
    let polls = || telegram.get_updates_offsets().len();
    wait_for("the first replica never polled", || polls() > 0, &mut processes[0]).await;
    processes[1].launch(&worlds[1]);
    for (i, port) in ports.iter().enumerate() {
        let started = Instant::now();
        while healthy(*port).await.0 != 200 {
            assert!(started.elapsed() < PATIENCE, "replica {i} never healthy");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    // The poller's claim goes with its connection; cut until the other replica, not the
    // first one again, takes polling over.
    let holds = |p: &GatewayProcess| p.logs().matches("holds the poller claim").count();
    let started = Instant::now();
    while holds(&processes[1]) == 0 {
        assert!(started.elapsed() < PATIENCE, "no takeover: {}", processes[1].logs());
        let before = holds(&processes[0]);
        assert!(cut_claim_connections(&url, &password).await >= 1);
        while holds(&processes[0]) == before && holds(&processes[1]) == 0 {
            assert!(started.elapsed() < PATIENCE, "nobody polls: {}", processes[0].logs());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    telegram.dm(1001, "after the takeover");
    let answered = || telegram.sent_to(1001).iter().any(|m| m.text == "echo: after the takeover");
    wait_for("nobody answered after the takeover", answered, &mut processes[1]).await;
    assert!(processes[0].logs().contains("telegram polling paused"), "{}", processes[0].logs());

    // Both replicas do what they are responsible for now: both report healthy.
    for (i, port) in ports.iter().enumerate() {
        let started = Instant::now();
        loop {
            let (code, body) = healthy(*port).await;
            if code == 200 {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "replica {i} stayed unhealthy: {code} {body}\n{}",
                processes[i].logs()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    for process in &mut processes {
        assert_eq!(process.stop(PATIENCE).await, 0, "{}", process.logs());
    }
}
