use std::time::Duration;

use super::wire::read_error;

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
    /// The request is larger than the model's context window; it is not retried as it is, but
    /// a shorter conversation may fit.
    #[error("the conversation is too long for the model's context window: {detail}")]
    ContextTooLong {
        /// The endpoint's message, shortened.
        detail: String,
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

/// How servers word "the prompt does not fit the context window", lowercase: OpenAI, vLLM and
/// OpenRouter ("maximum context length"), llama.cpp's server, Ollama, vLLM's newer engine,
/// Anthropic-compatible gateways and assorted proxies.
const TOO_LONG: &[&str] = &[
    "maximum context length",
    "context length exceeded",
    "context_length_exceeded",
    "exceeds the context window",
    "exceed context window",
    "exceeds the available context size",
    "context size has been exceeded",
    "exceeds the context length",
    "longer than the maximum model length",
    "prompt is too long",
];

/// The endpoint's message, when an error response with `status` and `body` says the request
/// does not fit the model's context window.
pub(crate) fn context_too_long(status: u16, body: &str) -> Option<String> {
    // Other statuses mean something else even when their text mentions the context.
    if status != 400 && status != 413 {
        return None;
    }
    let error = read_error(body);
    let message = error.message.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase();
    let too_long = error.code.as_deref() == Some("context_length_exceeded")
        || TOO_LONG.iter().any(|phrase| message.contains(phrase));
    too_long.then(|| error.short_message())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(status: u16, body: &str, expected: bool) {
        let detail = context_too_long(status, body);
        assert_eq!(detail.is_some(), expected, "{status} {body}: {detail:?}");
    }

    fn error(message: &str) -> String {
        serde_json::json!({"error": {"message": message, "type": "invalid_request_error"}})
            .to_string()
    }

    #[test]
    fn context_refusals_of_the_usual_servers_are_recognised() {
        let openai = r#"{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;
        check(400, openai, true);
        check(400, r#"{"error":{"message":"too big","code":"context_length_exceeded"}}"#, true);
        let llama_cpp = r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":9000,"n_ctx":8192}}"#;
        check(400, llama_cpp, true);
        check(400, &error("Context size has been exceeded."), true);
        let vllm = r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (5000 in the messages, 0 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}"#;
        check(400, vllm, true);
        check(
            400,
            &error(
                "The decoder prompt (length 9000) is longer than the maximum model length of 8192.",
            ),
            true,
        );
        check(400, r#"{"error":"the input length exceeds the context length"}"#, true);
        check(400, &error("prompt is too long: 210000 tokens > 200000 maximum"), true);
        check(
            400,
            &error(
                "This endpoint's maximum context length is 131072 tokens. However, you requested about 140000 tokens.",
            ),
            true,
        );
        check(413, &error("Request exceeds the context window of this model"), true);
        check(413, "Context length exceeded", true);
        check(400, &error("Input would exceed context window"), true);
    }

    #[test]
    fn other_refusals_are_not_mistaken_for_a_full_context() {
        check(400, &error("Invalid value for 'temperature'"), false);
        check(400, "not json at all", false);
        check(413, &error("Request Entity Too Large"), false);
        check(
            429,
            r#"{"error":{"message":"maximum context length","code":"context_length_exceeded"}}"#,
            false,
        );
        check(500, &error("maximum context length is 8192 tokens"), false);
        check(404, &error("prompt is too long"), false);
    }

    #[test]
    fn the_detail_is_the_endpoints_message_on_one_line() {
        let body = r#"{"error":"the input length exceeds\nthe context length"}"#;
        assert_eq!(
            context_too_long(400, body).as_deref(),
            Some("the input length exceeds the context length")
        );
        let err = ProviderError::ContextTooLong { detail: "limit 8192".into() };
        assert_eq!(
            err.to_string(),
            "the conversation is too long for the model's context window: limit 8192"
        );
    }
}
