use std::path::{Path, PathBuf};
use std::time::Duration;

use super::load::candidates;
use super::*;

const FILE: &str = "/etc/herald/config.toml";

fn env() -> Env {
    Env::fixed(&[("HOME", "/home/ann")])
}

fn parsed(source: &str) -> Result<Config, ConfigError> {
    parse(source, Path::new(FILE), &env())
}

/// The defaults, with paths resolved as for `env()`.
fn defaults() -> Config {
    let mut config = Config::default();
    config.store.path = "/home/ann/.local/share/herald/state.db".into();
    config
}

/// The one-line error for `source`, asserting it names `key` and `line`.
#[track_caller]
fn check_error(source: &str, key: &str, line: usize, says: &str) {
    let err = parsed(source).expect_err("the config should be refused");
    let text = err.to_string();
    assert_eq!(err.key(), Some(key), "{text}");
    assert_eq!(err.line(), Some(line), "{text}");
    assert!(text.starts_with(&format!("{FILE}:{line}:")), "{text}");
    assert!(text.contains(says), "{text} should say {says:?}");
    assert!(!text.contains('\n'), "{text}");
}

#[test]
fn the_example_is_valid_and_all_defaults() {
    assert_eq!(parsed(EXAMPLE).unwrap(), defaults());
    assert_eq!(parsed("").unwrap(), defaults());
}

#[test]
fn the_example_platforms_uncommented_are_valid_defaults() {
    let start = EXAMPLE.find("# [telegram]").expect("the example has a telegram section");
    // Only headers and `key = value` lines are uncommented; prose between them stays a comment.
    let setting = |line: &str| {
        line.starts_with('[')
            || line.split_once(" = ").is_some_and(|(key, _)| {
                !key.is_empty() && key.chars().all(|c| c.is_ascii_lowercase() || c == '_')
            })
    };
    let platforms: String = EXAMPLE[start..]
        .lines()
        .map(|line| line.strip_prefix("# ").filter(|rest| setting(rest)).unwrap_or(line))
        .map(|line| format!("{line}\n"))
        .collect();
    let config = parsed(&format!("{}{platforms}", &EXAMPLE[..start])).unwrap();
    assert_eq!(config.telegram, Some(TelegramConfig::default()));
    assert_eq!(config.discord, Some(DiscordConfig::default()));
    assert_eq!(config.slack, Some(SlackConfig::default()));
    assert_eq!(config.platforms(), ["telegram", "discord", "slack"]);
    assert_eq!(config.secrets().len(), 5);
}

#[test]
fn every_section_parses() {
    let config = parsed(
        r#"
        [store]
        path = "~/data/herald.db"
        busy_timeout_ms = 500
        write_patience_ms = 500
        [model]
        base_url = "http://127.0.0.1:11434/v1"
        model = "llama3"
        api_key_env = "OLLAMA_KEY"
        request_timeout_s = 5
        max_iterations = 3
        [agent]
        persona = "You are terse."
        [gateway]
        max_concurrent_runs = 2
        busy_input = "interrupt"
        group_sessions_per_user = false
        drain_timeout_s = 1
        health_listen = "127.0.0.1:9464"
        [telegram]
        allowed_users = ["1", "*"]
        dm_policy = "allowlist"
        require_mention = false
        allowed_channels = ["-1001234567890"]
        [slack]
        dm_policy = "open"
        "#,
    )
    .unwrap();
    assert_eq!(config.store.path, PathBuf::from("/home/ann/data/herald.db"));
    let options = config.store_options();
    assert_eq!(options.busy_timeout, Duration::from_millis(500));
    assert_eq!(options.write_patience, Duration::from_millis(500));
    assert_eq!(options.path, config.store.path);
    assert_eq!(config.model.model, "llama3");
    assert_eq!(config.agent.persona_text().unwrap(), "You are terse.");
    assert_eq!(config.gateway.busy_input, BusyInput::Interrupt);
    assert_eq!(config.gateway.health_listen, Some("127.0.0.1:9464".parse().unwrap()));
    let telegram = config.telegram.clone().unwrap();
    assert_eq!(telegram.allowed_users, ["1", "*"]);
    assert_eq!(telegram.dm_policy, DmPolicy::Allowlist);
    assert_eq!(telegram.token_env, "TELEGRAM_BOT_TOKEN");
    assert_eq!(telegram.allowed_channels, ["-1001234567890"]);
    let access = &config.access()[&Platform::Telegram];
    assert!(access.admits_channel("-1001234567890") && !access.admits_channel("-1002"));
    let slack = config.slack.unwrap();
    assert_eq!(slack.dm_policy, DmPolicy::Open);
    assert!(slack.allowed_channels.is_empty(), "empty: every channel");
    assert_eq!(config.discord, None);
}

#[test]
fn the_discord_section_maps_to_the_adapter_settings() {
    let config = parsed(
        r#"
        [discord]
        token_env = "HERALD_DISCORD"
        api_url = "http://127.0.0.1:8082/"
        allowed_users = ["200000000000000001"]
        dm_policy = "open"
        require_mention = false
        allowed_channels = ["300000000000000001"]
        auto_thread = true
        backfill_limit = 100
        backfill_max_age_s = 600
        register_commands = false
        shards = 4
        "#,
    )
    .unwrap();
    let discord = config.discord.clone().unwrap();
    let settings = discord.settings(&Secret::new("a-token"));
    assert_eq!(settings.token, "a-token");
    assert_eq!(settings.token_env, "HERALD_DISCORD");
    assert_eq!(settings.api_url.as_deref(), Some("http://127.0.0.1:8082"));
    assert!(settings.auto_thread && !settings.register_commands);
    assert_eq!(settings.backfill_limit, 100);
    assert_eq!(settings.backfill_max_age, Duration::from_secs(600));
    assert_eq!(settings.shards, 4);
    assert!(!format!("{settings:?}").contains("a-token"));
    let access = &config.access()[&Platform::Discord];
    assert!(access.lists("200000000000000001") && !access.require_mention);
    assert_eq!(access.dm_policy, DmPolicy::Open);
    assert!(access.admits_channel("300000000000000001") && !access.admits_channel("3"));

    let defaults = DiscordConfig::default().settings(&Secret::new("t"));
    let expected = herald_discord::DiscordSettings::new("t");
    assert_eq!(format!("{defaults:?}"), format!("{expected:?}"), "the same defaults");
    for discord_itself in ["https://discord.com", "https://discord.com/", "HTTPS://Discord.com"] {
        let section = DiscordConfig { api_url: discord_itself.into(), ..DiscordConfig::default() };
        assert_eq!(section.settings(&Secret::new("t")).api_url, None, "{discord_itself}");
    }
    let proxy = DiscordConfig { api_url: "https://discord.example".into(), ..Default::default() };
    let proxied = proxy.settings(&Secret::new("t")).api_url;
    assert_eq!(proxied.as_deref(), Some("https://discord.example"));
}

#[test]
fn the_slack_section_maps_to_the_adapter_settings() {
    let config = parsed(
        r#"
        [slack]
        bot_token_env = "HERALD_SLACK_BOT"
        app_token_env = "HERALD_SLACK_APP"
        api_url = "http://127.0.0.1:8083/api/"
        allowed_users = ["U0123"]
        require_mention = false
        reply_in_thread = false
        thread_follow_ups = false
        socket_connections = 3
        api_timeout_s = 7
        "#,
    )
    .unwrap();
    let slack = config.slack.clone().unwrap();
    let settings = slack.settings(&Secret::new("xoxb-1"), &Secret::new("xapp-2"));
    assert_eq!((settings.bot_token.as_str(), settings.app_token.as_str()), ("xoxb-1", "xapp-2"));
    assert_eq!(settings.bot_token_env, "HERALD_SLACK_BOT");
    assert_eq!(settings.app_token_env, "HERALD_SLACK_APP");
    assert_eq!(settings.api_url.as_deref(), Some("http://127.0.0.1:8083/api"));
    assert!(!settings.reply_in_thread && !settings.thread_follow_ups);
    assert_eq!(settings.socket_connections, 3);
    assert_eq!(settings.api_timeout, std::time::Duration::from_secs(7));
    let access = &config.access()[&Platform::Slack];
    assert!(access.lists("U0123") && !access.require_mention);
    let secrets = slack.secrets();
    assert_eq!(
        secrets.map(|s| (s.var, s.prefix)),
        [
            ("HERALD_SLACK_BOT".to_owned(), Some("xoxb-")),
            ("HERALD_SLACK_APP".to_owned(), Some("xapp-")),
        ]
    );

    let (bot, app) = (Secret::new("xoxb-1"), Secret::new("xapp-2"));
    let defaults = SlackConfig::default().settings(&bot, &app);
    let expected = herald_slack::SlackSettings::new("xoxb-1", "xapp-2");
    assert_eq!(format!("{defaults:?}"), format!("{expected:?}"), "the same defaults");
    for slack_itself in ["https://slack.com/api", "https://slack.com/api/", "HTTPS://Slack.com/API"]
    {
        let section = SlackConfig { api_url: slack_itself.into(), ..SlackConfig::default() };
        assert_eq!(section.settings(&bot, &app).api_url, None, "{slack_itself}");
    }
}

#[test]
fn type_errors_name_key_and_line() {
    check_error("[store]\nbusy_timout_ms = 5\n", "store.busy_timout_ms", 2, "unknown key");
    check_error("[modle]\nmodel = \"x\"\n", "modle", 1, "use one of `store`");
    check_error(
        "[store]\nbusy_timeout_ms = \"fast\"\n",
        "store.busy_timeout_ms",
        2,
        "whole number",
    );
    check_error("\n[gateway]\nbusy_input = \"fifo\"\n", "gateway.busy_input", 3, "`queue`");
    check_error("[telegram]\nallowed_users = [12]\n", "telegram.allowed_users[0]", 2, "quoted");
    check_error(
        "[discord]\nallowed_channels = [123]\n",
        "discord.allowed_channels[0]",
        2,
        "channel ids as quoted strings",
    );
    check_error("[gateway]\nhealth_listen = \"9464\"\n", "gateway.health_listen", 2, "address");
    check_error("[discord]\nauto_thread = \"yes\"\n", "discord.auto_thread", 2, "a boolean");
    check_error(
        "[discord]\nbackfill_limit = \"50\"\n",
        "discord.backfill_limit",
        2,
        "whole number",
    );
    check_error("[store]\nbusy_timeout_ms = -1\n", "store.busy_timeout_ms", 2, "-1");
}

#[test]
fn value_problems_name_key_and_line() {
    check_error("[model]\nbase_url = \"ftp://x\"\n", "model.base_url", 2, "https://");
    check_error("[store]\npath = \"\"\n", "store.path", 2, "is empty; remove the key");
    check_error("[discord]\napi_url = \"discord.com\"\n", "discord.api_url", 2, "http://");
    for limit in ["0", "101"] {
        let source = format!("[discord]\nbackfill_limit = {limit}\n");
        check_error(&source, "discord.backfill_limit", 2, "not between 1 and 100");
    }
    for shards in ["0", "1025"] {
        let source = format!("[discord]\nshards = {shards}\n");
        check_error(&source, "discord.shards", 2, "not between 1 and 1024; use the count");
    }
    check_error("[discord]\nshards = -1\n", "discord.shards", 2, "");
    check_error(
        "[discord]\nbackfill_max_age_s = 0\n",
        "discord.backfill_max_age_s",
        2,
        "more than 0; use a value like 86400",
    );
    check_error("[store]\nbusy_timeout_ms = 0\n", "store.busy_timeout_ms", 2, "more than 0");
    check_error("[model]\nrequest_timeout_s = 0\n", "model.request_timeout_s", 2, "more than 0");
    check_error("[gateway]\ndrain_timeout_s = 0\n", "gateway.drain_timeout_s", 2, "more than 0");
    check_error(
        "[store]\nbusy_timeout_ms = 5000\nwrite_patience_ms = 1000\n",
        "store.write_patience_ms",
        3,
        "shorter than store.busy_timeout_ms",
    );
    check_error(
        "[agent]\npersona = \"a\"\npersona_file = \"/p.md\"\n",
        "agent.persona_file",
        3,
        "not both",
    );
    check_error("[agent]\npersona_file = \"/nowhere/p.md\"\n", "agent.persona_file", 2, "exist");
    check_error(
        "[slack]\napi_url = \"http://127.0.0.1:8083\"\n",
        "slack.api_url",
        2,
        "does not end with /api",
    );
    check_error("[slack]\napi_url = \"slack.com/api\"\n", "slack.api_url", 2, "http://");
    check_error("[slack]\nreply_in_thread = 1\n", "slack.reply_in_thread", 2, "a boolean");
    check_error("[slack]\napi_timeout_s = 0\n", "slack.api_timeout_s", 2, "30");
    for count in [0, 11] {
        let source = format!("[slack]\nsocket_connections = {count}\n");
        check_error(&source, "slack.socket_connections", 2, "must stay within 10");
    }
    check_error(
        "[slack]\nbot_token_env = \"xoxb-1-2\"\n",
        "slack.bot_token_env",
        2,
        "not the secret",
    );
    check_error(
        "[slack]\nallowed_channels = [\"C1\", \"*\"]\n",
        "slack.allowed_channels",
        2,
        "leave the list empty to answer in every channel",
    );
    check_error(
        "[telegram]\n\nallowed_channels = [\"-100 123\"]\n",
        "telegram.allowed_channels",
        3,
        "like [\"-1001234567890\"]",
    );
    let pasted = "[telegram]\ntoken_env = \"123456:AAH-secret\"\n";
    check_error(pasted, "telegram.token_env", 2, "name of an environment variable");
    assert!(!parsed(pasted).unwrap_err().to_string().contains("secret\""));
}

#[test]
fn syntax_errors_are_one_line_with_a_line_number() {
    // A dotted key is not mapped to its name (see spans.rs); its line still is.
    let err = parsed("store.path = \"\"\n").unwrap_err();
    assert_eq!(err.line(), Some(1), "{err}");
    assert!(err.to_string().contains("is empty"), "{err}");
    let err = parsed("[store]\npath = \"unterminated\n").unwrap_err();
    assert_eq!(err.line(), Some(2), "{err}");
    assert!(!err.to_string().contains('\n'), "{err}");
    let err = parsed("[store]\nbusy_timeout_ms = 1\nbusy_timeout_ms = 2\n").unwrap_err();
    assert!(err.to_string().contains("duplicate key"), "{err}");
}

#[test]
fn lookup_order_and_default_paths() {
    let xdg = Env::fixed(&[("HOME", "/home/ann"), ("XDG_CONFIG_HOME", "/cfg")]);
    assert_eq!(
        candidates(&xdg),
        [PathBuf::from("/cfg/herald/config.toml"), PathBuf::from("/etc/herald/config.toml")]
    );
    assert_eq!(candidates(&env())[0], PathBuf::from("/home/ann/.config/herald/config.toml"));

    let home = Env::fixed(&[("HOME", "/home/ann"), ("HERALD_HOME", "~/h")]);
    let config = parse("", Path::new("/x/c.toml"), &home).unwrap();
    assert_eq!(config.store.path, PathBuf::from("/home/ann/h/state.db"));
    let data = Env::fixed(&[("HOME", "/home/ann"), ("XDG_DATA_HOME", "/data")]);
    let config = parse("[store]\npath = \"rel/s.db\"\n", Path::new("/x/c.toml"), &data).unwrap();
    assert_eq!(config.store.path, PathBuf::from("/x/rel/s.db"));
    let config = parse("", Path::new("/x/c.toml"), &data).unwrap();
    assert_eq!(config.store.path, PathBuf::from("/data/herald/state.db"));
}

#[test]
fn named_files_must_exist() {
    let err = load(Some(Path::new("/nowhere/herald.toml")), &env()).unwrap_err();
    assert!(err.to_string().contains("/nowhere/herald.toml (from --config) does not exist"));
    let named = Env::fixed(&[("HOME", "/home/ann"), ("HERALD_CONFIG", "/nowhere/h.toml")]);
    let err = load(None, &named).unwrap_err();
    assert!(err.to_string().contains("(from $HERALD_CONFIG) does not exist"), "{err}");
}

#[test]
fn no_file_means_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().to_str().unwrap();
    let isolated = Env::fixed(&[("HOME", home), ("XDG_CONFIG_HOME", home)]);
    if Path::new("/etc/herald/config.toml").exists() {
        return; // this machine has a system config, which would rightly be read
    }
    let loaded = load(None, &isolated).unwrap();
    assert_eq!(loaded.path, None);
    assert_eq!(loaded.config.store.path, dir.path().join(".local/share/herald/state.db"));
}

#[test]
fn the_store_is_a_file_or_a_postgres_url_without_its_password() {
    let data = Env::fixed(&[("HOME", "/home/ann"), ("XDG_DATA_HOME", "/data")]);
    let file = Path::new("/x/c.toml");
    let config = parse("[store]\nurl = \"sqlite://rel/s.db\"\n", file, &data).unwrap();
    assert_eq!((config.store.path, config.store.url), (PathBuf::from("/x/rel/s.db"), None));

    let url = "postgres://herald@db.internal:5432/herald";
    let config = parse(&format!("[store]\nurl = \"{url}\"\n"), file, &data).unwrap();
    assert_eq!(config.store.url.as_deref(), Some(url));
    let options = config.store_options();
    assert_eq!(options.postgres.as_ref().unwrap().url, url);
    assert_eq!(options.max_connections, 4);
    let config =
        parse(&format!("[store]\nurl = \"{url}\"\nmax_connections = 40\n"), file, &data).unwrap();
    assert_eq!(config.store_options().max_connections, 40);

    check_error("[store]\nurl = \"postgres://ann:pw@db/h\"\n", "store.url", 2, "holds a password");
    check_error("[store]\nurl = \"postgres://db/h?password=pw\"\n", "store.url", 2, "password");
    check_error("[store]\nurl = \"mysql://db/h\"\n", "store.url", 2, "neither sqlite://PATH");
    check_error("[store]\nurl = \"postgres://db\"\n", "store.url", 2, "names no database");
    let both = parse("[store]\npath = \"a.db\"\nurl = \"sqlite://b.db\"\n", file, &data);
    assert!(both.unwrap_err().to_string().contains("both path and url"));
}

#[test]
fn telegram_webhook_mode_needs_both_keys_and_an_https_url() {
    let listen_only = "[telegram]\nwebhook_listen = \"0.0.0.0:8443\"\n";
    check_error(listen_only, "telegram.webhook_listen", 2, "set both, or neither");
    let url_only = "[telegram]\nwebhook_url = \"https://bot.example.com/telegram\"\n";
    check_error(url_only, "telegram.webhook_url", 2, "set both, or neither");
    let http = "[telegram]\nwebhook_url = \"http://bot.example.com/t\"\nwebhook_listen = \"0.0.0.0:8443\"\n";
    check_error(http, "telegram.webhook_url", 2, "https");
    let port =
        "[telegram]\nwebhook_url = \"https://bot.example.com/t\"\nwebhook_listen = \"8443\"\n";
    check_error(port, "telegram.webhook_listen", 3, "IP:PORT");
    let secret = "[telegram]\nwebhook_secret_env = \"not a name\"\n";
    check_error(secret, "telegram.webhook_secret_env", 2, "name of an environment variable");
    let many = "[telegram]\nwebhook_max_connections = 500\n";
    check_error(many, "telegram.webhook_max_connections", 2, "1 to 100");
    check_error(
        "[telegram]\nwebhook_max_connections = 0\n",
        "telegram.webhook_max_connections",
        2,
        "1 to 100",
    );

    let both = "[telegram]\nwebhook_url = \"https://bot.example.com/t\"\nwebhook_listen = \"0.0.0.0:8443\"\n";
    let telegram = parsed(both).unwrap().telegram.unwrap();
    let settings = telegram.settings(&Secret::new("123:abc")).unwrap();
    let webhook = settings.webhook.unwrap();
    assert_eq!(webhook.url, "https://bot.example.com/t");
    assert_eq!(webhook.listen.to_string(), "0.0.0.0:8443");
    assert_eq!(webhook.secret, herald_telegram::derived_secret("123:abc"));
    assert_eq!(webhook.max_connections, 100);
    let fewer = format!("{both}webhook_max_connections = 40\n");
    let fewer = parsed(&fewer).unwrap().telegram.unwrap();
    assert_eq!(
        fewer.settings(&Secret::new("123:abc")).unwrap().webhook.unwrap().max_connections,
        40
    );
    assert!(!format!("{webhook:?}").contains(&webhook.secret));
    let polling = parsed("[telegram]\n").unwrap().telegram.unwrap();
    assert!(polling.settings(&Secret::new("123:abc")).unwrap().webhook.is_none());
}
