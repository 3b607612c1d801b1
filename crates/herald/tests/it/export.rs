//! `herald sessions export`.

use std::os::unix::fs::PermissionsExt;

use crate::common::{World, json};

#[test]
fn jsonl_is_one_session_per_line_with_its_messages() {
    let world = World::new();
    let seeded = world.seed();
    let out = world.herald(&["sessions", "export", "--all"]).ok();
    let records: Vec<serde_json::Value> = out.lines().map(json).collect();
    let order: Vec<&str> = records.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(order, [&seeded.telegram, &seeded.cli, &seeded.discord], "oldest first");
    let counts: Vec<usize> =
        records.iter().map(|r| r["messages"].as_array().unwrap().len()).collect();
    assert_eq!(counts, [4, 2, 1]);
    let telegram = &records[0];
    assert_eq!(telegram["source"], "telegram");
    assert_eq!(telegram["title"], "deploy notes");
    assert_eq!(telegram["system_prompt"], "You are Herald.");
    let call = &telegram["messages"][1]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "session_search");
    assert_eq!(telegram["messages"][2]["tool_call_id"], "call_1");

    let one = world.herald(&["sessions", "export", "deploy notes"]).ok();
    assert_eq!(one.lines().count(), 1);
    assert_eq!(json(&one), records[0]);
}

#[test]
fn markdown_is_a_readable_transcript() {
    let world = World::new();
    let seeded = world.seed();
    let out = world.herald(&["sessions", "export", &seeded.telegram, "--format", "markdown"]).ok();
    assert!(out.starts_with("# deploy notes\n"), "{out}");
    assert!(out.contains(&format!("- id: `{}`", seeded.telegram)), "{out}");
    assert!(out.contains("## System prompt") && out.contains("You are Herald."), "{out}");
    assert!(out.contains("## user · ") && out.contains("TODO: fix the deploy script"), "{out}");
    assert!(out.contains(r#"→ `session_search {"query":"deploy"}`"#), "{out}");
    assert!(out.contains("## tool · session_search · "), "{out}");
    assert!(
        out.contains("```text\nresult line 1\n") && out.contains("result line 10\n```"),
        "{out}"
    );
    let all = world.herald(&["sessions", "export", "--all", "--format", "md"]).ok();
    assert_eq!(all.matches("\n---\n").count(), 2, "{all}");
    assert!(all.contains("# Session ") && all.contains("chat-send is broken again"), "{all}");
}

#[test]
fn output_files_are_private_and_written_whole() {
    let world = World::new();
    world.seed();
    let file = world.dir().join("export.jsonl");
    std::fs::write(&file, "old contents\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let path = file.to_str().unwrap();
    let out = world.herald(&["sessions", "export", "--all", "-o", path]).ok();
    assert!(out.contains("exported 3 sessions"), "{out}");
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let stdout = world.herald(&["sessions", "export", "--all"]).ok();
    assert_eq!(std::fs::read_to_string(&file).unwrap(), stdout);
    let leftovers: Vec<_> = std::fs::read_dir(world.dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(".herald-export"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    let md = world.dir().join("t.md");
    world
        .herald(&[
            "sessions",
            "export",
            "deploy notes",
            "--format",
            "markdown",
            "--output",
            md.to_str().unwrap(),
        ])
        .ok();
    assert!(std::fs::read_to_string(&md).unwrap().starts_with("# deploy notes"));
    assert_eq!(std::fs::metadata(&md).unwrap().permissions().mode() & 0o777, 0o600);

    let nowhere = world.dir().join("missing-dir").join("x.jsonl");
    let line =
        world.herald(&["sessions", "export", "--all", "-o", nowhere.to_str().unwrap()]).fails(1);
    assert!(line.contains("missing-dir"), "{line}");
    assert!(!nowhere.exists());
}

#[test]
fn export_needs_a_session_or_all() {
    let world = World::new();
    world.seed();
    assert_eq!(world.herald(&["sessions", "export"]).code, 2);
    let line = world.herald(&["sessions", "export", "nothing-like-it"]).fails(1);
    assert_eq!(line, "error: no session matches `nothing-like-it`");
}

#[test]
fn a_chain_exports_whole_oldest_first() {
    let world = World::new();
    let chain = world.chain();
    let out = world.herald(&["sessions", "export", &chain[1], "--chain"]).ok();
    let records: Vec<serde_json::Value> = out.lines().map(json).collect();
    let order: Vec<&str> = records.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(order, chain);
    for (i, record) in records.iter().enumerate() {
        assert_eq!(record["messages"].as_array().unwrap().len(), 2, "{record}");
        assert_eq!(record["system_prompt"], "You are Herald.");
        let parent = i.checked_sub(1).map(|p| chain[p].as_str());
        assert_eq!(record["parent_session_id"].as_str(), parent);
    }
    assert!(records[1]["messages"][0]["content"].as_str().unwrap().contains("kit is packed"));
    // Without --chain, the one session only.
    assert_eq!(world.herald(&["sessions", "export", &chain[1]]).ok().lines().count(), 1);

    let md = world.herald(&["sessions", "export", "trip", "--chain", "--format", "md"]).ok();
    let headings: Vec<&str> = md.lines().filter(|l| l.starts_with("# ")).collect();
    assert_eq!(headings, ["# trip", "# trip #2 (continues trip)", "# trip #3 (continues trip #2)"]);
    assert_eq!(md.matches("You are Herald.").count(), 1, "the shared prompt is written once");
    assert_eq!(md.matches("The same as the previous session's.").count(), 2, "{md}");
    assert!(md.contains("pack the walrus kit") && md.contains("tickets booked"), "{md}");

    assert_eq!(world.herald(&["sessions", "export", "--all", "--chain"]).code, 2);
}
