//! `herald store copy`: the configured store into another, empty one, on either backend,
//! verified row for row.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use herald_store::{Store, StoreOptions};

use crate::config::Loaded;

/// Copies the configured store to `to` and prints what both now hold.
pub async fn copy(
    loaded: &Loaded,
    to: &str,
    password_env: Option<&str>,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    let config = &loaded.config;
    let target = target_options(to, password_env.unwrap_or(&config.store.password_env))?;
    let source = Store::open_existing(config.store_options()).await?;
    if same_place(&source, &target) {
        bail!("--to names the configured store itself; name another, empty store");
    }
    let target = Store::open(StoreOptions {
        busy_timeout: Duration::from_millis(config.store.busy_timeout_ms),
        write_patience: Duration::from_millis(config.store.write_patience_ms),
        ..target
    })
    .await
    .with_context(|| format!("could not open the target {to}"))?;
    eprintln!("copying {} to {}", source.location(), target.location());
    // A line per table, and one per 50,000 rows of a long one.
    let mut shown = (String::new(), 0u64);
    let mut progress = |table: &str, rows: u64| {
        if table != shown.0 || rows >= shown.1 + 50_000 {
            eprintln!("  {table}: {rows} rows");
            shown = (table.to_owned(), rows);
        }
    };
    let result = source.copy_to(&target, &mut progress).await;
    source.close().await;
    target.close().await;
    let fingerprint = result?;
    writeln!(out, "{:<18} {:>10}  sha256", "table", "rows")?;
    for table in &fingerprint.tables {
        writeln!(out, "{:<18} {:>10}  {}", table.table, table.rows, &table.sha256[..16])?;
    }
    writeln!(out, "copied and verified: both stores hold the same rows")?;
    Ok(ExitCode::SUCCESS)
}

/// The options of the store `url` names.
fn target_options(url: &str, password_env: &str) -> anyhow::Result<StoreOptions> {
    if let Some(path) = url.strip_prefix("sqlite://") {
        if path.is_empty() {
            bail!("--to sqlite:// names no file; write sqlite://PATH");
        }
        return Ok(StoreOptions::new(PathBuf::from(path)));
    }
    crate::config::check_store_url(url).map_err(|why| anyhow::anyhow!("--to {why}"))?;
    let password = std::env::var(password_env).ok().filter(|p| !p.is_empty());
    Ok(StoreOptions::postgres(url, password))
}

/// Whether `target` is where `source` already is.
fn same_place(source: &Store, target: &StoreOptions) -> bool {
    match &target.postgres {
        Some(pg) => source.location() == pg.url,
        None => {
            let canonical = |p: &std::path::Path| std::fs::canonicalize(p).ok();
            source.backend_name() == "sqlite"
                && canonical(&target.path).is_some()
                && canonical(&target.path) == canonical(std::path::Path::new(&source.location()))
        }
    }
}
