//! Secrets: read from the environment variables the config names, never from the file,
//! and never printed.

use std::fmt;

use super::load::{Env, Loaded};
use super::{Config, ConfigError};

/// A token or key. Its `Debug` and `Display` print `***`, so it cannot leak into logs.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value itself, for the one place that sends it to the platform.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// An environment variable named by the config that is unset or empty.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the environment variable {var} is not set; set it to the secret \
     (for the service, in its EnvironmentFile)"
)]
pub struct MissingSecret {
    /// The variable's name.
    pub var: String,
}

/// Reads the secret held by the process's environment variable `var`.
pub fn resolve(var: &str) -> Result<Secret, MissingSecret> {
    resolve_in(var, &Env::process())
}

/// Reads the secret held by `var` in `env`; unset, empty and non-UTF-8 values are missing.
pub fn resolve_in(var: &str, env: &Env) -> Result<Secret, MissingSecret> {
    env.var(var)
        .and_then(|v| v.into_string().ok())
        .filter(|v| !v.trim().is_empty())
        .map(Secret)
        .ok_or_else(|| MissingSecret { var: var.to_owned() })
}

/// A secret the config refers to: which key names it, and whether it must be set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretRef {
    /// The dotted key naming the variable (`telegram.token_env`).
    pub key: &'static str,
    /// The environment variable.
    pub var: String,
    /// Whether herald cannot work without it (platform tokens) or may (a local model).
    pub required: bool,
    /// How the value must start, for tokens whose kind shows in their prefix (`xoxb-`).
    pub prefix: Option<&'static str>,
}

/// Why a secret the config refers to cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// The variable is unset or empty.
    #[error(transparent)]
    Missing(#[from] MissingSecret),
    /// The variable holds another kind of token; the value itself is never shown.
    #[error(
        "the environment variable {var} does not hold the right token: it must start with \
         {prefix}; check that the two tokens are not swapped"
    )]
    WrongPrefix {
        /// The variable's name.
        var: String,
        /// How its value must start.
        prefix: &'static str,
    },
}

impl SecretRef {
    /// The secret from `env`, refused when unset or not starting with [`SecretRef::prefix`].
    pub fn resolve_in(&self, env: &Env) -> Result<Secret, SecretError> {
        let secret = resolve_in(&self.var, env)?;
        match self.prefix {
            Some(prefix) if !secret.expose().trim().starts_with(prefix) => {
                Err(SecretError::WrongPrefix { var: self.var.clone(), prefix })
            }
            _ => Ok(secret),
        }
    }
}

impl Config {
    /// Every secret the config refers to: the model key and each enabled platform's tokens.
    pub fn secrets(&self) -> Vec<SecretRef> {
        let entry = |key, var: &String, required| SecretRef {
            key,
            var: var.clone(),
            required,
            prefix: None,
        };
        let mut refs = vec![entry("model.api_key_env", &self.model.api_key_env, false)];
        if let Some(t) = &self.telegram {
            refs.push(entry("telegram.token_env", &t.token_env, true));
            if let Some(var) = &t.webhook_secret_env {
                refs.push(entry("telegram.webhook_secret_env", var, true));
            }
        }
        if let Some(d) = &self.discord {
            refs.push(entry("discord.token_env", &d.token_env, true));
        }
        if let Some(s) = &self.slack {
            refs.extend(s.secrets());
        }
        refs
    }
}

/// Fails on the first secret an enabled platform needs that `env` does not hold, or holds
/// in a form its platform cannot take.
pub fn check_secrets(loaded: &Loaded, env: &Env) -> Result<(), ConfigError> {
    for secret in loaded.config.secrets() {
        match secret.resolve_in(env) {
            Ok(_) => {}
            Err(SecretError::Missing(_)) if !secret.required => {}
            Err(problem) => {
                return Err(ConfigError::for_key(
                    loaded.path.as_deref(),
                    secret.key,
                    problem.to_string(),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_print_their_value() {
        let secret = Secret::new("xoxb-very-secret");
        assert_eq!(format!("{secret}"), "***");
        assert_eq!(format!("{secret:?}"), "Secret(***)");
        assert_eq!(secret.expose(), "xoxb-very-secret");
    }

    #[test]
    fn resolve_reads_the_named_variable() {
        let env = Env::fixed(&[("TOKEN", "abc"), ("EMPTY", " ")]);
        assert_eq!(resolve_in("TOKEN", &env).map(|s| s.expose().to_owned()), Ok("abc".into()));
        let missing = resolve_in("EMPTY", &env).unwrap_err();
        assert!(missing.to_string().contains("EMPTY is not set"), "{missing}");
        assert!(resolve_in("UNSET", &env).is_err());
    }

    #[test]
    fn enabled_platforms_need_their_tokens() {
        let mut config = Config::default();
        let loaded =
            |config: &Config| Loaded { path: Some("/c.toml".into()), config: config.clone() };
        assert_eq!(check_secrets(&loaded(&config), &Env::fixed(&[])), Ok(()));
        config.slack = Some(Default::default());
        let env = Env::fixed(&[("SLACK_BOT_TOKEN", "xoxb-1")]);
        let err = check_secrets(&loaded(&config), &env).unwrap_err().to_string();
        assert!(
            err.starts_with(
                "/c.toml: slack.app_token_env: the environment variable SLACK_APP_TOKEN"
            )
        );
        assert!(!err.contains("xoxb-1"), "{err}");

        let swapped =
            Env::fixed(&[("SLACK_BOT_TOKEN", "xapp-1-A-2"), ("SLACK_APP_TOKEN", "xoxb-3")]);
        let err = check_secrets(&loaded(&config), &swapped).unwrap_err().to_string();
        assert_eq!(
            err,
            "/c.toml: slack.bot_token_env: the environment variable SLACK_BOT_TOKEN does not hold \
             the right token: it must start with xoxb-; check that the two tokens are not swapped"
        );
        let app_wrong = Env::fixed(&[("SLACK_BOT_TOKEN", "xoxb-1"), ("SLACK_APP_TOKEN", "xoxp-2")]);
        let err = check_secrets(&loaded(&config), &app_wrong).unwrap_err().to_string();
        assert!(err.contains("slack.app_token_env") && err.contains("start with xapp-"), "{err}");
        assert!(!err.contains("xoxp-2"), "{err}");
        let right = Env::fixed(&[("SLACK_BOT_TOKEN", "xoxb-1"), ("SLACK_APP_TOKEN", "xapp-2")]);
        assert_eq!(check_secrets(&loaded(&config), &right), Ok(()));
    }
}
