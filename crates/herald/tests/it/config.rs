//! `herald config check | example`, and config errors at startup.

use crate::common::World;

#[test]
fn check_reports_the_file_and_ok() {
    let world = World::new();
    let out = world.herald(&["config", "check"]).ok();
    assert!(out.contains(&format!("config: {}", world.config.display())), "{out}");
    assert!(out.contains(&format!("store: {}", world.db.display())), "{out}");
    assert_eq!(out.lines().last(), Some("config ok"));
}

#[track_caller]
fn check_malformed(body: &str, key: &str, line: usize) {
    let world = World::with_config(body);
    for args in [&["config", "check"][..], &["sessions", "list"], &["doctor"]] {
        let error = world.herald(args).fails(2);
        let at = format!("error: {}:{line}:", world.config.display());
        assert!(error.starts_with(&at), "{args:?}: {error}");
        assert!(error.contains(&format!(": {key}: ")), "{args:?}: {error}");
    }
}

#[test]
fn malformed_configs_are_one_line_naming_the_key() {
    // The world's config starts with two lines, `[store]` and its path.
    check_malformed("busy_timout_ms = 5\n", "store.busy_timout_ms", 3);
    check_malformed("busy_timeout_ms = \"fast\"\n", "store.busy_timeout_ms", 3);
    check_malformed("[gateway]\nbusy_input = \"fifo\"\n", "gateway.busy_input", 4);
    check_malformed("[model]\nbase_url = \"ftp://models\"\n", "model.base_url", 4);
    check_malformed("write_patience_ms = 10\n", "store.write_patience_ms", 3);
    check_malformed("[slak]\n", "slak", 3);
}

#[test]
fn enabled_platforms_need_their_token() {
    let mut world = World::with_config("[telegram]\nallowed_users = [\"1\"]\n");
    let line = world.herald(&["config", "check"]).fails(2);
    assert!(line.contains("telegram.token_env") && line.contains("TELEGRAM_BOT_TOKEN"), "{line}");
    world.env("TELEGRAM_BOT_TOKEN", "123:secret-token");
    let out = world.herald(&["config", "check"]).ok();
    assert!(out.contains("platforms: telegram") && !out.contains("secret-token"), "{out}");
}

#[test]
fn lookup_order_and_missing_files() {
    let mut world = World::new();
    let nowhere = world.dir().join("nope.toml");
    let line = world.herald(&["--config", nowhere.to_str().unwrap(), "config", "check"]).fails(2);
    assert!(line.contains("nope.toml (from --config) does not exist"), "{line}");
    std::fs::remove_file(&world.config).unwrap();
    let line = world.herald(&["config", "check"]).fails(2);
    assert!(line.contains("(from $HERALD_CONFIG) does not exist"), "{line}");

    world.unset_config_var();
    let home = world.dir().join("home");
    let out = world.herald(&["config", "check"]).ok();
    assert!(out.contains("no file found") && out.contains("defaults apply"), "{out}");
    let default_db = home.join(".local/share/herald/state.db");
    assert!(out.contains(&format!("store: {}", default_db.display())), "{out}");

    let user_config = home.join(".config/herald/config.toml");
    std::fs::create_dir_all(user_config.parent().unwrap()).unwrap();
    std::fs::write(&user_config, "[store]\npath = \"~/elsewhere.db\"\n").unwrap();
    let out = world.herald(&["config", "check"]).ok();
    assert!(out.contains(&format!("config: {}", user_config.display())), "{out}");
    assert!(out.contains(&format!("store: {}", home.join("elsewhere.db").display())), "{out}");
}

#[test]
fn the_example_is_a_valid_config() {
    // A broken current config must not stop the example from printing.
    let world = World::with_config("nonsense = true\n");
    let example = world.herald(&["config", "example"]).ok();
    assert!(example.contains("[store]") && example.contains("# [telegram]"), "{example}");
    let file = world.dir().join("example.toml");
    std::fs::write(&file, &example).unwrap();
    let out = world.herald(&["--config", file.to_str().unwrap(), "config", "check"]).ok();
    assert!(out.contains("platforms: none") && out.ends_with("config ok\n"), "{out}");
    let home_db = world.dir().join("home/.local/share/herald/state.db");
    assert!(out.contains(&format!("store: {}", home_db.display())), "{out}");
}

#[test]
fn an_empty_store_path_is_an_error_not_the_default() {
    let world = World::new();
    std::fs::write(&world.config, "[model]\nmodel = \"m\"\n[store]\npath = \"\"\n").unwrap();
    for args in [&["config", "check"][..], &["sessions", "list"], &["chat"]] {
        let line = world.herald(args).fails(2);
        let at = format!("error: {}:4:", world.config.display());
        assert!(line.starts_with(&at) && line.contains(": store.path: "), "{args:?}: {line}");
        assert!(line.contains("empty"), "{line}");
    }
    assert!(!world.dir().join("home").exists(), "nothing was created under the default path");
}
