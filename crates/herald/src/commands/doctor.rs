//! `herald doctor`: the store's health and the configured platforms, one line per check.

use std::io::Write;
use std::process::ExitCode;

use herald_store::{Health, Store};
use serde::Serialize;

use crate::config::{Config, Loaded, resolve};
use crate::output;

/// One check's outcome.
#[derive(Debug, Serialize)]
struct Check {
    name: &'static str,
    ok: bool,
    detail: String,
}

impl Check {
    fn new(name: &'static str, ok: bool, detail: impl Into<String>) -> Check {
        Check { name, ok, detail: detail.into() }
    }
}

/// Runs every check and prints `ok`/`FAIL` lines (or JSON); exit 1 when any failed.
pub async fn run(loaded: &Loaded, json: bool, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let mut checks = vec![Check::new(
        "config",
        true,
        match &loaded.path {
            Some(path) => path.display().to_string(),
            None => "no file; defaults apply".to_owned(),
        },
    )];
    let path = loaded.config.store.path.display().to_string();
    match Store::open(loaded.config.store_options()).await {
        Ok(store) => {
            checks.push(Check::new("store", true, path));
            match store.health().await {
                Ok(health) => checks.extend(store_checks(&health)),
                Err(e) => checks.push(Check::new("health", false, e.to_string())),
            }
            store.close().await;
        }
        Err(e) => checks.push(Check::new("store", false, e.to_string())),
    }
    checks.extend(platform_checks(&loaded.config));

    let healthy = checks.iter().all(|c| c.ok);
    if json {
        output::write_json(out, &serde_json::json!({ "ok": healthy, "checks": checks }))?;
    } else {
        for check in &checks {
            let status = if check.ok { "ok" } else { "FAIL" };
            writeln!(out, "{status:<4}  {:<9} {}", check.name, output::one_line(&check.detail))?;
        }
    }
    Ok(if healthy { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn store_checks(health: &Health) -> Vec<Check> {
    let (found, known) = (health.schema_version, health.known_schema_version);
    let schema = match found == known {
        true => format!("version {found}, current"),
        false => format!("version {found}, but this herald knows {known}; use the matching herald"),
    };
    let wal = health.journal_mode.eq_ignore_ascii_case("wal");
    let journal = match wal {
        true => "WAL".to_owned(),
        false => format!(
            "journal mode is {}, not WAL; concurrent writers will wait: keep the database on a \
             local filesystem",
            health.journal_mode
        ),
    };
    let search_ok = health.fts5 && health.search_index_ok;
    let fts = match (health.fts5, health.search_index_ok) {
        (true, true) => format!(
            "FTS5 search index present and consistent ({} messages waiting to be indexed)",
            health.unindexed
        ),
        (true, false) => "the search index does not match the messages; run \
             `sqlite3 STATE_DB \"INSERT INTO messages_fts(messages_fts) VALUES('rebuild')\"`"
            .to_owned(),
        (false, _) => {
            "FTS5 or the search index is missing; this SQLite cannot search messages".to_owned()
        }
    };
    let intact = health.integrity == ["ok"];
    let integrity = match intact {
        true => "integrity check ok".to_owned(),
        false => format!(
            "integrity check failed: {}; restore a backup",
            health.integrity.iter().take(3).cloned().collect::<Vec<_>>().join("; ")
        ),
    };
    vec![
        Check::new("schema", found == known, schema),
        Check::new("journal", wal, journal),
        Check::new("search", search_ok, fts),
        Check::new("integrity", intact, integrity),
    ]
}

fn platform_checks(config: &Config) -> Vec<Check> {
    let platforms = config.platforms();
    let mut checks = vec![Check::new(
        "platforms",
        true,
        match platforms.is_empty() {
            true => "none configured; add a [telegram], [discord] or [slack] section".to_owned(),
            false => format!("configured: {}", platforms.join(", ")),
        },
    )];
    for secret in config.secrets() {
        let (ok, detail) = match resolve(&secret.var) {
            Ok(_) => (true, format!("{} from {}", secret.key, secret.var)),
            Err(missing) if secret.required => (false, format!("{}: {missing}", secret.key)),
            Err(_) => (true, format!("{} not set (fine for a local model server)", secret.var)),
        };
        checks.push(Check::new("secret", ok, detail));
    }
    checks
}
