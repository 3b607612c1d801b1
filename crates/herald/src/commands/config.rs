//! `herald config check` and `herald config example`.

use std::io::{self, Write};
use std::process::ExitCode;

use crate::config::{EXAMPLE, Env, Loaded, candidates, check_secrets};

/// Reports where the config came from, checks that enabled platforms have their secrets,
/// and says "config ok". Problems with the file itself were reported while loading it.
pub fn check(loaded: &Loaded, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    check_secrets(loaded, &Env::process())?;
    match &loaded.path {
        Some(path) => writeln!(out, "config: {}", path.display())?,
        None => {
            let looked: Vec<String> =
                candidates(&Env::process()).iter().map(|p| p.display().to_string()).collect();
            writeln!(out, "config: no file found ({}); defaults apply", looked.join(", "))?;
        }
    }
    let config = &loaded.config;
    writeln!(out, "store: {}", config.store.location())?;
    writeln!(out, "model: {} at {}", config.model.model, config.model.base_url)?;
    let platforms = config.platforms();
    let platforms = if platforms.is_empty() { "none".to_owned() } else { platforms.join(", ") };
    writeln!(out, "platforms: {platforms}")?;
    writeln!(out, "config ok")?;
    Ok(ExitCode::SUCCESS)
}

/// Writes the example config.
pub fn write_example(out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    out.write_all(EXAMPLE.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

/// Prints the example config to stdout.
pub fn example() -> anyhow::Result<ExitCode> {
    let mut out = io::stdout().lock();
    write_example(&mut out)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
