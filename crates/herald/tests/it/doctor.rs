//! `herald doctor`.

use crate::common::{World, json};

#[test]
fn a_fresh_store_is_healthy() {
    let world = World::new();
    let out = world.herald(&["doctor"]).ok();
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines.iter().all(|l| l.starts_with("ok ")), "{out}");
    for check in ["store", "schema", "journal", "search", "integrity", "platforms"] {
        assert!(lines.iter().any(|l| l.split_whitespace().nth(1) == Some(check)), "{check}: {out}");
    }
    assert!(out.contains("WAL") && out.contains("FTS5") && out.contains("current"), "{out}");
    assert!(world.db.exists());
    let report = json(&world.herald(&["doctor", "--json"]).ok());
    assert_eq!(report["ok"], true);
    assert!(report["checks"].as_array().unwrap().iter().all(|c| c["ok"] == true), "{report}");
}

#[test]
fn a_platform_without_its_token_fails() {
    let mut world = World::with_config("[discord]\n");
    let run = world.herald(&["doctor"]);
    assert_eq!(run.code, 1, "{run:?}");
    let fail = run.stdout.lines().find(|l| l.starts_with("FAIL")).expect("a FAIL line");
    assert!(fail.contains("DISCORD_BOT_TOKEN"), "{fail}");
    assert!(run.stdout.contains("configured: discord"), "{run:?}");
    world.env("DISCORD_BOT_TOKEN", "abc");
    world.herald(&["doctor"]).ok();
}

#[test]
fn an_unopenable_store_fails() {
    let world = World::new();
    std::fs::create_dir_all(&world.db).unwrap(); // a directory where the file should be
    let run = world.herald(&["doctor", "--json"]);
    assert_eq!(run.code, 1, "{run:?}");
    let report = json(&run.stdout);
    assert_eq!(report["ok"], false);
    assert_eq!(report["checks"][1]["name"], "store");
    assert_eq!(report["checks"][1]["ok"], false);
}
