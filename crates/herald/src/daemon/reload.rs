//! SIGHUP: the config file read again and what is safe applied at once (who may talk to the
//! bot and where, the persona of new sessions); every other change is named as waiting for a restart.
//! A file that does not load is one error in the log, and the running settings stay.

use std::path::{Path, PathBuf};

use anyhow::Context;
use herald_gateway::GatewaySettings;
use tokio::signal::unix::Signal;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::commands::gateway::reloadable;
use crate::config::{self, Config, Env, PlatformSection};

/// What one reload found changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Keys applied to the running gateway.
    pub applied: Vec<&'static str>,
    /// Keys that changed but apply only after a restart.
    pub restart: Vec<&'static str>,
}

/// Reloads `path` on every SIGHUP until `stop` is cancelled. `running` is the configuration
/// the daemon started with; `settings` are the running gateway's.
pub async fn on_sighup(
    mut hangups: Signal,
    path: Option<PathBuf>,
    mut running: Config,
    settings: GatewaySettings,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            received = hangups.recv() => {
                if received.is_none() {
                    break;
                }
                info!("SIGHUP received: reloading the configuration");
                let Some(path) = &path else {
                    warn!("herald started without a config file (defaults only): nothing to reload");
                    continue;
                };
                match reload(path, &mut running, &settings) {
                    Ok(changes) => report(path, &changes),
                    Err(e) => {
                        error!("could not reload the configuration, the running settings stay: {e:#}");
                    }
                }
            }
        }
    }
}

/// Reads `path` again and applies it over `running`.
pub fn reload(
    path: &Path,
    running: &mut Config,
    settings: &GatewaySettings,
) -> anyhow::Result<Changes> {
    let source = std::fs::read_to_string(path)
        .with_context(|| format!("could not read config file {}", path.display()))?;
    let new = config::parse(&source, path, &Env::process())?;
    apply(running, new, settings)
}

/// Applies the reloadable part of `new` to `settings` (nothing when it is broken) and records
/// it in `running`, which keeps the values that wait for a restart.
pub fn apply(
    running: &mut Config,
    new: Config,
    settings: &GatewaySettings,
) -> anyhow::Result<Changes> {
    let restart = restart_keys(running, &new);
    // What a restart would pick up stays as it runs; the reloadable part is the new file's.
    let mut effective = running.clone();
    effective.agent = new.agent.clone();
    let mut access = Vec::new();
    take_access(&mut effective.telegram, &new.telegram, &mut access);
    take_access(&mut effective.discord, &new.discord, &mut access);
    take_access(&mut effective.slack, &new.slack, &mut access);
    let live = reloadable(&effective)?;

    let mut applied = Vec::new();
    // The running persona, not the old file's text: a persona file may have been edited.
    if settings.persona() != live.persona {
        applied.push("agent.persona");
    }
    applied.extend(access);
    settings.update(|current| *current = live);
    *running = effective;
    Ok(Changes { applied, restart })
}

/// Gives a platform section that stays configured the access rules of its new version, and
/// names the keys that changed. A section added or removed waits for a restart.
fn take_access<S: PlatformSection>(
    running: &mut Option<S>,
    new: &Option<S>,
    changed: &mut Vec<&'static str>,
) {
    let (Some(running), Some(new)) = (running, new) else { return };
    let (old, new) = (running.access(), new.access());
    let [allowed_users, dm_policy, require_mention, allowed_channels] = S::ACCESS_KEYS;
    for (key, differs) in [
        (allowed_users, old.allowed_users != new.allowed_users),
        (dm_policy, old.dm_policy != new.dm_policy),
        (require_mention, old.require_mention != new.require_mention),
        (allowed_channels, old.allowed_channels != new.allowed_channels),
    ] {
        if differs {
            changed.push(key);
        }
    }
    running.set_access(new);
}

/// A platform section without its access rules: what only a restart applies.
fn without_access<S: PlatformSection + Clone>(section: &Option<S>) -> Option<S> {
    section.clone().map(|mut s| {
        s.set_access(herald_gateway::Access::default());
        s
    })
}

/// The changed keys that the running daemon cannot take: model, store, gateway limits,
/// tokens, API roots, the health address and platforms added or removed.
fn restart_keys(old: &Config, new: &Config) -> Vec<&'static str> {
    let mut keys = Vec::new();
    let mut check = |key, changed| {
        if changed {
            keys.push(key);
        }
    };
    check("store.path", old.store.path != new.store.path);
    check("store.url", old.store.url != new.store.url);
    check("store.password_env", old.store.password_env != new.store.password_env);
    check("store.max_connections", old.store.max_connections != new.store.max_connections);
    check("store.busy_timeout_ms", old.store.busy_timeout_ms != new.store.busy_timeout_ms);
    check("store.write_patience_ms", old.store.write_patience_ms != new.store.write_patience_ms);
    check("model.base_url", old.model.base_url != new.model.base_url);
    check("model.model", old.model.model != new.model.model);
    check("model.api_key_env", old.model.api_key_env != new.model.api_key_env);
    check("model.request_timeout_s", old.model.request_timeout_s != new.model.request_timeout_s);
    check("model.max_iterations", old.model.max_iterations != new.model.max_iterations);
    check("model.context_window", old.model.context_window != new.model.context_window);
    check("compression", old.compression != new.compression);
    let (og, ng) = (&old.gateway, &new.gateway);
    check("gateway.max_concurrent_runs", og.max_concurrent_runs != ng.max_concurrent_runs);
    check("gateway.busy_input", og.busy_input != ng.busy_input);
    check(
        "gateway.group_sessions_per_user",
        og.group_sessions_per_user != ng.group_sessions_per_user,
    );
    check("gateway.drain_timeout_s", og.drain_timeout_s != ng.drain_timeout_s);
    check("gateway.health_listen", og.health_listen != ng.health_listen);
    match (&old.telegram, &new.telegram) {
        (Some(o), Some(n)) => {
            check("telegram.token_env", o.token_env != n.token_env);
            check("telegram.api_url", o.api_url != n.api_url);
        }
        (o, n) => check("telegram", o.is_some() != n.is_some()),
    }
    check("discord", without_access(&old.discord) != without_access(&new.discord));
    check("slack", without_access(&old.slack) != without_access(&new.slack));
    keys
}

fn report(path: &Path, changes: &Changes) {
    let path = path.display();
    if changes.applied.is_empty() {
        info!(%path, "configuration reloaded: nothing to apply");
    } else {
        info!(%path, applied = ?changes.applied, "configuration reloaded (the persona applies to new sessions)");
    }
    if !changes.restart.is_empty() {
        warn!(%path, keys = ?changes.restart, "these changes apply only after a restart: `systemctl restart herald`, or stop and start `herald gateway`");
    }
}

#[cfg(test)]
mod tests {
    use herald_core::Platform;

    use super::*;

    fn parse(text: &str) -> Config {
        let env = Env::fixed(&[("HOME", "/home/test")]);
        config::parse(text, Path::new("/etc/herald/config.toml"), &env).expect("a valid config")
    }

    fn start(text: &str) -> (Config, GatewaySettings) {
        let config = parse(text);
        let settings = crate::commands::gateway::settings(&config).expect("settings");
        (config, settings)
    }

    const BASE: &str = "[telegram]\nallowed_users = [\"1\"]\n";

    #[test]
    fn allowlists_and_the_persona_apply_at_once() {
        let (mut running, settings) = start(BASE);
        let new = parse(
            "[agent]\npersona = \"You are terse.\"\n\
             [telegram]\nallowed_users = [\"1\", \"2\"]\ndm_policy = \"allowlist\"\n",
        );
        let changes = apply(&mut running, new, &settings).expect("applied");
        assert_eq!(
            changes,
            Changes {
                applied: vec!["agent.persona", "telegram.allowed_users", "telegram.dm_policy"],
                restart: vec![]
            }
        );
        let access = settings.access(Platform::Telegram);
        assert!(access.lists("2"));
        assert_eq!(access.dm_policy, herald_gateway::DmPolicy::Allowlist);
        assert_eq!(settings.persona(), "You are terse.");
    }

    #[test]
    fn every_platform_section_gets_its_access_rules_and_their_reload() {
        let (mut running, settings) = start(
            "[telegram]\n[discord]\nallowed_users = [\"7\"]\n[slack]\ndm_policy = \"open\"\n",
        );
        assert!(settings.access(Platform::Discord).lists("7"));
        assert_eq!(settings.access(Platform::Slack).dm_policy, herald_gateway::DmPolicy::Open);
        let new = parse(
            "[telegram]\nallowed_channels = [\"-100\"]\n\
             [discord]\nallowed_users = [\"7\", \"8\"]\n\
             [slack]\ndm_policy = \"open\"\nrequire_mention = false\n\
             allowed_channels = [\"C1\"]\n",
        );
        let changes = apply(&mut running, new, &settings).expect("applied");
        assert_eq!(
            changes,
            Changes {
                applied: vec![
                    "telegram.allowed_channels",
                    "discord.allowed_users",
                    "slack.require_mention",
                    "slack.allowed_channels"
                ],
                restart: vec![]
            }
        );
        assert!(settings.access(Platform::Discord).lists("8"));
        assert!(!settings.access(Platform::Slack).require_mention);
        assert!(settings.access(Platform::Slack).admits_channel("C1"));
        assert!(!settings.access(Platform::Slack).admits_channel("C2"));
        assert!(!settings.access(Platform::Telegram).admits_channel("-200"));
        assert!(settings.access(Platform::Discord).admits_channel("any"));
    }

    #[test]
    fn other_changes_are_named_and_wait_for_a_restart() {
        let (mut running, settings) = start(BASE);
        let new = parse(
            "[model]\nmodel = \"other\"\n[gateway]\nhealth_listen = \"127.0.0.1:9464\"\n\
             [telegram]\nallowed_users = [\"1\"]\napi_url = \"http://127.0.0.1:1\"\n",
        );
        let changes = apply(&mut running, new, &settings).expect("applied");
        assert_eq!(changes.applied, Vec::<&str>::new());
        assert_eq!(
            changes.restart,
            vec!["model.model", "gateway.health_listen", "telegram.api_url"]
        );
        // they keep being reported until the restart
        let again = parse("[model]\nmodel = \"other\"\n[telegram]\nallowed_users = [\"1\"]\n");
        let changes = apply(&mut running, again, &settings).expect("applied");
        assert_eq!(changes.restart, vec!["model.model"]);
    }

    #[test]
    fn a_broken_file_changes_nothing() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("config.toml");
        std::fs::write(&path, "[telegram]\nallowed_users = [\"1\"\n").expect("writing");
        let (mut running, settings) = start(BASE);
        let before = running.clone();
        let err = reload(&path, &mut running, &settings).expect_err("a broken file");
        assert!(format!("{err:#}").contains("config.toml"), "{err:#}");
        assert_eq!(running, before);
        assert!(!settings.access(Platform::Telegram).lists("2"));

        std::fs::write(&path, "[agent]\npersona_file = \"missing.txt\"\n[telegram]\n")
            .expect("writing");
        let err = reload(&path, &mut running, &settings).expect_err("a missing persona file");
        assert!(format!("{err:#}").contains("persona_file"), "{err:#}");
        assert_eq!(running, before);
        assert!(settings.access(Platform::Telegram).lists("1"));
    }
}
