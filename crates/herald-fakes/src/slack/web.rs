//! The Web API at `/api/{method}`, GET or POST. Arguments come from the query string and from
//! a JSON body (`application/json`) or a form (`application/x-www-form-urlencoded`); the token
//! from `Authorization: Bearer …`, or a form's or query's `token` (never a JSON body's, as on
//! Slack). Every answer is HTTP 200 with `ok`, except an unknown method (404) and the faults
//! (429, 5xx). Every call is recorded, the token left out.

use std::collections::HashMap;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{FromRequest, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use serde_json::{Map, Value, json};

use super::methods;
use super::server::Ctx;
use super::state::{ApiCall, SlackFault};

/// The methods the fake answers; any other is `unknown_method`.
pub const METHODS: &[&str] = &[
    "api.test",
    "auth.test",
    "apps.connections.open",
    "chat.postMessage",
    "chat.update",
    "reactions.add",
    "reactions.remove",
    "conversations.info",
    "conversations.history",
    "conversations.replies",
    "assistant.threads.setStatus",
];

pub(crate) fn routes() -> Router<Ctx> {
    Router::new().route("/api/{method}", any(call))
}

/// The arguments of one call, query and body merged (the body wins).
#[derive(Debug, Default)]
pub(crate) struct Args(pub Map<String, Value>);

impl Args {
    /// The argument as a string: a string as is, a number or a boolean written out.
    pub fn text(&self, key: &str) -> Option<String> {
        match self.0.get(key)? {
            Value::String(text) => Some(text.clone()),
            Value::Number(number) => Some(number.to_string()),
            Value::Bool(flag) => Some(flag.to_string()),
            _ => None,
        }
    }

    /// The argument as a non-empty string.
    pub fn required(&self, key: &str) -> Option<String> {
        self.text(key).filter(|text| !text.is_empty())
    }

    /// A boolean argument: `true`/`false`, or in a form `"true"`, `"1"`, `"false"`, `"0"`.
    pub fn flag(&self, key: &str) -> Option<bool> {
        match self.0.get(key)? {
            Value::Bool(flag) => Some(*flag),
            Value::String(text) => match text.as_str() {
                "true" | "1" => Some(true),
                "false" | "0" => Some(false),
                _ => None,
            },
            _ => None,
        }
    }

    /// A JSON argument (`blocks`, `attachments`): a value, or in a form a string holding JSON;
    /// `Err` when that string is not JSON.
    pub fn json(&self, key: &str) -> Result<Option<Value>, ()> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) if text.is_empty() => Ok(None),
            Some(Value::String(text)) => serde_json::from_str(text).map(Some).map_err(|_| ()),
            Some(other) => Ok(Some(other.clone())),
        }
    }
}

/// Who is calling, by the token it sent.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Caller {
    Bot,
    App,
}

/// An answer with `ok: false` and this error, HTTP 200 as Slack sends them.
pub(crate) fn failure(error: &str) -> Response {
    failure_with(StatusCode::OK, json!({"ok": false, "error": error}))
}

/// `body` (with `ok: false` and an `error`) under `status`, the error kept for the record.
pub(crate) fn failure_with(status: StatusCode, body: Value) -> Response {
    let error = body["error"].as_str().unwrap_or_default().to_owned();
    let mut response = (status, Json(body)).into_response();
    response.extensions_mut().insert(CallError(error));
    response
}

async fn call(
    State(ctx): State<Ctx>,
    Path(method): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    request: Request,
) -> Response {
    let headers = request.headers().clone();
    let query_token = query.get("token").cloned();
    let mut args = Args(query.into_iter().map(|(k, v)| (k, Value::String(v))).collect());
    let response = match read_body(request).await {
        Ok((body, form)) => {
            // A token among the arguments counts from a form or the query, never from JSON.
            let form_token = body.get("token").and_then(Value::as_str).filter(|_| form);
            let token_arg = form_token.map(str::to_owned).or(query_token);
            args.0.extend(body);
            answer(&ctx, &method, &args, &headers, token_arg)
        }
        Err(error) => failure(error),
    };
    record(&ctx, method, args, &response);
    if response.extensions().get::<Stalled>().is_some() {
        ctx.shutdown.cancelled().await;
    }
    response
}

/// The body's arguments, and whether it was a form; `Err` with Slack's error for a body that
/// does not parse.
async fn read_body(request: Request) -> Result<(Map<String, Value>, bool), &'static str> {
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    if content_type.starts_with("application/x-www-form-urlencoded") {
        let axum::Form(form) = axum::Form::<HashMap<String, String>>::from_request(request, &())
            .await
            .map_err(|_| "invalid_form_data")?;
        return Ok((form.into_iter().map(|(k, v)| (k, Value::String(v))).collect(), true));
    }
    let bytes = Bytes::from_request(request, &()).await.map_err(|_| "invalid_form_data")?;
    if content_type.starts_with("application/json") {
        return match serde_json::from_slice(&bytes) {
            Ok(Value::Object(map)) => Ok((map, false)),
            _ => Err("invalid_json"),
        };
    }
    // Another content type: Slack reads no arguments from it.
    Ok((Map::new(), false))
}

fn answer(
    ctx: &Ctx,
    method: &str,
    args: &Args,
    headers: &HeaderMap,
    token_arg: Option<String>,
) -> Response {
    if !METHODS.contains(&method) {
        let body = json!({"ok": false, "error": "unknown_method", "req_method": method});
        return failure_with(StatusCode::NOT_FOUND, body);
    }
    if method == "api.test" {
        return Json(json!({"ok": true, "args": args.0})).into_response();
    }
    let caller = match authenticate(ctx, method, headers, token_arg) {
        Ok(caller) => caller,
        Err(error) => return failure(error),
    };
    let fault = ctx.shared.lock().faults.get_mut(method).and_then(|queue| queue.pop_front());
    if let Some(fault) = fault {
        if matches!(fault, SlackFault::StatusAfter { .. } | SlackFault::StallAfter) {
            drop(methods::answer(ctx, method, caller, args));
        }
        return fault_response(&fault);
    }
    let limited = ctx.shared.lock().rate_limited(method);
    if let Some(wait) = limited {
        // Slack's Retry-After is in whole seconds.
        let retry_after = wait.as_millis().div_ceil(1000).max(1) as u64;
        return fault_response(&SlackFault::RateLimited { retry_after });
    }
    methods::answer(ctx, method, caller, args)
}

/// The caller, or Slack's error: `not_authed` without a token, `invalid_auth` for one the
/// fake does not know (or any while revoked), `not_allowed_token_type` for an app-level token
/// outside `apps.connections.open` or a bot token there.
fn authenticate(
    ctx: &Ctx,
    method: &str,
    headers: &HeaderMap,
    token_arg: Option<String>,
) -> Result<Caller, &'static str> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let token = bearer.map(str::to_owned).or(token_arg).filter(|t| !t.is_empty());
    let Some(token) = token else { return Err("not_authed") };
    if ctx.shared.lock().invalid_auth {
        return Err("invalid_auth");
    }
    let caller = if token == ctx.shared.bot_token {
        Caller::Bot
    } else if token == ctx.shared.app_token {
        Caller::App
    } else {
        return Err("invalid_auth");
    };
    let wanted = if method == "apps.connections.open" { Caller::App } else { Caller::Bot };
    if caller == wanted { Ok(caller) } else { Err("not_allowed_token_type") }
}

fn fault_response(fault: &SlackFault) -> Response {
    match fault {
        SlackFault::RateLimited { retry_after } => {
            let body = json!({"ok": false, "error": "ratelimited"});
            let mut response = failure_with(StatusCode::TOO_MANY_REQUESTS, body);
            response.headers_mut().insert(header::RETRY_AFTER, (*retry_after).into());
            response
        }
        SlackFault::Status { status } | SlackFault::StatusAfter { status } => {
            let status = StatusCode::from_u16(*status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let error = if status == StatusCode::SERVICE_UNAVAILABLE {
                "service_unavailable"
            } else {
                "fatal_error"
            };
            failure_with(status, json!({"ok": false, "error": error}))
        }
        SlackFault::Error { error } => failure(error),
        SlackFault::Stall | SlackFault::StallAfter => {
            let mut response = StatusCode::OK.into_response();
            response.extensions_mut().insert(Stalled);
            response
        }
    }
}

/// Marks an answer that is never sent.
#[derive(Clone, Copy, Debug)]
struct Stalled;

/// Records the call; the answer's `error` is read back from what `answer` built, so the record
/// and the wire never differ. The token is dropped from the arguments.
fn record(ctx: &Ctx, method: String, mut args: Args, response: &Response) {
    args.0.remove("token");
    let error = response.extensions().get::<CallError>().map(|e| e.0.clone());
    let status = response.status().as_u16();
    ctx.shared.lock().calls.push(ApiCall { method, args: Value::Object(args.0), status, error });
    ctx.shared.bump();
}

/// The `error` of an answer, attached to it for the record.
#[derive(Clone, Debug)]
pub(crate) struct CallError(pub String);
