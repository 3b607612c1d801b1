//! The real provider: `POST {base_url}/chat/completions` over reqwest with rustls.

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::RETRY_AFTER;
use tracing::{debug, warn};

use super::error::context_too_long;
use super::wire::{Request, Response, error_message};
use super::{ChatRequest, Completion, Provider, ProviderError, RetryPolicy};

/// An OpenAI-compatible chat-completions endpoint: OpenAI, OpenRouter, vLLM, llama.cpp, Ollama.
#[derive(Clone)]
pub struct OpenAiProvider {
    client: reqwest::Client,
    url: String,
    api_key: Option<String>,
    timeout: Duration,
    retry: RetryPolicy,
}

impl std::fmt::Debug for OpenAiProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is never printed.
        f.debug_struct("OpenAiProvider").field("url", &self.url).finish_non_exhaustive()
    }
}

/// What one attempt ended with.
enum Attempt {
    Done(Completion),
    /// Worth another try, after at least this long.
    Retry(ProviderError, Option<Duration>),
    Fail(ProviderError),
}

impl OpenAiProvider {
    /// A client for `base_url` (such as `https://api.openai.com/v1`); `api_key` is sent as a
    /// bearer token when set (local servers often need none).
    pub fn new(
        base_url: &str,
        api_key: Option<String>,
        timeout: Duration,
        retry: RetryPolicy,
    ) -> Result<Self, ProviderError> {
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            .user_agent(concat!("herald/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ProviderError::Unreachable {
                endpoint: base_url.to_owned(),
                reason: format!("could not build the HTTP client: {e}"),
            })?;
        let url = format!("{}/chat/completions", base_url.trim_end_matches('/'));
        Ok(OpenAiProvider { client, url, api_key, timeout, retry })
    }

    async fn attempt(&self, body: &Request<'_>, model: &str) -> Attempt {
        let mut request = self.client.post(&self.url).json(body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let response = match request.send().await {
            Ok(r) => r,
            Err(e) if e.is_timeout() => {
                return Attempt::Fail(ProviderError::Timeout { after: self.timeout });
            }
            Err(e) => {
                let reason = one_line(&e);
                return Attempt::Retry(
                    ProviderError::Unreachable { endpoint: self.url.clone(), reason },
                    None,
                );
            }
        };
        let status = response.status();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let text = match response.text().await {
            Ok(t) => t,
            Err(e) if e.is_timeout() => {
                return Attempt::Fail(ProviderError::Timeout { after: self.timeout });
            }
            Err(e) => {
                let reason =
                    format!("the connection broke while reading the answer: {}", one_line(&e));
                return Attempt::Retry(
                    ProviderError::Unreachable { endpoint: self.url.clone(), reason },
                    None,
                );
            }
        };
        if let Some(detail) = context_too_long(status.as_u16(), &text) {
            return Attempt::Fail(ProviderError::ContextTooLong { detail });
        }
        let endpoint = self.url.clone();
        match status {
            s if s.is_success() => match serde_json::from_str::<Response>(&text)
                .map_err(|e| e.to_string())
                .and_then(Response::into_parts)
            {
                Ok((message, usage)) => Attempt::Done(Completion { message, usage }),
                Err(reason) => Attempt::Fail(ProviderError::Malformed { reason }),
            },
            StatusCode::TOO_MANY_REQUESTS => {
                Attempt::Retry(ProviderError::RateLimited { attempts: 0, retry_after }, retry_after)
            }
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                Attempt::Fail(ProviderError::Unauthorized { endpoint, status: status.as_u16() })
            }
            StatusCode::NOT_FOUND => {
                Attempt::Fail(ProviderError::UnknownModel { endpoint, model: model.to_owned() })
            }
            s if s.is_server_error() => Attempt::Retry(
                ProviderError::Server {
                    status: s.as_u16(),
                    attempts: 0,
                    message: error_message(&text),
                },
                retry_after,
            ),
            s => Attempt::Fail(ProviderError::Rejected {
                status: s.as_u16(),
                message: error_message(&text),
            }),
        }
    }
}

impl Provider for OpenAiProvider {
    async fn complete(&self, request: ChatRequest<'_>) -> Result<Completion, ProviderError> {
        let body = Request::new(&request);
        let mut attempt = 1;
        loop {
            let (error, retry_after) = match self.attempt(&body, request.model).await {
                Attempt::Done(completion) => return Ok(completion),
                Attempt::Fail(error) => return Err(error),
                Attempt::Retry(error, retry_after) => (error, retry_after),
            };
            let wait = retry_after.unwrap_or_else(|| self.retry.backoff(attempt));
            if attempt >= self.retry.attempts || wait > self.retry.max_delay {
                return Err(with_attempts(error, attempt));
            }
            warn!(attempt, wait_ms = wait.as_millis() as u64, error = %error, "model call failed; retrying");
            tokio::time::sleep(wait).await;
            attempt += 1;
            debug!(attempt, "retrying the model call");
        }
    }
}

fn with_attempts(error: ProviderError, attempts: u32) -> ProviderError {
    match error {
        ProviderError::RateLimited { retry_after, .. } => {
            ProviderError::RateLimited { attempts, retry_after }
        }
        ProviderError::Server { status, message, .. } => {
            ProviderError::Server { status, attempts, message }
        }
        other => other,
    }
}

/// reqwest's error and its causes on one line.
fn one_line(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
