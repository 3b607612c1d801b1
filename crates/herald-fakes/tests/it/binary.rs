use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::user;

#[tokio::test]
async fn the_binary_prints_its_url_serves_and_stops_on_sigterm() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_herald-fake-model"))
        .args(["--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let base_url = line.strip_prefix("fake model listening on ").unwrap();
    assert!(base_url.starts_with("http://127.0.0.1:") && base_url.ends_with("/v1"), "{line}");

    let body = json!({"model": "m", "messages": user("from a person")});
    let completion: Value = reqwest::Client::new()
        .post(format!("{base_url}/chat/completions"))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(completion["choices"][0]["message"]["content"], "echo: from a person");

    let pid = child.id().unwrap().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let status =
        tokio::time::timeout(Duration::from_secs(10), child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "{status}");
}

#[tokio::test]
async fn the_binary_explains_a_bad_argument() {
    let output =
        Command::new(env!("CARGO_BIN_EXE_herald-fake-model")).arg("--port").output().await.unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.contains("unexpected argument \"--port\"") && stderr.contains("usage:"),
        "{stderr}"
    );
}

#[tokio::test]
async fn every_fake_platform_binary_explains_a_bad_argument() {
    for program in [
        env!("CARGO_BIN_EXE_herald-fake-telegram"),
        env!("CARGO_BIN_EXE_herald-fake-discord"),
        env!("CARGO_BIN_EXE_herald-fake-slack"),
    ] {
        let output = Command::new(program).arg("--port").output().await.unwrap();
        assert_eq!(output.status.code(), Some(2), "{program}");
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert!(stderr.contains("unexpected argument") && stderr.contains("usage:"), "{stderr}");
    }
}
