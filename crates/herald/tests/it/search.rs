//! `herald sessions search`.

use crate::common::{World, json};

#[test]
fn hostile_queries_find_what_they_name() {
    let world = World::new();
    let seeded = world.seed();
    let out = world.herald(&["sessions", "search", "TODO: fix"]).ok();
    let session = out.split_whitespace().next().unwrap();
    assert!(seeded.telegram.starts_with(session.trim_end_matches('…')), "{out}");
    // stdout is not a terminal: hits are marked for reading, not with escape codes.
    assert!(out.contains("**TODO**") && !out.contains('\x1b'), "{out}");
    let out = world.herald(&["sessions", "search", "chat-send"]).ok();
    let session = out.split_whitespace().next().unwrap();
    assert!(seeded.discord.starts_with(session.trim_end_matches('…')), "{out}");
    assert!(out.contains("**chat-send**"), "{out}");
    for hostile in ["(unbalanced", "\"", "AND OR", "NEAR(", "*"] {
        world.herald(&["sessions", "search", hostile]).ok();
    }
    let none = world.herald(&["sessions", "search", "zebra"]).ok();
    assert_eq!(none.trim(), "no messages match");
}

#[test]
fn filters_narrow_the_hits() {
    let world = World::new();
    let seeded = world.seed();
    let hits = |args: &[&str]| {
        let mut all = vec!["sessions", "search"];
        all.extend_from_slice(args);
        all.push("--json");
        let found = json(&world.herald(&all).ok());
        let found = found.as_array().unwrap().clone();
        found.iter().map(|h| h["session_id"].as_str().unwrap().to_owned()).collect::<Vec<_>>()
    };
    assert_eq!(hits(&["hello", "--source", "cli"]), [seeded.cli.as_str()]);
    assert!(hits(&["hello", "--source", "telegram"]).is_empty());
    assert_eq!(hits(&["deploy", "--role", "user"]), [seeded.telegram.as_str()]);
    assert!(hits(&["deploy", "--role", "assistant"]).is_empty());
    assert_eq!(hits(&["chat-send", "--user", "7"]), [seeded.discord.as_str()]);
    assert!(hits(&["chat-send", "--user", "42"]).is_empty());
    assert_eq!(hits(&["result", "--role", "tool", "--limit", "1"]).len(), 1);
    let first = json(&world.herald(&["sessions", "search", "exit code", "--json"]).ok());
    assert_eq!(first[0]["role"], "assistant");
    let snippet = first[0]["snippet"].as_str().unwrap();
    assert!(snippet.contains("**exit") && snippet.contains("code**"), "{snippet}");
    assert_eq!(world.herald(&["sessions", "search", "x", "--role", "robot"]).code, 2);
}

#[test]
fn hits_from_a_chain_name_the_session_each_comes_from() {
    let world = World::new();
    let chain = world.chain();
    let out = world.herald(&["sessions", "search", "walrus"]).ok();
    let heads: Vec<&str> = out.lines().filter(|l| !l.starts_with(' ')).collect();
    assert_eq!(heads.len(), 3, "{out}");
    let mut found: Vec<(String, String)> = heads
        .iter()
        .map(|line| {
            let short = line.split_whitespace().next().unwrap().trim_end_matches('…');
            let id = chain.iter().find(|id| id.starts_with(short)).unwrap_or_else(|| {
                panic!("{short} is none of the chain's sessions: {out}");
            });
            let title = line.split("  ").nth(2).unwrap().to_owned();
            (id.clone(), title)
        })
        .collect();
    found.sort();
    let expected: Vec<(String, String)> =
        chain.iter().cloned().zip(["trip", "trip #2", "trip #3"].map(String::from)).collect();
    assert_eq!(found, expected);
    // The short ids are the store's: each one resolves to its session.
    let short = heads[0].split_whitespace().next().unwrap();
    let shown = json(&world.herald(&["sessions", "show", short, "--json"]).ok());
    assert!(chain.iter().any(|id| shown["id"] == id.as_str()), "{shown}");
}
