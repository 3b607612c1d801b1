//! What a failed Slack call means for the adapter: try again, or give up on this message.
//! Every text that leaves here has both tokens scrubbed from it.

use std::time::Duration;

use slack_morphism::errors::SlackClientError;

/// How one failed call ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Worth another try (429, 5xx, a lost connection), after at least `after` when known.
    Retry { error: String, after: Option<Duration> },
    /// Slack refused it for good, with its error code (`channel_not_found`, `msg_too_long`).
    Refused { error: String, code: String },
}

impl Failure {
    /// What went wrong, in one line.
    pub(crate) fn text(&self) -> &str {
        match self {
            Failure::Retry { error, .. } | Failure::Refused { error, .. } => error,
        }
    }

    /// Slack's error code, for a refusal.
    pub(crate) fn code(&self) -> Option<&str> {
        match self {
            Failure::Refused { code, .. } => Some(code),
            Failure::Retry { .. } => None,
        }
    }
}

/// The tokens a text must never show.
#[derive(Clone, Default)]
pub(crate) struct Secrets(pub(crate) Vec<String>);

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secrets({} redacted)", self.0.len())
    }
}

impl Secrets {
    /// `text` with every token replaced.
    pub(crate) fn scrub(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for token in self.0.iter().filter(|t| !t.is_empty()) {
            text = text.replace(token.as_str(), "<token>");
        }
        text
    }
}

/// Reads a slack-morphism error for a call of `method`, tokens removed from its text.
pub(crate) fn classify(err: &SlackClientError, method: &str, secrets: &Secrets) -> Failure {
    let line = |text: String| secrets.scrub(&format!("{method}: {}", first_line(&text)));
    match err {
        SlackClientError::RateLimitError(limited) => Failure::Retry {
            error: line(format!("rate limited (retry after {:?})", limited.retry_after)),
            // Slack always says how long; a second is its shortest window when it does not.
            after: Some(limited.retry_after.unwrap_or(Duration::from_secs(1))),
        },
        SlackClientError::ApiError(api) => {
            let error = line(format!("Slack answered {}", api.code));
            match api.code.as_str() {
                // Slack's own trouble, which it documents as worth another try.
                "internal_error"
                | "fatal_error"
                | "service_unavailable"
                | "request_timeout"
                | "ratelimited" => Failure::Retry { error, after: None },
                code => Failure::Refused { error, code: code.to_owned() },
            }
        }
        SlackClientError::HttpError(http) if http.status_code.is_server_error() => {
            Failure::Retry { error: line(format!("HTTP {}", http.status_code)), after: None }
        }
        SlackClientError::HttpError(http) if http.status_code.as_u16() == 429 => Failure::Retry {
            error: line("HTTP 429".to_owned()),
            after: Some(Duration::from_secs(1)),
        },
        SlackClientError::HttpError(http) => Failure::Refused {
            error: line(format!("HTTP {}", http.status_code)),
            code: format!("http_{}", http.status_code.as_u16()),
        },
        // Connection refused or reset, a body cut short, a timeout: the network's trouble.
        other => Failure::Retry { error: line(other.to_string()), after: None },
    }
}

/// Whether a call that failed may have been carried out all the same: a timeout, a 5xx, a
/// lost connection, Slack's own error. Never a rate limit, which Slack answers before acting.
pub(crate) fn ambiguous(err: &SlackClientError) -> bool {
    match err {
        SlackClientError::RateLimitError(_) => false,
        SlackClientError::ApiError(api) => api.code != "ratelimited",
        SlackClientError::HttpError(http) => http.status_code.as_u16() != 429,
        _ => true,
    }
}

/// A Web API call that failed: how it ends, and whether Slack may have carried it out.
#[derive(Debug)]
pub(crate) struct Failed {
    pub(crate) failure: Failure,
    pub(crate) ambiguous: bool,
}

/// Runs one Web API call of `method`, given up after `within`. slack-morphism's client has no
/// timeout of its own, and a half-open connection would hold the call, and the chat's replies
/// behind it, for good; a call cut short may have been carried out, like a lost answer.
pub(crate) async fn timed<T>(
    within: Duration,
    method: &str,
    secrets: &Secrets,
    call: impl Future<Output = Result<T, SlackClientError>>,
) -> Result<T, Failed> {
    match tokio::time::timeout(within, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => {
            Err(Failed { failure: classify(&e, method, secrets), ambiguous: ambiguous(&e) })
        }
        Err(_) => Err(Failed {
            failure: Failure::Retry {
                error: format!("{method}: no answer within {} s", within.as_secs_f32()),
                after: None,
            },
            ambiguous: true,
        }),
    }
}

/// The first line of an error text: slack-morphism appends response bodies on the next ones.
fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_never_survive() {
        let secrets = Secrets(vec!["xoxb-1".into(), "xapp-2".into(), String::new()]);
        assert_eq!(secrets.scrub("Bearer xoxb-1 and xapp-2"), "Bearer <token> and <token>");
        assert_eq!(format!("{secrets:?}"), "Secrets(3 redacted)");
    }
}
