//! [`ConfigError`]: one line per problem, `FILE:LINE:COL: KEY: what is wrong; the fix`.

use std::fmt;
use std::path::{Path, PathBuf};

use super::spans;

/// A problem with the configuration, printed as one line; `herald` exits 2 on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    file: Option<PathBuf>,
    position: Option<(usize, usize)>,
    key: Option<String>,
    problem: String,
}

impl ConfigError {
    /// A problem not tied to a file (a `--config` path that does not exist).
    pub(crate) fn new(problem: impl Into<String>) -> Self {
        ConfigError { file: None, position: None, key: None, problem: one_line(&problem.into()) }
    }

    /// A problem with `key`, at the line of its value when `source` shows it.
    pub(crate) fn at_key(file: &Path, source: &str, key: &str, problem: impl Into<String>) -> Self {
        let position = spans::value_span(source, key).map(|s| spans::line_col(source, s.start));
        ConfigError {
            file: Some(file.to_owned()),
            position,
            key: Some(key.to_owned()),
            problem: one_line(&problem.into()),
        }
    }

    /// A problem with `key` whose line is not known.
    pub(crate) fn for_key(file: Option<&Path>, key: &str, problem: impl Into<String>) -> Self {
        ConfigError {
            file: file.map(Path::to_owned),
            position: None,
            key: Some(key.to_owned()),
            problem: one_line(&problem.into()),
        }
    }

    /// toml's error, whose `Display` spans several lines, as one line with its key.
    pub(crate) fn from_toml(file: &Path, source: &str, err: &toml::de::Error) -> Self {
        let span = err.span();
        let key = span.as_ref().and_then(|s| spans::key_at(source, s));
        ConfigError {
            file: Some(file.to_owned()),
            position: span.map(|s| spans::line_col(source, s.start)),
            problem: explain(err.message(), key.as_deref()),
            key,
        }
    }

    /// The dotted key at fault, when known.
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// The 1-based line at fault, when known.
    pub fn line(&self) -> Option<usize> {
        self.position.map(|(line, _)| line)
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{}", file.display())?;
            if let Some((line, column)) = self.position {
                write!(f, ":{line}:{column}")?;
            }
            f.write_str(": ")?;
        }
        if let Some(key) = &self.key {
            write!(f, "{key}: ")?;
        }
        f.write_str(&self.problem)
    }
}

impl std::error::Error for ConfigError {}

/// toml's message in herald's words, with what to do about it.
fn explain(message: &str, key: Option<&str>) -> String {
    let message = one_line(message);
    if let Some(rest) = message.strip_prefix("unknown field ") {
        let (name, expected) = rest.split_once(", expected ").unwrap_or((rest, ""));
        let expected = expected.trim_start_matches("one of ");
        return match expected {
            "" => format!("unknown key {name}; remove it"),
            _ => format!("unknown key {name}; remove it or use one of {expected}"),
        };
    }
    if let Some(rest) = message.strip_prefix("unknown variant ") {
        let (value, expected) = rest.split_once(", expected ").unwrap_or((rest, ""));
        let expected = expected.trim_start_matches("one of ");
        return format!("unknown value {value}; use {expected}");
    }
    let message = message
        .replace("expected u64", "expected a whole number")
        .replace("expected u32", "expected a whole number")
        .replace("a sequence", "a list");
    if key.is_some_and(|k| k.contains("allowed_users")) {
        return format!("{message}; write user ids as quoted strings, like [\"123456789\"]");
    }
    if key.is_some_and(|k| k.contains("allowed_channels")) {
        return format!("{message}; write channel ids as quoted strings, like [\"123456789\"]");
    }
    if key.is_some_and(|k| k.ends_with("health_listen")) {
        return format!("{message}; write an address and port, like \"127.0.0.1:9464\"");
    }
    if message.starts_with("is empty; ") {
        // herald's own check (see `named_path`), which already says what to do.
        return message;
    }
    if key.is_none() && message.starts_with("duplicate key") {
        return format!("{message}; keep only one");
    }
    format!("{message}; see `herald config example` for every key and its type")
}

/// Joins the lines of a multi-line message.
fn one_line(text: &str) -> String {
    text.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_one_line_and_say_what_to_do() {
        assert_eq!(
            explain("unknown field `x`, expected one of `a`, `b`", Some("store.x")),
            "unknown key `x`; remove it or use one of `a`, `b`"
        );
        assert_eq!(
            explain("unknown variant `fifo`, expected `queue` or `interrupt`", None),
            "unknown value `fifo`; use `queue` or `interrupt`"
        );
        assert_eq!(
            explain("invalid table header\nexpected `.`, `]`", None),
            "invalid table header; expected `.`, `]`; see `herald config example` for every key and its type"
        );
        let err = ConfigError::new("a\n  b\n");
        assert_eq!(err.to_string(), "a; b");
    }
}
