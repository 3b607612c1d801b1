//! Logging: `tracing` to stderr, at the level the flags ask for unless `RUST_LOG` says
//! otherwise.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber writing to stderr.
pub fn init(level: tracing::Level) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(level.as_str().to_ascii_lowercase()));
    // A subscriber already installed (only possible in tests) is fine to keep.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colours only for a person at a terminal: journald and log files get plain text.
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .try_init();
}
