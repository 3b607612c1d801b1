//! `herald sessions list | show | rename | delete | prune | stats`.

use crate::common::{World, ids, json};

#[test]
fn list_is_a_table_newest_first() {
    let world = World::new();
    let seeded = world.seed();
    let out = world.herald(&["sessions", "list"]).ok();
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("ID "), "{out}");
    for header in ["PARENT", "SOURCE", "TITLE", "MESSAGES", "STARTED", "ENDED"] {
        assert!(lines[0].contains(header), "{out}");
    }
    let order: Vec<&str> =
        lines[1..].iter().map(|l| l.split_whitespace().next().unwrap()).collect();
    assert_eq!(order, [&seeded.discord, &seeded.cli, &seeded.telegram]);
    let telegram = lines[3];
    assert!(telegram.contains("telegram") && telegram.contains("deploy notes"), "{telegram}");
    assert!(telegram.contains(" 4 ") && telegram.ends_with("open"), "{telegram}");
    // Columns line up, in characters (a short id ends in a 3-byte `…`): every row's source
    // starts where the header's does.
    let column = lines[0].split("SOURCE").next().unwrap().chars().count();
    let sources = lines[1..].iter().map(|l| l.chars().skip(column).collect::<String>());
    assert!(sources.into_iter().all(|s| s.starts_with(['c', 't', 'd'])), "{out}");
}

#[test]
fn list_shows_each_sessions_parent() {
    let world = World::new();
    let seeded = world.seed();
    let out = world.herald(&["sessions", "list"]).ok();
    let parent = |id: &str| {
        let line = out.lines().find(|l| l.starts_with(id)).unwrap();
        line.split_whitespace().nth(1).unwrap().to_owned()
    };
    // The parent's short id, which resolves back to it.
    let short = parent(&seeded.discord);
    assert!(short.ends_with('…') && short.chars().count() < seeded.telegram.len(), "{out}");
    assert!(seeded.telegram.starts_with(short.trim_end_matches('…')), "{out}");
    let shown = json(&world.herald(&["sessions", "show", &short, "--json"]).ok());
    assert_eq!(shown["id"], seeded.telegram.as_str());
    assert_eq!(parent(&seeded.telegram), "-");
    assert_eq!(parent(&seeded.cli), "-");

    let listed = json(&world.herald(&["sessions", "list", "--json"]).ok());
    let parents: Vec<&serde_json::Value> =
        listed.as_array().unwrap().iter().map(|s| &s["parent_session_id"]).collect();
    assert_eq!(parents[0], seeded.telegram.as_str());
    assert!(parents[1].is_null() && parents[2].is_null(), "{listed}");
}

#[test]
fn show_lineage_walks_the_chain_oldest_first() {
    let world = World::new();
    let chain = world.chain();
    let out = world.herald(&["sessions", "show", &chain[1], "--lineage"]).ok();
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("chain of 3 sessions, oldest first"), "{out}");
    let rows = &lines[2..];
    assert_eq!(rows.len(), 3, "{out}");
    for (row, id) in rows.iter().zip(&chain) {
        let short = row.trim_start_matches(['*', ' ']).split_whitespace().next().unwrap();
        assert!(id.starts_with(short.trim_end_matches('…')), "{id}: {out}");
    }
    assert!(rows[1].starts_with('*') && !rows[0].starts_with('*') && !rows[2].starts_with('*'));
    assert!(rows[0].contains(" trip ") && rows[0].ends_with(" compressed"), "{out}");
    assert!(rows[1].contains(" trip #2 ") && rows[1].ends_with(" compressed"), "{out}");
    assert!(rows[2].contains(" trip #3 ") && rows[2].ends_with(" current"), "{out}");
    assert!(rows[0].contains("  2  ") && rows[2].contains("  2  "), "message counts: {out}");

    // The chain's name reaches its newest session, which is the one marked.
    let out = world.herald(&["sessions", "show", "trip", "--lineage"]).ok();
    assert!(out.lines().last().unwrap().starts_with('*'), "{out}");
    let listed = json(&world.herald(&["sessions", "show", "trip #2", "--lineage", "--json"]).ok());
    assert_eq!(ids(&listed), chain);
    assert_eq!(listed[0]["end_reason"], "compressed");
    assert_eq!(listed[2]["context_tokens"], 100);

    // A session on its own is a chain of one.
    let seeded = world.seed();
    let out = world.herald(&["sessions", "show", &seeded.cli, "--lineage"]).ok();
    assert!(out.starts_with("chain of 1 session,") && out.contains("current"), "{out}");
}

#[test]
fn list_filters_by_source_and_limits() {
    let world = World::new();
    let seeded = world.seed();
    let telegram =
        json(&world.herald(&["sessions", "list", "--source", "telegram", "--json"]).ok());
    assert_eq!(ids(&telegram), [seeded.telegram.as_str()]);
    assert_eq!(telegram[0]["title"], "deploy notes");
    assert_eq!(telegram[0]["message_count"], 4);
    let newest = json(&world.herald(&["sessions", "list", "--limit", "1", "--json"]).ok());
    assert_eq!(ids(&newest), [seeded.discord.as_str()]);
    let all = json(&world.herald(&["sessions", "list", "--limit", "0", "--json"]).ok());
    assert_eq!(ids(&all).len(), 3);
    let human = world.herald(&["sessions", "list", "--limit", "2"]).ok();
    assert!(human.contains("more sessions") && !human.contains(&seeded.telegram), "{human}");
    let none = world.herald(&["sessions", "list", "--source", "slack"]).ok();
    assert_eq!(none.trim(), "no sessions");
    assert_eq!(world.herald(&["sessions", "list", "--source", "irc"]).code, 2);
}

#[test]
fn show_finds_by_id_prefix_and_title_and_folds_tools() {
    let world = World::new();
    let seeded = world.seed();
    let prefix = &seeded.telegram[..seeded.telegram.len() - 2];
    for reference in [seeded.telegram.as_str(), prefix, "deploy notes"] {
        let out = world.herald(&["sessions", "show", reference]).ok();
        assert!(out.contains(&format!("session   {}", seeded.telegram)), "{reference}: {out}");
        assert!(out.contains("TODO: fix the deploy script"), "{out}");
        assert!(out.contains("title     deploy notes\n"), "{out}");
        assert!(out.contains("source    telegram · dm · chat 42 · user 42\n"), "{out}");
        assert!(out.contains("messages  4 (1 tool call)\n"), "{out}");
        assert!(out.contains(r#"→ session_search {"query":"deploy"}"#), "{out}");
        assert!(out.contains("session_search: result line 1"), "{out}");
        assert!(out.contains("result line 3") && !out.contains("result line 4"), "{out}");
        assert!(out.contains("… 7 more lines"), "{out}");
        assert!(out.contains("Fixed it"), "{out}");
    }
    let record = json(&world.herald(&["sessions", "show", "deploy notes", "--json"]).ok());
    assert_eq!(record["id"], seeded.telegram.as_str());
    assert_eq!(record["system_prompt"], "You are Herald.");
    assert_eq!(record["messages"].as_array().unwrap().len(), 4);
    assert!(record["messages"][2]["content"].as_str().unwrap().contains("result line 10"));
}

#[test]
fn show_of_nothing_is_one_error_line() {
    let world = World::new();
    world.seed();
    let line = world.herald(&["sessions", "show", "no-such-session"]).fails(1);
    assert_eq!(line, "error: no session matches `no-such-session`");
}

#[test]
fn rename_sets_unique_titles() {
    let world = World::new();
    let seeded = world.seed();
    let out = world.herald(&["sessions", "rename", &seeded.cli, "greetings"]).ok();
    assert!(out.contains("greetings"), "{out}");
    let shown = json(&world.herald(&["sessions", "show", "greetings", "--json"]).ok());
    assert_eq!(shown["id"], seeded.cli.as_str());
    let line = world.herald(&["sessions", "rename", &seeded.discord, "deploy notes"]).fails(1);
    assert!(line.contains("already used by session") && line.contains(&seeded.telegram), "{line}");
    let discord = json(&world.herald(&["sessions", "show", &seeded.discord, "--json"]).ok());
    assert_eq!(discord["title"], serde_json::Value::Null);
}

#[test]
fn delete_removes_the_session_and_clears_its_children_parent() {
    let world = World::new();
    let seeded = world.seed();
    let child = json(&world.herald(&["sessions", "show", &seeded.discord, "--json"]).ok());
    assert_eq!(child["parent_session_id"], seeded.telegram.as_str());
    // stdin is not a terminal here, so no question is asked even without -y.
    let out = world.herald(&["sessions", "delete", "deploy notes"]).ok();
    assert!(out.contains(&seeded.telegram) && out.contains("4 messages"), "{out}");
    let left = json(&world.herald(&["sessions", "list", "--json"]).ok());
    assert_eq!(ids(&left), [seeded.discord.as_str(), seeded.cli.as_str()]);
    let child = json(&world.herald(&["sessions", "show", &seeded.discord, "--json"]).ok());
    assert_eq!(child["parent_session_id"], serde_json::Value::Null);
    world.herald(&["sessions", "delete", "-y", &seeded.cli]).ok();
    world.herald(&["sessions", "delete", "-y", &seeded.cli]).fails(1);
}

#[test]
fn prune_deletes_only_old_ended_sessions() {
    let world = World::new();
    let seeded = world.seed();
    world.with_store(async |store| store.end_session(&seeded.telegram, "new").await.unwrap());
    let kept = world.herald(&["sessions", "prune", "--older-than", "90d"]).ok();
    assert_eq!(kept.trim(), "pruned 0 ended sessions");
    let other = world.herald(&["sessions", "prune", "--older-than", "0h", "--source", "cli"]).ok();
    assert_eq!(other.trim(), "pruned 0 ended sessions");
    let pruned = world.herald(&["sessions", "prune", "--older-than", "0h"]).ok();
    assert_eq!(pruned.trim(), "pruned 1 ended session");
    let left = json(&world.herald(&["sessions", "list", "--json"]).ok());
    assert_eq!(ids(&left), [seeded.discord.as_str(), seeded.cli.as_str()]);
    let run = world.herald(&["sessions", "prune", "--older-than", "3 months"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("like 90d"), "{run:?}");
}

#[test]
fn stats_count_sessions_and_messages() {
    let world = World::new();
    world.seed();
    let stats = json(&world.herald(&["sessions", "stats", "--json"]).ok());
    assert_eq!(stats["sessions"], 3);
    assert_eq!(stats["messages"], 7);
    assert_eq!(stats["by_source"].as_array().unwrap().len(), 3);
    let human = world.herald(&["sessions", "stats"]).ok();
    assert!(human.contains("sessions  3 (3 open)"), "{human}");
    assert!(human.contains("messages  7"), "{human}");
    assert!(human.lines().any(|l| l.starts_with("telegram") && l.ends_with('4')), "{human}");
}

#[test]
fn read_only_commands_on_a_missing_store_create_nothing() {
    let world = World::new();
    let commands: [&[&str]; 7] = [
        &["sessions", "list"],
        &["sessions", "show", "abcd"],
        &["sessions", "search", "deploy"],
        &["sessions", "export", "--all"],
        &["sessions", "stats", "--json"],
        &["pairing", "list"],
        &["pairing", "revoke", "telegram", "42"],
    ];
    for args in commands {
        let line = world.herald(args).fails(1);
        let path = world.db.display().to_string();
        assert!(line.contains(&path) && line.contains("does not exist"), "{args:?}: {line}");
        assert!(line.contains("nothing was created"), "{args:?}: {line}");
        assert!(!world.db.parent().unwrap().exists(), "{args:?} made the store's directory");
    }
}

/// A database open to every user but owned by another is refused, not used as it is. Only root
/// can give a file to another user, so the test runs herald as `nobody` (setpriv) when it runs
/// as root, and says it skipped otherwise.
#[test]
fn a_loose_database_herald_cannot_make_private_is_refused() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let world = World::new();
    world.with_store(async |_| ());
    if std::fs::metadata(&world.db).unwrap().uid() != 0 {
        eprintln!("skipped: only root can leave a file owned by another user");
        return;
    }
    let open = |path: &std::path::Path, mode| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    open(world.dir(), 0o755);
    open(&world.config, 0o644);
    open(world.db.parent().unwrap(), 0o755);
    open(&world.db, 0o666);
    let output = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_herald"))
        .args(["--config", world.config.to_str().unwrap(), "sessions", "list"])
        .env_clear()
        .output()
        .expect("running setpriv");
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("has mode 0666") && stderr.contains("cannot be made private"),
        "{stderr}"
    );
    assert!(stderr.contains(&format!("run chmod 600 {} as its owner", world.db.display())));
}
