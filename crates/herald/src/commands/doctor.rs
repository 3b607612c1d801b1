//! `herald doctor`: the config, the store's health, the configured platforms and their
//! tokens, and the service unit, one line per check.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::ExitCode;

use herald_store::{Health, Store};
use serde::Serialize;

use super::service::{self, FileState, Host, Mode};
use crate::config::{Config, Env, Loaded, SecretError};
use crate::output;

/// One check's outcome.
#[derive(Debug, Serialize)]
struct Check {
    name: &'static str,
    ok: bool,
    /// Passed, but worth a look; does not fail doctor.
    warning: bool,
    detail: String,
}

impl Check {
    fn new(name: &'static str, ok: bool, detail: impl Into<String>) -> Check {
        Check { name, ok, warning: false, detail: detail.into() }
    }

    fn warn(name: &'static str, detail: impl Into<String>) -> Check {
        Check { warning: true, ..Check::new(name, true, detail) }
    }
}

/// Runs every check and prints `ok`/`FAIL` lines (or JSON); exit 1 when any failed.
pub async fn run(loaded: &Loaded, json: bool, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    // A config that did not load never gets here: herald reported it and exited 2.
    let mut checks = vec![Check::new(
        "config",
        true,
        match &loaded.path {
            Some(path) => format!("{} is valid", path.display()),
            None => "no file; defaults apply".to_owned(),
        },
    )];
    let db = &loaded.config.store.path;
    let postgres = loaded.config.store.url.is_some();
    match Store::open_existing(loaded.config.store_options()).await {
        Ok(store) => {
            checks.push(Check::new("store", true, store.location()));
            let health = store.health().await;
            store.close().await;
            // A PostgreSQL store's files are the server's business.
            if !postgres {
                checks.push(writable_check(db));
                checks.push(directory_check(db));
            }
            match health {
                Ok(health) if postgres => checks.extend(postgres_checks(&health)),
                Ok(health) => checks.extend(store_checks(&health)),
                Err(e) => checks.push(Check::new("health", false, e.to_string())),
            }
        }
        Err(e) => checks.push(Check::new("store", false, e.to_string())),
    }
    checks.extend(platform_checks(&loaded.config));
    checks.extend(service_checks(loaded));

    let healthy = checks.iter().all(|c| c.ok);
    if json {
        output::write_json(out, &serde_json::json!({ "ok": healthy, "checks": checks }))?;
    } else {
        for check in &checks {
            let status = match (check.ok, check.warning) {
                (false, _) => "FAIL",
                (true, true) => "WARN",
                (true, false) => "ok",
            };
            writeln!(out, "{status:<4}  {:<9} {}", check.name, output::one_line(&check.detail))?;
        }
    }
    Ok(if healthy { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// Whether the daemon can go on writing: SQLite creates `-wal`, `-shm` and journal files
/// beside the database, so its directory must take new files; the files already there must
/// be writable by this user (one left by `sudo herald ...` is root's); and the database,
/// created 0600, should still be private to its owner.
fn writable_check(db: &Path) -> Check {
    let dir = db.parent().unwrap_or(Path::new("/"));
    // An unnamed temporary file: nothing is left behind, even if doctor is killed.
    if let Err(e) = tempfile::tempfile_in(dir) {
        let detail = format!("cannot create files in {}: {e}; SQLite needs to", dir.display());
        return Check::new("writable", false, detail);
    }
    let mut sidecars = vec![db.to_owned()];
    for suffix in ["-wal", "-shm", "-lock"] {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        sidecars.push(name.into());
    }
    for file in sidecars.iter().filter(|f| f.exists()) {
        // Opened for writing, neither created nor truncated: nothing changes.
        if let Err(e) = OpenOptions::new().write(true).open(file) {
            let detail =
                format!("cannot write {}: {e}; give it to the user herald runs as", file.display());
            return Check::new("writable", false, detail);
        }
    }
    let mode = std::fs::metadata(db).map(|m| m.permissions().mode() & 0o777).unwrap_or(0o600);
    if mode & 0o077 != 0 {
        let detail = format!(
            "{} has mode {mode:04o}: other users can read the conversations; run chmod 600 {}",
            db.display(),
            db.display()
        );
        return Check::new("writable", false, detail);
    }
    Check::new("writable", true, format!("{} and its directory, mode {mode:04o}", db.display()))
}

/// Who else may write the database's directory: they could replace the database, or create
/// its `-wal`/`-shm` before herald does (a sticky bit does not stop that).
fn directory_check(db: &Path) -> Check {
    let dir = db.parent().unwrap_or(Path::new("/"));
    let mode = match std::fs::metadata(dir) {
        Ok(meta) => meta.permissions().mode() & 0o7777,
        Err(e) => {
            return Check::new(
                "directory",
                false,
                format!("cannot inspect {}: {e}", dir.display()),
            );
        }
    };
    let shown = dir.display();
    if mode & 0o002 != 0 {
        let detail = format!(
            "{shown} is writable by every user (mode {mode:04o}): anyone could replace the \
             database or plant its -wal and -shm files; move store.path to a private directory \
             or run chmod o-w {shown}"
        );
        return Check::new("directory", false, detail);
    }
    if mode & 0o020 != 0 {
        let detail = format!(
            "{shown} is writable by its group (mode {mode:04o}): its members could replace the \
             database; run chmod g-w {shown} unless that is meant"
        );
        return Check::warn("directory", detail);
    }
    Check::new("directory", true, format!("{shown}, mode {mode:04o}"))
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
        // Emptied with the cursor at 0, the indexes are refilled by herald's own deferred
        // indexer; FTS5's 'rebuild' would index messages above the cursor, which the indexer
        // then adds a second time.
        (true, false) => "the search index does not match the messages; empty it with \
             `sqlite3 STATE_DB \"INSERT INTO messages_fts(messages_fts) VALUES('delete-all'); \
             INSERT INTO messages_cjk(messages_cjk) VALUES('delete-all'); \
             UPDATE search_cursor SET upto = 0\"` and the next search re-indexes every message"
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

/// A PostgreSQL store: the server answered (or `store` failed already), its schema, the
/// extensions search needs, and the search index.
fn postgres_checks(health: &Health) -> Vec<Check> {
    let (found, known) = (health.schema_version, health.known_schema_version);
    let schema = match found == known {
        true => format!("version {found}, current"),
        false => format!("version {found}, but this herald knows {known}; use the matching herald"),
    };
    let missing: Vec<&str> = ["pg_trgm", "unaccent"]
        .into_iter()
        .filter(|name| !health.extensions.iter().any(|e| e == name))
        .collect();
    let extensions = match missing.is_empty() {
        true => format!("{} installed", health.extensions.join(", ")),
        false => format!(
            "{} missing; an administrator runs CREATE EXTENSION {} in the database",
            missing.join(", "),
            missing.join("; CREATE EXTENSION ")
        ),
    };
    let server = health.server.clone().unwrap_or_else(|| "PostgreSQL".to_owned());
    vec![
        Check::new("server", true, server),
        Check::new("schema", found == known, schema),
        Check::new("extension", missing.is_empty(), extensions),
        Check::new(
            "search",
            health.fts5,
            match health.fts5 {
                true => "full-text (GIN) and trigram indexes present".to_owned(),
                false => {
                    "the search index is missing; the schema did not finish migrating".to_owned()
                }
            },
        ),
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
        let (ok, detail) = match secret.resolve_in(&Env::process()) {
            Ok(_) => (true, format!("{} from {}", secret.key, secret.var)),
            Err(SecretError::Missing(_)) if !secret.required => {
                (true, format!("{} not set (fine for a local model server)", secret.var))
            }
            Err(problem) => (false, format!("{}: {problem}", secret.key)),
        };
        checks.push(Check::new("secret", ok, detail));
    }
    checks
}

/// The installed units. Not being installed is fine: herald runs as well from a terminal or
/// under another supervisor, so that is only noted. A unit that is installed but is not what
/// this herald would write fails: it runs another binary or config, or stops sooner than the
/// configured drain needs, which kills herald mid-drain and restarts it in a loop.
fn service_checks(loaded: &Loaded) -> Vec<Check> {
    let host = Host::from_env(&Env::process());
    let mut checks = Vec::new();
    for mode in [Mode::System, Mode::User] {
        let (unit, state) = match service::unit_state(mode, &host, loaded) {
            Ok(found) => found,
            // No home directory means no user unit to check.
            Err(_) if mode == Mode::User => continue,
            Err(e) => {
                checks.push(Check::new("service", false, format!("{e:#}")));
                continue;
            }
        };
        let (name, path, flag) = (mode.name(), unit.path.display(), mode.flag());
        let check = match state {
            FileState::Absent => continue,
            FileState::Current => {
                Check::new("service", true, format!("{name} unit {path}, current"))
            }
            FileState::Outdated { installed, expected } => Check::new(
                "service",
                false,
                format!(
                    "{name} unit {path} is outdated (it has `{installed}`, this herald would \
                     write `{expected}`); run herald service install {flag}"
                ),
            ),
            FileState::Unreadable(e) => {
                Check::new("service", false, format!("cannot read {name} unit {path}: {e}"))
            }
        };
        checks.push(check);
    }
    if checks.is_empty() {
        let note = "not installed as a service (fine when herald runs from a terminal; see \
                    herald service install)";
        checks.push(Check::new("service", true, note));
    }
    checks
}
