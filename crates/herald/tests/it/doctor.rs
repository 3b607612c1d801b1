//! `herald doctor`.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use crate::common::{World, json};

/// A world whose config sets the store path and `extra`, with a new store, and service files
/// looked for in a test root rather than this machine's /etc.
fn world(extra: &str) -> World {
    let world = world_without_store(extra);
    world.with_store(async |_| ());
    world
}

/// Like [`world`], with no store yet.
fn world_without_store(extra: &str) -> World {
    let mut world = World::with_config(extra);
    let root = world.dir().join("root");
    world.env("HERALD_SERVICE_ROOT", root.to_str().unwrap());
    world.env("HERALD_SYSTEMCTL", "true");
    world
}

/// The line of the check named `name`.
#[track_caller]
fn line<'a>(out: &'a str, name: &str) -> &'a str {
    let found = out.lines().find(|l| l.split_whitespace().nth(1) == Some(name));
    found.unwrap_or_else(|| panic!("no {name} check: {out}"))
}

#[test]
fn a_fresh_store_is_healthy() {
    let world = world("");
    let out = world.herald(&["doctor"]).ok();
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines.iter().all(|l| l.starts_with("ok ")), "{out}");
    let checks =
        ["config", "store", "writable", "directory", "schema", "journal", "search", "integrity"];
    for check in checks.into_iter().chain(["platforms", "service"]) {
        line(&out, check);
    }
    assert!(out.contains("WAL") && out.contains("FTS5") && out.contains("current"), "{out}");
    assert!(line(&out, "config").ends_with("config.toml is valid"), "{out}");
    assert!(line(&out, "writable").ends_with("mode 0600"), "{out}");
    assert!(world.db.exists());
    let report = json(&world.herald(&["doctor", "--json"]).ok());
    assert_eq!(report["ok"], true);
    assert!(report["checks"].as_array().unwrap().iter().all(|c| c["ok"] == true), "{report}");
}

#[test]
fn a_platform_without_its_token_fails() {
    let mut world = world("[discord]\n");
    let run = world.herald(&["doctor"]);
    assert_eq!(run.code, 1, "{run:?}");
    let fail = run.stdout.lines().find(|l| l.starts_with("FAIL")).expect("a FAIL line");
    assert!(fail.contains("DISCORD_BOT_TOKEN"), "{fail}");
    assert!(run.stdout.contains("configured: discord"), "{run:?}");
    world.env("DISCORD_BOT_TOKEN", "abc");
    world.herald(&["doctor"]).ok();
}

#[test]
fn a_token_is_named_and_never_shown() {
    let mut world = world("[telegram]\n[slack]\n");
    world.env("TELEGRAM_BOT_TOKEN", "123456:very-secret-token");
    world.env("SLACK_BOT_TOKEN", "xoxb-very-secret");
    let run = world.herald(&["doctor"]);
    assert_eq!(run.code, 1, "{run:?}");
    let secrets: Vec<&str> = run.stdout.lines().filter(|l| l.contains(" secret ")).collect();
    assert!(secrets.iter().any(|l| l.starts_with("ok ") && l.ends_with("from TELEGRAM_BOT_TOKEN")));
    assert!(secrets.iter().any(|l| l.starts_with("FAIL") && l.contains("SLACK_APP_TOKEN")));
    assert!(!run.stdout.contains("very-secret"), "{run:?}");
    world.env("SLACK_APP_TOKEN", "xapp-very-secret");
    let out = world.herald(&["doctor"]).ok();
    assert!(!out.contains("very-secret"), "{out}");
}

#[test]
fn an_unopenable_store_fails() {
    let world = world_without_store("");
    fs::create_dir_all(&world.db).unwrap(); // a directory where the file should be
    let run = world.herald(&["doctor", "--json"]);
    assert_eq!(run.code, 1, "{run:?}");
    let report = json(&run.stdout);
    assert_eq!(report["ok"], false);
    assert_eq!(report["checks"][1]["name"], "store");
    assert_eq!(report["checks"][1]["ok"], false);
}

#[test]
fn a_database_other_users_can_read_is_made_private() {
    let world = world("");
    fs::set_permissions(&world.db, fs::Permissions::from_mode(0o644)).unwrap();
    let run = world.herald(&["doctor"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(line(&run.stdout, "writable").ends_with("mode 0600"), "{run:?}");
    assert!(run.stderr.contains("made the store's files private"), "{run:?}");
    assert_eq!(fs::metadata(&world.db).unwrap().permissions().mode() & 0o777, 0o600);
}

#[test]
fn a_database_in_a_directory_others_can_write_is_flagged() {
    let world = world("");
    let dir = world.db.parent().unwrap();
    assert!(line(&world.herald(&["doctor"]).ok(), "directory").starts_with("ok "));
    for mode in [0o777, 0o1777] {
        fs::set_permissions(dir, fs::Permissions::from_mode(mode)).unwrap();
        let run = world.herald(&["doctor"]);
        assert_eq!(run.code, 1, "{run:?}");
        let check = line(&run.stdout, "directory");
        assert!(check.starts_with("FAIL") && check.contains("writable by every user"), "{check}");
        assert!(check.ends_with(&format!("chmod o-w {}", dir.display())), "{check}");
    }

    fs::set_permissions(dir, fs::Permissions::from_mode(0o770)).unwrap();
    let run = world.herald(&["doctor"]);
    assert_eq!(run.code, 0, "a warning is not a failure: {run:?}");
    let check = line(&run.stdout, "directory");
    assert!(check.starts_with("WARN") && check.contains("writable by its group"), "{check}");
    let report = json(&world.herald(&["doctor", "--json"]).ok());
    let checks = report["checks"].as_array().unwrap();
    let directory = checks.iter().find(|c| c["name"] == "directory").unwrap();
    assert_eq!((&directory["ok"], &directory["warning"]), (&true.into(), &true.into()));
}

#[test]
fn the_service_unit_is_noted_when_absent_and_must_be_current_when_installed() {
    let world = world("");
    let out = world.herald(&["doctor"]).ok();
    assert!(line(&out, "service").contains("not installed as a service"), "{out}");

    world.herald(&["service", "install", "--user"]).ok();
    let report = json(&world.herald(&["doctor", "--json"]).ok());
    let checks = report["checks"].as_array().unwrap();
    let service: Vec<_> = checks.iter().filter(|c| c["name"] == "service").collect();
    assert_eq!(service.len(), 1, "{report}");
    assert_eq!(service[0]["ok"], true);
    assert!(service[0]["detail"].as_str().unwrap().starts_with("user unit "), "{report}");
    assert!(service[0]["detail"].as_str().unwrap().ends_with(", current"), "{report}");

    // A longer drain needs a longer stop timeout than the installed unit has.
    let config = fs::read_to_string(&world.config).unwrap();
    fs::write(&world.config, format!("{config}[gateway]\ndrain_timeout_s = 90\n")).unwrap();
    let run = world.herald(&["doctor"]);
    assert_eq!(run.code, 1, "{run:?}");
    let service = line(&run.stdout, "service");
    assert!(service.starts_with("FAIL"), "{service}");
    assert!(service.contains("`TimeoutStopSec=60s`") && service.contains("`TimeoutStopSec=120s`"));
    assert!(service.ends_with("run herald service install --user"), "{service}");
    world.herald(&["service", "install", "--user"]).ok();
    world.herald(&["doctor"]).ok();
}

#[test]
fn a_missing_store_is_reported_and_not_created() {
    let world = world_without_store("");
    let run = world.herald(&["doctor"]);
    assert_eq!(run.code, 1, "{run:?}");
    let store = line(&run.stdout, "store");
    assert!(store.starts_with("FAIL") && store.contains(&world.db.display().to_string()));
    assert!(store.contains("does not exist") && store.contains("nothing was created"), "{store}");
    assert!(!world.db.parent().unwrap().exists(), "doctor made the store's directory");
}
