//! The checks that types alone cannot make: positive timeouts, http(s) URLs, variable
//! names, channel ids, and keys that exclude each other.

use std::path::Path;

use super::{Config, ConfigError};

/// The most shards `[discord] shards` may name: far past what a bot on one PostgreSQL needs,
/// and a typo like 100000 is caught.
const MAX_DISCORD_SHARDS: u32 = 1024;

/// Returns the first problem in a parsed, resolved config.
pub(crate) fn check(config: &Config, file: &Path, source: &str) -> Result<(), ConfigError> {
    let at = |key: &str, problem: String| ConfigError::at_key(file, source, key, problem);
    let positive = |key: &str, value: u64, example: &str| match value {
        0 => Err(at(key, format!("must be more than 0; use a value like {example}"))),
        _ => Ok(()),
    };
    let url = |key: &str, value: &str, example: &str| match is_http_url(value) {
        true => Ok(()),
        false => Err(at(
            key,
            format!("`{value}` is not an http:// or https:// URL; write it like \"{example}\""),
        )),
    };
    let var = |key: &str, value: &str| match is_env_name(value) {
        true => Ok(()),
        // The value is not echoed: someone may have pasted the token itself here.
        false => Err(at(
            key,
            "must be the name of an environment variable (letters, digits and _), not the \
             secret itself; put the secret in that variable"
                .to_owned(),
        )),
    };
    // `"*"` would read as "every channel", which is what the empty list already says.
    let channels = |key: &str, ids: &[String], example: &str| {
        let bad = ids.iter().find(|id| id.is_empty() || id.contains(char::is_whitespace));
        match (ids.iter().any(|id| id == "*"), bad) {
            (true, _) => Err(at(
                key,
                "\"*\" is not a channel id; leave the list empty to answer in every channel".into(),
            )),
            (false, Some(id)) => Err(at(
                key,
                format!(
                    "\"{id}\" is not a channel id; write ids without spaces, like [\"{example}\"]"
                ),
            )),
            (false, None) => Ok(()),
        }
    };

    let store = &config.store;
    if let Some(url) = &store.url {
        store_url(url).map_err(|why| at("store.url", why))?;
    }
    var("store.password_env", &store.password_env)?;
    if store.max_connections == Some(0) {
        return Err(at("store.max_connections", "is 0; the store needs at least 2".into()));
    }
    positive("store.busy_timeout_ms", store.busy_timeout_ms, "1000")?;
    positive("store.write_patience_ms", store.write_patience_ms, "20000")?;
    if store.write_patience_ms < store.busy_timeout_ms {
        return Err(at(
            "store.write_patience_ms",
            format!(
                "{} ms is shorter than store.busy_timeout_ms ({} ms); make it at least as long",
                store.write_patience_ms, store.busy_timeout_ms
            ),
        ));
    }

    let model = &config.model;
    url("model.base_url", &model.base_url, "https://api.openai.com/v1")?;
    if model.model.trim().is_empty() {
        return Err(at("model.model", "is empty; name the model, like \"gpt-4o-mini\"".into()));
    }
    var("model.api_key_env", &model.api_key_env)?;
    positive("model.request_timeout_s", model.request_timeout_s, "120")?;
    positive("model.max_iterations", model.max_iterations.into(), "90")?;
    if model.context_window < 1024 {
        return Err(at(
            "model.context_window",
            format!(
                "{} tokens is too small to hold a conversation; set the model's real window, \
                 like 128000 (or what a local server was started with)",
                model.context_window
            ),
        ));
    }
    let compression = &config.compression;
    if !(compression.threshold > 0.0 && compression.threshold <= 1.0) {
        return Err(at(
            "compression.threshold",
            format!(
                "{} is not a fraction between 0 and 1; use a value like 0.8",
                compression.threshold
            ),
        ));
    }
    positive("compression.summary_timeout_s", compression.summary_timeout_s, "60")?;
    if compression.summary_model.as_deref().is_some_and(|m| m.trim().is_empty()) {
        return Err(at(
            "compression.summary_model",
            "is empty; name a model, or remove the key to use the session's model".into(),
        ));
    }

    let agent = &config.agent;
    if agent.persona.is_some() && agent.persona_file.is_some() {
        return Err(at(
            "agent.persona_file",
            "set either agent.persona or agent.persona_file, not both; remove one".into(),
        ));
    }
    if let Some(path) = agent.persona_file.as_ref().filter(|p| !p.is_file()) {
        return Err(at(
            "agent.persona_file",
            format!("{} does not exist; create it, or use agent.persona", path.display()),
        ));
    }

    let gateway = &config.gateway;
    positive("gateway.max_concurrent_runs", gateway.max_concurrent_runs.into(), "16")?;
    positive("gateway.drain_timeout_s", gateway.drain_timeout_s, "30")?;

    if let Some(t) = &config.telegram {
        var("telegram.token_env", &t.token_env)?;
        url("telegram.api_url", &t.api_url, "https://api.telegram.org")?;
        channels("telegram.allowed_channels", &t.allowed_channels, "-1001234567890")?;
        match (&t.webhook_url, &t.webhook_listen) {
            (None, None) => {}
            (Some(_), None) | (None, Some(_)) => {
                let key = if t.webhook_url.is_none() {
                    "telegram.webhook_listen"
                } else {
                    "telegram.webhook_url"
                };
                return Err(at(
                    key,
                    "webhook mode needs both telegram.webhook_url (the public URL) and \
                     telegram.webhook_listen (where this replica listens); set both, or neither \
                     to poll"
                        .into(),
                ));
            }
            (Some(url), Some(listen)) => {
                if !is_webhook_url(url) {
                    return Err(at(
                        "telegram.webhook_url",
                        format!(
                            "`{url}` is not an https:// URL (Telegram posts only to https); \
                             write it like \"https://bot.example.com/telegram\""
                        ),
                    ));
                }
                if listen.trim().parse::<std::net::SocketAddr>().is_err() {
                    return Err(at(
                        "telegram.webhook_listen",
                        format!("`{listen}` is not IP:PORT; write it like \"0.0.0.0:8443\""),
                    ));
                }
            }
        }
        if let Some(secret) = &t.webhook_secret_env {
            var("telegram.webhook_secret_env", secret)?;
        }
        let most = u32::from(herald_telegram::MAX_CONNECTIONS);
        if !(1..=most).contains(&t.webhook_max_connections) {
            return Err(at(
                "telegram.webhook_max_connections",
                format!("is {}; Telegram takes 1 to {most}", t.webhook_max_connections),
            ));
        }
    }
    if let Some(d) = &config.discord {
        var("discord.token_env", &d.token_env)?;
        url("discord.api_url", &d.api_url, "https://discord.com")?;
        channels("discord.allowed_channels", &d.allowed_channels, "123456789012345678")?;
        // Discord returns at most 100 messages in one request.
        if !(1..=100).contains(&d.backfill_limit) {
            return Err(at(
                "discord.backfill_limit",
                format!(
                    "{} is not between 1 and 100 (Discord's most per request); use a value like 50",
                    d.backfill_limit
                ),
            ));
        }
        positive("discord.backfill_max_age_s", d.backfill_max_age_s, "86400")?;
        if !(1..=MAX_DISCORD_SHARDS).contains(&d.shards) {
            return Err(at(
                "discord.shards",
                format!(
                    "{} is not between 1 and {MAX_DISCORD_SHARDS}; use the count Discord \
                     recommends for the bot (1 for a bot in fewer than 2500 servers)",
                    d.shards
                ),
            ));
        }
    }
    if let Some(s) = &config.slack {
        var("slack.bot_token_env", &s.bot_token_env)?;
        var("slack.app_token_env", &s.app_token_env)?;
        url("slack.api_url", &s.api_url, "https://slack.com/api")?;
        // slack-morphism appends the method (`/auth.test`) to this root: without `/api` every
        // call would go to a path Slack (and the fake) do not serve.
        if !s.api_url.trim_end_matches('/').to_ascii_lowercase().ends_with("/api") {
            return Err(at(
                "slack.api_url",
                format!(
                    "`{}` does not end with /api; write the Web API root with it, like \
                     \"https://slack.com/api\" or \"http://127.0.0.1:8083/api\"",
                    s.api_url
                ),
            ));
        }
        channels("slack.allowed_channels", &s.allowed_channels, "C0123456789")?;
        let most = herald_slack::MAX_SOCKET_CONNECTIONS;
        if !(1..=most).contains(&s.socket_connections) {
            return Err(at(
                "slack.socket_connections",
                format!(
                    "is {}; Slack keeps 1 to {most} Socket Mode connections per app, and \
                     replicas x socket_connections must stay within {most}",
                    s.socket_connections
                ),
            ));
        }
        positive("slack.api_timeout_s", s.api_timeout_s, "30")?;
    }
    Ok(())
}

/// `http://host...` or `https://host...`, without spaces.
fn is_http_url(value: &str) -> bool {
    let lower = value.to_ascii_lowercase();
    let rest = lower.strip_prefix("https://").or_else(|| lower.strip_prefix("http://"));
    rest.is_some_and(|rest| {
        let host = rest.split(['/', '?', '#']).next().unwrap_or("");
        !host.is_empty() && !value.contains(char::is_whitespace)
    })
}

/// An https URL, or http on loopback (a test behind a local balancer).
fn is_webhook_url(value: &str) -> bool {
    let lower = value.to_ascii_lowercase();
    is_http_url(value)
        && (lower.starts_with("https://")
            || ["http://127.0.0.1", "http://localhost", "http://[::1]"].iter().any(|l| {
                lower
                    .strip_prefix(l)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with([':', '/']))
            }))
}

/// A portable environment variable name: `[A-Za-z_][A-Za-z0-9_]*`.
fn is_env_name(value: &str) -> bool {
    let mut chars = value.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A PostgreSQL URL as `[store] url` takes it: the scheme, a host, a database, and no password.
pub fn store_url(url: &str) -> Result<(), String> {
    let Some(rest) = url.strip_prefix("postgres://").or_else(|| url.strip_prefix("postgresql://"))
    else {
        return Err(format!(
            "\"{}\" is neither sqlite://PATH nor postgres://USER@HOST:PORT/DATABASE",
            url.split("://").next().unwrap_or(url)
        ));
    };
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    if authority.rsplit_once('@').is_some_and(|(user, _)| user.contains(':'))
        || url.to_ascii_lowercase().contains("password=")
    {
        return Err(
            "holds a password; remove it and put it in the variable store.password_env names \
             (HERALD_STORE_PASSWORD by default), never in the file"
                .into(),
        );
    }
    let host = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    if host.is_empty() {
        return Err("names no host; write postgres://USER@HOST:PORT/DATABASE".into());
    }
    let database = rest.split_once('/').map(|(_, db)| db.split('?').next().unwrap_or_default());
    if database.is_none_or(str::is_empty) {
        return Err("names no database; write postgres://USER@HOST:PORT/DATABASE".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_must_be_http() {
        for good in ["https://api.openai.com/v1", "http://127.0.0.1:8080", "HTTPS://x.io"] {
            assert!(is_http_url(good), "{good}");
        }
        for bad in ["ftp://x", "api.openai.com", "https://", "http:///v1", "https://a b", ""] {
            assert!(!is_http_url(bad), "{bad}");
        }
    }

    #[test]
    fn webhook_urls_are_https_or_loopback() {
        for good in ["https://bot.example.com/telegram", "http://127.0.0.1:9000/t"] {
            assert!(is_webhook_url(good), "{good}");
        }
        for bad in ["http://bot.example.com/t", "http://127.0.0.1.example.com/t", "bot.example.com"]
        {
            assert!(!is_webhook_url(bad), "{bad}");
        }
    }

    #[test]
    fn variable_names() {
        assert!(is_env_name("TELEGRAM_BOT_TOKEN") && is_env_name("_x1"));
        for bad in ["", "1ABC", "123456:ABC-DEF", "MY VAR", "xoxb-1-2"] {
            assert!(!is_env_name(bad), "{bad}");
        }
    }
}
