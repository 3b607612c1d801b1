//! The command line of SPEC section 4, as clap types.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};
use herald_core::{Platform, Role};

/// Chat with an LLM agent from Telegram, Discord, Slack and the terminal.
#[derive(Debug, Parser)]
#[command(name = "herald", version, propagate_version = true)]
pub struct Cli {
    /// The config file (default: $HERALD_CONFIG, ~/.config/herald/config.toml,
    /// /etc/herald/config.toml)
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Log more: -v info, -vv debug (RUST_LOG overrides)
    #[arg(short, long, global = true, action = ArgAction::Count, conflicts_with = "quiet")]
    pub verbose: u8,
    /// Log only errors
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// The log level the flags ask for.
    pub fn log_level(&self) -> tracing::Level {
        match (self.quiet, self.verbose) {
            (true, _) => tracing::Level::ERROR,
            // The daemon reports its lifecycle (connected, shutting down) by default.
            (false, 0) if matches!(self.command, Command::Gateway) => tracing::Level::INFO,
            (false, 0) => tracing::Level::WARN,
            (false, 1) => tracing::Level::INFO,
            (false, 2) => tracing::Level::DEBUG,
            (false, _) => tracing::Level::TRACE,
        }
    }
}

/// herald's commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon with every configured platform (foreground; systemd runs this)
    Gateway,
    /// Talk to the agent in the terminal (a new session unless -c or -r)
    Chat(ChatArgs),
    /// List, read, search, export and tidy stored sessions
    #[command(subcommand)]
    Sessions(SessionsCommand),
    /// Approve or revoke people who asked for access with a pairing code
    #[command(subcommand)]
    Pairing(PairingCommand),
    /// Check the config file, or print an example
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Install, remove or inspect the systemd unit that runs the gateway
    #[command(subcommand)]
    Service(ServiceCommand),
    /// Move the store between SQLite and PostgreSQL
    #[command(subcommand)]
    Store(StoreCommand),
    /// Check the config, the store, the platforms' tokens and the service unit
    Doctor {
        /// Print JSON
        #[arg(long)]
        json: bool,
    },
}

/// `herald store ...`.
#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Copy every session, message and gateway record of the configured store into another,
    /// empty store, then check both hold the same rows (counts and checksums)
    Copy {
        /// The target: sqlite://PATH or postgres://USER@HOST:PORT/DATABASE (no password in it)
        #[arg(long, value_name = "URL")]
        to: String,
        /// The variable holding the target's PostgreSQL password (default: [store] password_env)
        #[arg(long, value_name = "VAR")]
        to_password_env: Option<String>,
    },
}

/// `herald service ...`.
#[derive(Debug, Subcommand)]
pub enum ServiceCommand {
    /// Write the unit (for --system also sysusers.d and tmpfiles.d files) and reload systemd
    Install {
        #[command(flatten)]
        target: ServiceTarget,
        /// Print every file and its path; write nothing
        #[arg(long)]
        dry_run: bool,
    },
    /// Stop and disable the service and remove the files install wrote
    Uninstall {
        #[command(flatten)]
        target: ServiceTarget,
        /// Print what would be removed; remove nothing
        #[arg(long)]
        dry_run: bool,
    },
    /// Whether the unit is installed and current, and whether the service runs
    Status {
        #[command(flatten)]
        target: ServiceTarget,
    },
}

/// Which service manager: `--user` or `--system`.
#[derive(Debug, Clone, Copy, Args)]
#[group(multiple = false)]
pub struct ServiceTarget {
    /// The current user's service (the default, unless run as root)
    #[arg(long)]
    pub user: bool,
    /// The system service, run as the user herald (the default as root)
    #[arg(long)]
    pub system: bool,
}

/// `herald pairing ...`.
#[derive(Debug, Subcommand)]
pub enum PairingCommand {
    /// Pending pairing codes and approved users
    List {
        /// Print JSON
        #[arg(long)]
        json: bool,
    },
    /// Allow the user who was given this code
    Approve {
        /// telegram, discord or slack
        platform: Platform,
        /// The 8-character code the user was given
        code: String,
    },
    /// Take an approved user's access away
    Revoke {
        /// telegram, discord or slack
        platform: Platform,
        /// The platform user id (see `herald pairing list`)
        user_id: String,
    },
}

/// `herald chat`.
#[derive(Debug, Clone, Default, Args)]
pub struct ChatArgs {
    /// Continue the most recent terminal session (the newest of its chain)
    #[arg(short = 'c', long = "continue", conflicts_with = "resume")]
    pub continue_last: bool,
    /// Resume a session by id, unique id prefix, or title (a compressed one: the newest of
    /// its chain)
    #[arg(short, long, value_name = "ID|TITLE")]
    pub resume: Option<String>,
    /// Talk to this model instead of [model] model
    #[arg(long, value_name = "M")]
    pub model: Option<String>,
}

/// `herald sessions ...`.
#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// List sessions, newest first
    List {
        /// Only sessions from this source (cli, telegram, discord, slack)
        #[arg(long, value_name = "S")]
        source: Option<Platform>,
        /// At most this many (0: all)
        #[arg(long, value_name = "N", default_value_t = 50)]
        limit: u32,
        /// Print JSON
        #[arg(long)]
        json: bool,
    },
    /// Show a session's messages, tool calls folded
    Show {
        /// Session id, unique id prefix, or title
        id: String,
        /// Print JSON: the session, its system prompt and every message in full
        #[arg(long)]
        json: bool,
        /// Show the session's chain instead: the sessions that compression made continue one
        /// another, oldest first
        #[arg(long)]
        lineage: bool,
    },
    /// Search every message, best match first
    Search(SearchArgs),
    /// Export sessions as JSON lines or a markdown transcript
    Export(ExportArgs),
    /// Set a session's title (an empty title clears it)
    Rename {
        /// Session id, unique id prefix, or title
        id: String,
        /// The new title; titles are unique
        title: String,
    },
    /// Delete a session and its messages
    Delete {
        /// Session id, unique id prefix, or title
        id: String,
        /// Do not ask for confirmation
        #[arg(short, long)]
        yes: bool,
    },
    /// Delete ended sessions older than an age
    Prune {
        /// The age, like 90d, 12h or 8w
        #[arg(long, value_name = "AGE", value_parser = parse_age)]
        older_than: Duration,
        /// Only sessions from this source
        #[arg(long, value_name = "S")]
        source: Option<Platform>,
    },
    /// Count sessions and messages
    Stats {
        /// Print JSON
        #[arg(long)]
        json: bool,
    },
}

/// `herald sessions search`.
#[derive(Debug, Args)]
pub struct SearchArgs {
    /// What to look for; any text works (quote phrases, OR between words)
    pub query: String,
    /// Only sessions from this source
    #[arg(long, value_name = "S")]
    pub source: Option<Platform>,
    /// Only messages with this role (user, assistant, tool, system)
    #[arg(long, value_name = "R")]
    pub role: Option<Role>,
    /// Only sessions of this platform user id
    #[arg(long, value_name = "U")]
    pub user: Option<String>,
    /// At most this many hits
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub limit: u32,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

/// `herald sessions export`.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("which").required(true).args(["id", "all"]))]
pub struct ExportArgs {
    /// Session id, unique id prefix, or title
    pub id: Option<String>,
    /// Every session, oldest first
    #[arg(long)]
    pub all: bool,
    /// The session's whole chain (the sessions compression made continue one another),
    /// oldest first
    #[arg(long, requires = "id", conflicts_with = "all")]
    pub chain: bool,
    /// The output format
    #[arg(long, value_enum, default_value_t = ExportFormat::Jsonl)]
    pub format: ExportFormat,
    /// Write to this file (created 0600, replaced whole) instead of stdout
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// How `sessions export` writes sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    /// One JSON object per line: a session's fields and its "messages"
    Jsonl,
    /// A readable transcript
    #[value(alias = "md")]
    Markdown,
}

/// `herald config ...`.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Read the config and report the first problem, or "config ok"
    Check,
    /// Print an example config with every key and its default
    Example,
}

/// Parses an age like `90d`, `12h` or `8w`.
pub fn parse_age(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let usage = || format!("`{text}` is not an age; write a number and h, d or w, like 90d");
    let (number, unit) = text.split_at(text.len() - text.chars().last().map_or(0, char::len_utf8));
    let hours: u64 = match unit {
        "h" => 1,
        "d" => 24,
        "w" => 24 * 7,
        _ => return Err(usage()),
    };
    let number: u64 = number.parse().map_err(|_| usage())?;
    let seconds =
        number.checked_mul(hours * 3600).ok_or_else(|| format!("`{text}` is too long"))?;
    Ok(Duration::from_secs(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages() {
        assert_eq!(parse_age("90d"), Ok(Duration::from_secs(90 * 86_400)));
        assert_eq!(parse_age("12h"), Ok(Duration::from_secs(12 * 3600)));
        assert_eq!(parse_age("2w"), Ok(Duration::from_secs(14 * 86_400)));
        assert_eq!(parse_age("0d"), Ok(Duration::ZERO));
        for bad in ["90", "d", "90m", "-1d", "1.5d", "", "90 d", "9é"] {
            let err = parse_age(bad).unwrap_err();
            assert!(err.contains("like 90d"), "{bad}: {err}");
        }
        assert!(parse_age("99999999999999999w").unwrap_err().contains("too long"));
    }

    #[test]
    fn the_cli_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
