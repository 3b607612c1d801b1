//! What a failed Discord call means for the adapter: try again, or give up on this message.
//! Every text that leaves here has the token scrubbed from it.

use std::time::Duration;

use serenity::Error;
use serenity::http::HttpError;

/// How one failed call ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Worth another try (429, 5xx, a lost connection), after at least `after` when known.
    Retry { error: String, after: Option<Duration> },
    /// Discord refused it for good (a 4xx other than 429), with Discord's JSON error code.
    Refused { error: String, code: isize },
}

impl Failure {
    /// What went wrong, in one line.
    pub(crate) fn text(&self) -> &str {
        match self {
            Failure::Retry { error, .. } | Failure::Refused { error, .. } => error,
        }
    }
}

/// Discord's JSON code for "this message already has a thread".
pub(crate) const THREAD_ALREADY_CREATED: isize = 160_004;

/// Reads a serenity error, with `token` removed from its text.
pub(crate) fn classify(err: &Error, token: &str) -> Failure {
    match err {
        Error::Http(HttpError::UnsuccessfulRequest(response)) => {
            let status = response.status_code.as_u16();
            let error = scrub(
                &format!(
                    "{} {} answered {status}: {} (code {})",
                    response.method,
                    path_of(&response.url),
                    response.error.message,
                    response.error.code
                ),
                token,
            );
            match status {
                // serenity does not hand over Retry-After: a second is the shortest bucket reset.
                429 => Failure::Retry { error, after: Some(Duration::from_secs(1)) },
                500..=599 => Failure::Retry { error, after: None },
                _ => Failure::Refused { error, code: response.error.code },
            }
        }
        Error::Http(HttpError::Request(e)) => {
            Failure::Retry { error: scrub(&format!("request failed: {e}"), token), after: None }
        }
        Error::Model(e) => Failure::Refused { error: scrub(&e.to_string(), token), code: -1 },
        other => Failure::Retry { error: scrub(&other.to_string(), token), after: None },
    }
}

/// The path of a URL, without its host (a proxy's address is noise in a log line).
fn path_of(url: &str) -> &str {
    url.find("/api/").map_or(url, |at| &url[at..])
}

/// `text` with every occurrence of `token` replaced.
pub(crate) fn scrub(text: &str, token: &str) -> String {
    if token.is_empty() { text.to_owned() } else { text.replace(token, "<token>") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_never_survives_and_paths_lose_their_host() {
        assert_eq!(scrub("Bot abc.def failed", "abc.def"), "Bot <token> failed");
        assert_eq!(path_of("http://127.0.0.1:9/api/v10/channels/1"), "/api/v10/channels/1");
        assert_eq!(path_of("weird"), "weird");
    }
}
