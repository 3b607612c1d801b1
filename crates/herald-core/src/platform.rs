use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Where a conversation comes from: the terminal or one of the chat platforms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Platform {
    /// `herald chat` in a terminal.
    Cli,
    /// A Telegram bot.
    Telegram,
    /// A Discord bot.
    Discord,
    /// A Slack app in Socket Mode.
    Slack,
}

impl Platform {
    /// Every platform, in display order.
    pub const ALL: [Platform; 4] =
        [Platform::Cli, Platform::Telegram, Platform::Discord, Platform::Slack];

    /// The lowercase name used in the store, the config and session keys.
    pub fn as_str(self) -> &'static str {
        match self {
            Platform::Cli => "cli",
            Platform::Telegram => "telegram",
            Platform::Discord => "discord",
            Platform::Slack => "slack",
        }
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not one of herald's platforms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsePlatformError(pub String);

impl fmt::Display for ParsePlatformError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown source `{}`: expected one of cli, telegram, discord, slack", self.0)
    }
}

impl std::error::Error for ParsePlatformError {}

impl FromStr for Platform {
    type Err = ParsePlatformError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Platform::ALL
            .into_iter()
            .find(|p| p.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| ParsePlatformError(s.to_owned()))
    }
}

impl TryFrom<String> for Platform {
    type Error = ParsePlatformError;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for p in Platform::ALL {
            assert_eq!(p.as_str().parse::<Platform>(), Ok(p));
        }
        assert_eq!("Telegram".parse::<Platform>(), Ok(Platform::Telegram));
        assert!("irc".parse::<Platform>().unwrap_err().to_string().contains("irc"));
    }
}
