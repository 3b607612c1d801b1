use std::time::Duration;

/// Why a model call failed, in terms a caller can act on.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// HTTP 401 or 403: the key is missing or wrong.
    #[error(
        "the model endpoint {endpoint} refused the API key (HTTP {status}): set the variable \
         named by [model] api_key_env to a valid key"
    )]
    Unauthorized {
        /// The endpoint.
        endpoint: String,
        /// 401 or 403.
        status: u16,
    },
    /// HTTP 404: usually a model name the endpoint does not serve.
    #[error(
        "the model endpoint {endpoint} does not know the model `{model}` (HTTP 404): check [model] model and [model] base_url"
    )]
    UnknownModel {
        /// The endpoint.
        endpoint: String,
        /// The model asked for.
        model: String,
    },
    /// No connection could be made.
    #[error(
        "the model endpoint {endpoint} is unreachable ({reason}): check [model] base_url and that the server is running"
    )]
    Unreachable {
        /// The endpoint.
        endpoint: String,
        /// What the connection attempt said.
        reason: String,
    },
    /// No answer within the request timeout.
    #[error("the model did not answer within {} s: try again, or raise [model] request_timeout_s", .after.as_secs())]
    Timeout {
        /// The timeout that passed.
        after: Duration,
    },
    /// HTTP 429 on every attempt.
    #[error(
        "the model endpoint is rate limiting herald (HTTP 429) and still was after {attempts} attempts: try again later"
    )]
    RateLimited {
        /// Attempts made.
        attempts: u32,
        /// The last `Retry-After`, if any.
        retry_after: Option<Duration>,
    },
    /// HTTP 5xx on every attempt.
    #[error("the model endpoint failed (HTTP {status}) on all {attempts} attempts: {message}")]
    Server {
        /// The last status.
        status: u16,
        /// Attempts made.
        attempts: u32,
        /// The endpoint's message, shortened.
        message: String,
    },
    /// Another 4xx: the request was refused.
    #[error("the model endpoint refused the request (HTTP {status}): {message}")]
    Rejected {
        /// The status.
        status: u16,
        /// The endpoint's message, shortened.
        message: String,
    },
    /// A response that is not a chat completion.
    #[error("the model endpoint sent a response herald cannot read: {reason}")]
    Malformed {
        /// What was wrong with it.
        reason: String,
    },
    /// The turn was cancelled while the call was running.
    #[error("cancelled")]
    Cancelled,
}
