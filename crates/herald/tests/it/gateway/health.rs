//! `gateway.health_listen`: `/healthz` follows the platform's connection, `/metrics` counts
//! what the daemon did; a platform that cannot start is named while the others run.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::Daemon;

/// A port nobody listens on right now.
pub(super) fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

pub(super) async fn get(url: &str) -> (u16, String, String) {
    let response = reqwest::get(url).await.unwrap();
    let status = response.status().as_u16();
    let kind = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, kind, response.text().await.unwrap())
}

/// Polls `/healthz` until `accept(code, body)` holds, and returns that body.
async fn healthz_until(
    d: &Daemon,
    base: &str,
    what: &str,
    accept: impl Fn(u16, &Value) -> bool,
) -> Value {
    let started = Instant::now();
    loop {
        let (code, _, body) = get(&format!("{base}/healthz")).await;
        let body: Value = serde_json::from_str(&body).unwrap();
        if accept(code, &body) {
            return body;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "/healthz never reported {what}: {code} {body}\n{}",
            d.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The value of a sample line in Prometheus text.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test(flavor = "multi_thread")]
async fn healthz_follows_the_platform_and_metrics_count_the_replies() {
    let port = free_port();
    let mut d = Daemon::start(&format!("health_listen = \"127.0.0.1:{port}\"")).await;
    let base = format!("http://127.0.0.1:{port}");

    let body = healthz_until(&d, &base, "ok", |code, _| code == 200).await;
    assert_eq!(body["status"], "ok");
    assert_eq!(body["platforms"]["telegram"]["state"], "connected");
    assert_eq!(body["store"]["ok"], true);

    d.telegram.dm(1001, "hello");
    assert_eq!(d.replies(1001, 1).await[0].text, "echo: hello");
    let (code, kind, text) = get(&format!("{base}/metrics")).await;
    assert_eq!(code, 200);
    assert!(kind.starts_with("text/plain; version=0.0.4"), "{kind}");
    let sent = sample(&text, "herald_messages_sent_total{platform=\"telegram\"}");
    assert!(sent >= Some(1.0), "{text}");
    let received = sample(&text, "herald_messages_received_total{platform=\"telegram\"}");
    assert!(received >= Some(1.0), "{text}");
    assert!(sample(&text, "herald_agent_runs_total") >= Some(1.0), "{text}");
    assert!(sample(&text, "herald_agent_run_seconds_count") >= Some(1.0), "{text}");
    assert!(text.contains("# TYPE herald_agent_run_seconds histogram"), "{text}");
    assert!(sample(&text, "herald_store_write_retries_total").is_some(), "{text}");

    d.telegram.set_offline(true);
    let body = healthz_until(&d, &base, "telegram down", |code, body| {
        let state = &body["platforms"]["telegram"]["state"];
        code == 503 && (state == "retrying" || state == "failed")
    })
    .await;
    assert_eq!(body["status"], "degraded", "{body}");
    assert!(body["platforms"]["telegram"]["error"].is_string(), "{body}");

    d.telegram.set_offline(false);
    let body = healthz_until(&d, &base, "ok again", |code, _| code == 200).await;
    assert_eq!(body["platforms"]["telegram"]["state"], "connected");

    let (code, _, _) = get(&format!("{base}/nothing-here")).await;
    assert_eq!(code, 404);
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_taken_health_address_stops_the_daemon_at_startup() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let d = Daemon::start("").await;
    let config = std::fs::read_to_string(&d.world.config).unwrap();
    let config = config.replace("[gateway]\n", &format!("[gateway]\nhealth_listen = \"{addr}\"\n"));
    std::fs::write(&d.world.config, config).unwrap();
    let run = d.herald(&["gateway"]);
    let line = run.fails(1);
    assert!(line.contains("gateway.health_listen") && line.contains(&addr.to_string()), "{line}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_discord_section_without_its_token_is_named_and_telegram_goes_on() {
    let mut d = Daemon::start("").await;
    d.reconfigure(&[("discord", "token_env", "\"HERALD_TEST_DISCORD\"")]).await;
    d.wait_log("HERALD_TEST_DISCORD is not set", 1).await;
    assert!(d.logs().contains("discord.token_env names the variable"), "{}", d.logs());
    assert!(!d.logs().contains("cannot run discord yet"), "{}", d.logs());
    d.telegram.dm(1001, "still here?");
    assert_eq!(d.replies(1001, 1).await[0].text, "echo: still here?");
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_draining_daemon_reports_stopping() {
    let port = free_port();
    let mut d = Daemon::start(&format!("health_listen = \"127.0.0.1:{port}\"")).await;
    let base = format!("http://127.0.0.1:{port}");
    healthz_until(&d, &base, "ok", |code, _| code == 200).await;
    d.model.set_latency(Duration::from_millis(1500));
    d.telegram.dm(1001, "slow one");
    while d.model.request_count() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    d.signal("TERM");
    let body = healthz_until(&d, &base, "stopping", |code, body| {
        code == 503 && body["status"] == "stopping"
    })
    .await;
    assert_eq!(body["store"]["ok"], true, "{body}");
    assert_eq!(d.stop().await, 0, "{}", d.logs());
    assert_eq!(d.telegram.sent_to(1001).len(), 1, "the turn finished during the drain");
}

/// An outside `sqlite3` shell holding the database's write lock until dropped.
struct HeldLock(std::process::Child);

impl HeldLock {
    fn take(db: &std::path::Path) -> HeldLock {
        use std::io::{BufRead, Write};
        let mut shell = std::process::Command::new("sqlite3")
            .arg(db)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("the sqlite3 command line shell is installed");
        let input = shell.stdin.as_mut().unwrap();
        writeln!(input, "BEGIN IMMEDIATE;\n.print locked").unwrap();
        let mut line = String::new();
        std::io::BufReader::new(shell.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "locked");
        HeldLock(shell)
    }
}

impl Drop for HeldLock {
    fn drop(&mut self) {
        use std::io::Write;
        let _ = writeln!(self.0.stdin.as_mut().unwrap(), "ROLLBACK;\n.quit");
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn healthz_fails_while_writes_fail_and_recovers_with_the_store() {
    let port = free_port();
    let mut d = Daemon::start(&format!("health_listen = \"127.0.0.1:{port}\"")).await;
    assert_eq!(d.stop().await, 0, "{}", d.logs());
    let config = std::fs::read_to_string(&d.world.config).unwrap();
    let config = config.replacen("[store]\n", "[store]\nwrite_patience_ms = 1500\n", 1);
    std::fs::write(&d.world.config, config).unwrap();
    d.spawn().await;
    let base = format!("http://127.0.0.1:{port}");
    healthz_until(&d, &base, "ok", |code, _| code == 200).await;

    let lock = HeldLock::take(&d.world.db);
    d.telegram.dm(1001, "while locked");
    let body = healthz_until(&d, &base, "the store failing", |code, body| {
        code == 503 && body["store"]["ok"] == false
    })
    .await;
    assert_eq!(body["status"], "failed", "{body}");
    assert!(body["store"]["error"].as_str().unwrap().contains("locked"), "{body}");
    assert_eq!(body["platforms"]["telegram"]["state"], "connected", "{body}");
    let (_, _, text) = get(&format!("{base}/metrics")).await;
    assert!(sample(&text, "herald_store_write_failures_total") >= Some(1.0), "{text}");
    assert_eq!(sample(&text, "herald_outbox_pending"), Some(0.0), "{text}");

    drop(lock);
    let body = healthz_until(&d, &base, "ok again", |code, _| code == 200).await;
    assert_eq!(body["store"], serde_json::json!({ "ok": true }), "{body}");
    // The message that could not be stored was not acknowledged: nothing is lost.
    assert_eq!(d.stop().await, 0, "{}", d.logs());
    d.spawn().await;
    assert_eq!(d.replies(1001, 1).await[0].text, "echo: while locked");
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idle_connection_to_the_health_port_is_closed() {
    use tokio::io::AsyncReadExt;
    let port = free_port();
    let mut d = Daemon::start(&format!("health_listen = \"127.0.0.1:{port}\"")).await;
    let mut idle = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(30), idle.read(&mut buf)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "a connection that sends nothing is closed by the daemon: {read:?}"
    );
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}

#[tokio::test(flavor = "multi_thread")]
async fn idle_connections_cannot_starve_the_daemon_of_descriptors() {
    let port = free_port();
    let mut d = Daemon::start(&format!("health_listen = \"127.0.0.1:{port}\"")).await;
    // A small descriptor limit, as a service's, so that a flood can reach it in a test.
    let limit = 128;
    let status = std::process::Command::new("prlimit")
        .args([format!("--pid={}", d.pid()), format!("--nofile={limit}:{limit}")])
        .status()
        .unwrap();
    assert!(status.success(), "prlimit");
    let mut idle = Vec::new();
    for _ in 0..limit + limit / 2 {
        idle.push(tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap());
    }
    // The platform still answers, and so does /healthz once the idle ones are dropped.
    d.telegram.dm(1001, "still here?");
    let sent = d.replies(1001, 1).await;
    assert_eq!(sent[0].text, "echo: still here?");
    // Queued behind the idle ones, served as they time out.
    let client = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap();
    let answer = client.get(format!("http://127.0.0.1:{port}/healthz")).send().await;
    let answer = match answer {
        Ok(response) => response.status().as_u16(),
        Err(e) => panic!(
            "/healthz never answered beside {} idle connections: {e}\n{}",
            idle.len(),
            d.logs()
        ),
    };
    assert_eq!(answer, 200, "{}", d.logs());
    drop(idle);
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}
