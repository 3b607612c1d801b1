//! Errors as the Bot API reports them, and the failures a test can inject.
//!
//! Every error is `{"ok": false, "error_code": N, "description": "..."}` with HTTP status N, plus
//! `parameters.retry_after` on a 429; teloxide reads the description (and the parameters), never
//! the code.

use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// What Telegram says to a second poller, word for word (teloxide matches on it).
pub(crate) const CONFLICT: &str = "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running";

/// A failure to inject into the next call of one method.
///
/// As JSON (for `POST /_fake/fault`): `{"kind": "too_many_requests", "retry_after": 2}`,
/// `{"kind": "status", "code": 502}`, `{"kind": "conflict"}` or `{"kind": "drop"}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "FaultJson", into = "FaultJson")]
pub enum TelegramFault {
    /// 429 `Too Many Requests: retry after N` with `parameters.retry_after`.
    TooManyRequests {
        /// Seconds the client must wait.
        retry_after: u32,
    },
    /// An error with this code and Telegram's usual description for it (400 `chat not found`,
    /// 403 `bot was blocked by the user`, 5xx the HTTP reason); not a valid status becomes 500.
    Status(u16),
    /// 409 `Conflict: terminated by other getUpdates request; ...`.
    Conflict,
    /// Close the connection without a response.
    Drop,
    /// Answer this call as usual: queued before other faults, it lets calls through first.
    Pass,
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
enum FaultJson {
    TooManyRequests { retry_after: u32 },
    Status { code: u16 },
    Conflict,
    Drop,
    Pass,
}

impl From<FaultJson> for TelegramFault {
    fn from(json: FaultJson) -> TelegramFault {
        match json {
            FaultJson::TooManyRequests { retry_after } => {
                TelegramFault::TooManyRequests { retry_after }
            }
            FaultJson::Status { code } => TelegramFault::Status(code),
            FaultJson::Pass => TelegramFault::Pass,
            FaultJson::Conflict => TelegramFault::Conflict,
            FaultJson::Drop => TelegramFault::Drop,
        }
    }
}

impl From<TelegramFault> for FaultJson {
    fn from(fault: TelegramFault) -> FaultJson {
        match fault {
            TelegramFault::TooManyRequests { retry_after } => {
                FaultJson::TooManyRequests { retry_after }
            }
            TelegramFault::Status(code) => FaultJson::Status { code },
            TelegramFault::Conflict => FaultJson::Conflict,
            TelegramFault::Drop => FaultJson::Drop,
            TelegramFault::Pass => FaultJson::Pass,
        }
    }
}

/// An `ok: false` answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ApiError {
    pub code: u16,
    pub description: String,
    pub retry_after: Option<u32>,
}

impl ApiError {
    /// An error with this code and description.
    pub(crate) fn new(code: u16, description: impl Into<String>) -> ApiError {
        ApiError { code, description: description.into(), retry_after: None }
    }

    /// A 400 `Bad Request: <detail>`.
    pub(crate) fn bad_request(detail: &str) -> ApiError {
        ApiError::new(400, format!("Bad Request: {detail}"))
    }

    /// What Telegram answers for a wrong token.
    pub(crate) fn unauthorized() -> ApiError {
        ApiError::new(401, "Unauthorized")
    }

    /// What Telegram answers for an unknown method or path.
    pub(crate) fn not_found() -> ApiError {
        ApiError::new(404, "Not Found")
    }

    /// A 429 asking to wait `retry_after` seconds.
    pub(crate) fn flood(retry_after: u32) -> ApiError {
        let description = format!("Too Many Requests: retry after {retry_after}");
        ApiError { retry_after: Some(retry_after), ..ApiError::new(429, description) }
    }

    /// The error a fault stands for; `None` for [`TelegramFault::Drop`].
    pub(crate) fn from_fault(fault: &TelegramFault) -> Option<ApiError> {
        Some(match *fault {
            TelegramFault::TooManyRequests { retry_after } => ApiError::flood(retry_after),
            TelegramFault::Conflict => ApiError::new(409, CONFLICT),
            TelegramFault::Status(code) => usual(code),
            // Filtered out where faults are taken: a passed call gets its usual answer.
            TelegramFault::Drop | TelegramFault::Pass => return None,
        })
    }
}

/// Telegram's usual error for a status code.
fn usual(code: u16) -> ApiError {
    let code = StatusCode::from_u16(code).map_or(500, |s| s.as_u16());
    match code {
        400 => ApiError::bad_request("chat not found"),
        401 => ApiError::unauthorized(),
        403 => ApiError::new(403, "Forbidden: bot was blocked by the user"),
        404 => ApiError::not_found(),
        409 => ApiError::new(409, CONFLICT),
        429 => ApiError::flood(1),
        _ => {
            let reason = StatusCode::from_u16(code).ok().and_then(|s| s.canonical_reason());
            ApiError::new(code, reason.unwrap_or("Internal Server Error"))
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut body =
            json!({"ok": false, "error_code": self.code, "description": self.description});
        if let Some(seconds) = self.retry_after {
            body["parameters"] = json!({ "retry_after": seconds });
        }
        (status, [(CONTENT_TYPE, "application/json")], body.to_string()).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_read_and_write_their_json() {
        for (fault, text) in [
            (
                TelegramFault::TooManyRequests { retry_after: 2 },
                r#"{"kind":"too_many_requests","retry_after":2}"#,
            ),
            (TelegramFault::Status(502), r#"{"kind":"status","code":502}"#),
            (TelegramFault::Conflict, r#"{"kind":"conflict"}"#),
            (TelegramFault::Drop, r#"{"kind":"drop"}"#),
        ] {
            assert_eq!(serde_json::to_string(&fault).unwrap(), text);
            assert_eq!(serde_json::from_str::<TelegramFault>(text).unwrap(), fault);
        }
        assert!(serde_json::from_str::<TelegramFault>(r#"{"kind":"status"}"#).is_err());
    }

    #[test]
    fn status_faults_carry_the_usual_descriptions() {
        let described = |code| ApiError::from_fault(&TelegramFault::Status(code)).unwrap();
        assert_eq!(described(502), ApiError::new(502, "Bad Gateway"));
        assert_eq!(described(403).description, "Forbidden: bot was blocked by the user");
        assert_eq!(described(9999), ApiError::new(500, "Internal Server Error"));
        assert_eq!(described(429).retry_after, Some(1));
        assert_eq!(ApiError::from_fault(&TelegramFault::Drop), None);
    }
}
