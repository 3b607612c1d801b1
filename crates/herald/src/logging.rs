//! Logging: `tracing` to stderr, at the level the flags ask for unless `RUST_LOG` says
//! otherwise, without serenity's repeats of what herald reports itself.

use std::io::IsTerminal;

use tracing::Level;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::prelude::*;

/// Installs the global subscriber writing to stderr.
pub fn init(level: Level) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(level.as_str().to_ascii_lowercase()));
    // serenity's gateway errors repeat what the Discord adapter reports itself (a warning
    // while it reconnects, or why it stopped); shown only when RUST_LOG names serenity.
    let repeats = !std::env::var("RUST_LOG").is_ok_and(|asked| asked.contains("serenity"));
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        // Colours only for a person at a terminal: journald and log files get plain text.
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .with_filter(filter)
        .with_filter(filter_fn(move |meta| {
            !(repeats
                && *meta.level() == Level::ERROR
                && meta.target().starts_with("serenity::gateway"))
        }));
    // A subscriber already installed (only possible in tests) is fine to keep.
    let _ = tracing_subscriber::registry().with(layer).try_init();
}
