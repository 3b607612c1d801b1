//! Injected failures: HTTP errors shaped like OpenAI's, slow answers, broken bodies and dropped
//! connections, each taken for one request before the script.

use std::time::Duration;

use axum::http::header::{CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::wire;

/// The body of [`Fault::Malformed`]: JSON cut short, with `choices` of the wrong type.
pub(crate) const MALFORMED_BODY: &str = r#"{"choices": "nope""#;

/// A failure to inject into one chat request.
///
/// As JSON (for `POST /_fake/fault`): `{"status": {"code": 429, "retry_after": 2}}`, `{"delay_ms":
/// 1500}`, `"malformed"` or `"drop"`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    /// Answer with this status, a `Retry-After: <seconds>` header if given, and `body` or else an
    /// OpenAI-style error for the code (401 `invalid_api_key`, 404 `model_not_found`, 429
    /// `rate_limit_exceeded`, 5xx `server_error`). A code that is not a valid status becomes 500.
    Status {
        /// The HTTP status code.
        code: u16,
        /// Seconds for the `Retry-After` header.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after: Option<u64>,
        /// The exact response body, instead of the usual error for the code.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        body: Option<String>,
    },
    /// Wait this long, then answer as if there were no fault (to trip client timeouts).
    #[serde(rename = "delay_ms", with = "millis")]
    Delay(Duration),
    /// Answer 200 with a body that is not a chat completion ([`MALFORMED_BODY`]).
    Malformed,
    /// Close the connection without answering.
    Drop,
}

impl Fault {
    /// A [`Fault::Status`] with the usual body and no `Retry-After`.
    pub fn status(code: u16) -> Fault {
        Fault::Status { code, retry_after: None, body: None }
    }
}

/// The response for a status fault; `model` names the requested model in a 404.
pub(crate) fn status_response(
    code: u16,
    retry_after: Option<u64>,
    body: Option<&str>,
    model: Option<&str>,
) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = match body {
        Some(body) => body.to_owned(),
        None => usual_error(status.as_u16(), model).to_string(),
    };
    let kind = if serde_json::from_str::<serde_json::Value>(&body).is_ok() {
        "application/json"
    } else {
        "text/plain; charset=utf-8"
    };
    let mut response = (status, body).into_response();
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(kind));
    if let Some(seconds) = retry_after {
        response.headers_mut().insert(RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// The response for [`Fault::Malformed`].
pub(crate) fn malformed_response() -> Response {
    let mut response = (StatusCode::OK, MALFORMED_BODY).into_response();
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// What OpenAI answers with this status.
fn usual_error(code: u16, model: Option<&str>) -> serde_json::Value {
    match code {
        401 => wire::error(
            "Incorrect API key provided",
            "invalid_request_error",
            Some("invalid_api_key"),
        ),
        403 => wire::error("You are not allowed to use this model", "invalid_request_error", None),
        404 => wire::error(
            &format!(
                "The model `{}` does not exist or you do not have access to it.",
                model.unwrap_or(super::FakeModel::MODEL)
            ),
            "invalid_request_error",
            Some("model_not_found"),
        ),
        429 => wire::error(
            "Rate limit reached for requests. Please try again later.",
            "requests",
            Some("rate_limit_exceeded"),
        ),
        503 => wire::error(
            "The engine is currently overloaded, please try again later.",
            "server_error",
            None,
        ),
        500.. => wire::error(
            "The server had an error while processing your request. Sorry about that!",
            "server_error",
            None,
        ),
        _ => {
            wire::error("The request was rejected by the fake model", "invalid_request_error", None)
        }
    }
}

/// `Duration` as whole milliseconds.
mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(
        duration: &Duration,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Duration, D::Error> {
        u64::deserialize(deserializer).map(Duration::from_millis)
    }
}
