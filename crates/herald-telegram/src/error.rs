//! What a failed Bot API call means for the caller, in one line that never holds the token.

use std::time::Duration;

use teloxide::{ApiError, RequestError};

/// A failed Bot API call, sorted by what the caller does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The token is wrong or revoked (401, or 404 for a malformed token): retrying cannot help.
    Unauthorized(String),
    /// Flood control (429): wait this long, then retry.
    RateLimited(Duration),
    /// Another instance is polling (409).
    Conflict(String),
    /// A webhook is set, so `getUpdates` cannot work (409).
    WebhookSet,
    /// Telegram could not parse the HTML entities of the text.
    Markup(String),
    /// The network or Telegram's servers failed (5xx, timeouts, garbage): retry with backoff.
    Transient(String),
    /// Telegram refused the request for good (another 4xx).
    Rejected(String),
}

impl Failure {
    /// Sorts a teloxide error; `token` is scrubbed from every text kept.
    pub(crate) fn classify(err: &RequestError, token: &str) -> Failure {
        let failure = match err {
            RequestError::RetryAfter(after) => Failure::RateLimited(after.duration()),
            RequestError::Network(e) => Failure::Transient(network_reason(e)),
            RequestError::Io(e) => Failure::Transient(format!("i/o error: {e}")),
            RequestError::InvalidJson { .. } => {
                Failure::Transient("telegram answered with something that is not json".into())
            }
            RequestError::MigrateToChatId(to) => {
                Failure::Rejected(format!("the group became the supergroup {to}"))
            }
            RequestError::Api(api) => classify_api(api),
        };
        failure.scrubbed(token)
    }

    /// How long Telegram asked to wait, if it did.
    pub(crate) fn retry_after(&self) -> Option<Duration> {
        match self {
            Failure::RateLimited(after) => Some(*after),
            _ => None,
        }
    }

    /// The one-line reason, for logs and events.
    pub(crate) fn reason(&self) -> String {
        match self {
            Failure::WebhookSet => {
                "conflict: a webhook is set, so long polling cannot work".to_owned()
            }
            Failure::Unauthorized(s)
            | Failure::Conflict(s)
            | Failure::Markup(s)
            | Failure::Transient(s)
            | Failure::Rejected(s) => s.clone(),
            Failure::RateLimited(after) => {
                format!("rate limited by telegram for {} s", after.as_secs_f32())
            }
        }
    }

    fn scrubbed(self, token: &str) -> Failure {
        let clean = |s: String| scrub(&s, token);
        match self {
            Failure::Unauthorized(s) => Failure::Unauthorized(clean(s)),
            Failure::Conflict(s) => Failure::Conflict(clean(s)),
            Failure::Markup(s) => Failure::Markup(clean(s)),
            Failure::Transient(s) => Failure::Transient(clean(s)),
            Failure::Rejected(s) => Failure::Rejected(clean(s)),
            other @ (Failure::RateLimited(_) | Failure::WebhookSet) => other,
        }
    }
}

fn classify_api(api: &ApiError) -> Failure {
    match api {
        ApiError::InvalidToken => Failure::Unauthorized("invalid bot token".into()),
        ApiError::CantParseEntities(text) => Failure::Markup(text.clone()),
        ApiError::TerminatedByOtherGetUpdates => Failure::Conflict(
            "conflict: another instance of this bot is polling (only one may run)".into(),
        ),
        ApiError::CantGetUpdates => Failure::WebhookSet,
        // teloxide drops the HTTP status, so unknown errors are sorted by their description.
        ApiError::Unknown(text) => classify_description(text),
        other => Failure::Rejected(other.to_string()),
    }
}

fn classify_description(text: &str) -> Failure {
    let lower = text.to_ascii_lowercase();
    if lower.contains("webhook is active") {
        Failure::WebhookSet
    } else if lower.starts_with("conflict") {
        Failure::Conflict(text.to_owned())
    } else if lower.starts_with("unauthorized") {
        Failure::Unauthorized(text.to_owned())
    } else if lower.starts_with("too many requests") {
        let after = lower.rsplit(' ').next().and_then(|s| s.parse().ok()).unwrap_or(1);
        Failure::RateLimited(Duration::from_secs(after))
    } else if ["internal server error", "bad gateway", "service unavailable", "gateway timeout"]
        .iter()
        .any(|p| lower.starts_with(p))
        || lower.contains("server error")
    {
        Failure::Transient(format!("telegram server error: {text}"))
    } else if lower.starts_with("bad request: can't parse entities") {
        Failure::Markup(text.to_owned())
    } else {
        Failure::Rejected(text.to_owned())
    }
}

/// reqwest's message names the URL, and Telegram's URLs hold the token: describe the cause instead.
fn network_reason(err: &reqwest::Error) -> String {
    let kind = if err.is_timeout() {
        "timed out"
    } else if err.is_connect() {
        "could not connect"
    } else {
        "network error"
    };
    let mut cause: &dyn std::error::Error = err;
    while let Some(next) = cause.source() {
        cause = next;
    }
    if std::ptr::addr_eq(cause, err as &dyn std::error::Error) {
        format!("{kind} talking to telegram")
    } else {
        format!("{kind} talking to telegram: {cause}")
    }
}

/// Removes the token and line breaks from `text`.
pub(crate) fn scrub(text: &str, token: &str) -> String {
    let text = if token.is_empty() { text.to_owned() } else { text.replace(token, "<token>") };
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(description: &str, expected: Failure) {
        let err = RequestError::Api(ApiError::Unknown(description.into()));
        assert_eq!(Failure::classify(&err, "123:secret"), expected, "for {description:?}");
    }

    #[test]
    fn unknown_errors_are_sorted_by_their_description() {
        check(
            "Internal Server Error",
            Failure::Transient("telegram server error: Internal Server Error".into()),
        );
        check("Bad Gateway", Failure::Transient("telegram server error: Bad Gateway".into()));
        check("Too Many Requests: retry after 7", Failure::RateLimited(Duration::from_secs(7)));
        check("Conflict: something", Failure::Conflict("Conflict: something".into()));
        check(
            "Forbidden: bot is not a member",
            Failure::Rejected("Forbidden: bot is not a member".into()),
        );
        check("Unauthorized", Failure::Unauthorized("Unauthorized".into()));
    }

    #[test]
    fn known_errors_keep_their_meaning() {
        let classify = |api| Failure::classify(&RequestError::Api(api), "123:secret");
        assert_eq!(
            classify(ApiError::InvalidToken),
            Failure::Unauthorized("invalid bot token".into())
        );
        assert_eq!(classify(ApiError::CantGetUpdates), Failure::WebhookSet);
        assert!(matches!(classify(ApiError::TerminatedByOtherGetUpdates), Failure::Conflict(_)));
        assert!(matches!(classify(ApiError::BotBlocked), Failure::Rejected(_)));
        let parse = ApiError::CantParseEntities("Bad Request: can't parse entities: x".into());
        assert!(matches!(classify(parse), Failure::Markup(_)));
    }

    #[test]
    fn the_token_never_survives() {
        let text = "error sending request for url (http://h/bot123:secret/GetMe)\nmore";
        assert_eq!(
            scrub(text, "123:secret"),
            "error sending request for url (http://h/bot<token>/GetMe) more"
        );
        let err = RequestError::Api(ApiError::Unknown("Bad Request: 123:secret".into()));
        assert_eq!(Failure::classify(&err, "123:secret").reason(), "Bad Request: <token>");
    }
}
