//! REST v10 under `/api/v10`: `GET /gateway`, `GET /gateway/bot`, `GET /users/@me` and `POST
//! /channels/{id}/messages`. Every route but `/gateway` wants `Authorization: Bot TOKEN`
//! (401 otherwise); a post is checked as Discord checks it (400 code 50035 for content over
//! 2000 characters or a reply to an unknown message without `fail_if_not_exists: false`, 50006
//! for an empty message).

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::FakeDiscord;
use super::server::Ctx;
use super::state::{self, Route, SendFault, SentMessage};

/// The longest `content` Discord accepts, in characters.
pub const MAX_CONTENT: usize = 2000;

pub(crate) fn routes() -> Router<Ctx> {
    Router::new()
        .route("/api/v10/gateway", get(gateway))
        .route("/api/v10/gateway/bot", get(gateway_bot))
        .route("/api/v10/users/@me", get(me))
        .route("/api/v10/channels/{channel_id}/messages", post(create_message).get(list_messages))
        .route("/api/v10/channels/{channel_id}", get(get_channel))
        .route("/api/v10/channels/{channel_id}/typing", post(typing))
        .route(
            "/api/v10/channels/{channel_id}/messages/{message_id}/threads",
            post(thread_from_message),
        )
}

pub(crate) fn error(status: StatusCode, code: u32, message: &str) -> Response {
    (status, Json(json!({"message": message, "code": code}))).into_response()
}

pub(crate) fn unauthorized() -> Response {
    error(StatusCode::UNAUTHORIZED, 0, "401: Unauthorized")
}

pub(crate) fn authorized(headers: &HeaderMap) -> bool {
    let expected = format!("Bot {}", FakeDiscord::TOKEN);
    headers.get("authorization").and_then(|v| v.to_str().ok()) == Some(expected.as_str())
}

async fn gateway(State(ctx): State<Ctx>) -> Json<Value> {
    Json(json!({"url": ctx.gateway_url}))
}

async fn gateway_bot(State(ctx): State<Ctx>, headers: HeaderMap) -> Response {
    if !authorized(&headers) {
        return unauthorized();
    }
    let limit =
        json!({"total": 1000, "remaining": 999, "reset_after": 14_400_000, "max_concurrency": 1});
    let shards = ctx.shared.lock().shards.max(1);
    Json(json!({"url": ctx.gateway_url, "shards": shards, "session_start_limit": limit}))
        .into_response()
}

async fn me(headers: HeaderMap) -> Response {
    if !authorized(&headers) {
        return unauthorized();
    }
    Json(state::bot_user()).into_response()
}

fn invalid_form(field: &str, code: &str, message: &str) -> Response {
    let errors = json!({ field: {"_errors": [{"code": code, "message": message}]} });
    let body = json!({"message": "Invalid Form Body", "code": 50035, "errors": errors});
    (StatusCode::BAD_REQUEST, Json(body)).into_response()
}

async fn create_message(
    State(ctx): State<Ctx>,
    Path(channel_id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !authorized(&headers) {
        return unauthorized();
    }
    if let Some(fault) = take_fault(&ctx, Route::CreateMessage) {
        return fault;
    }
    let Ok(channel_id) = channel_id.parse::<u64>() else {
        return invalid_form("channel_id", "NUMBER_TYPE_COERCE", "Value is not snowflake.");
    };
    let body: Value = match serde_json::from_slice(&body) {
        Ok(Value::Object(map)) => Value::Object(map),
        _ => {
            return error(
                StatusCode::BAD_REQUEST,
                50109,
                "The request body contains invalid JSON.",
            );
        }
    };
    let content = match body.get("content") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(_) => {
            return invalid_form(
                "content",
                "STRING_TYPE_CONVERT",
                "Could not interpret value as string.",
            );
        }
    };
    if content.chars().count() > MAX_CONTENT {
        return invalid_form("content", "BASE_TYPE_MAX_LENGTH", "Must be 2000 or fewer in length.");
    }
    let has_other = ["embeds", "sticker_ids", "components", "attachments"]
        .iter()
        .any(|key| body.get(key).and_then(Value::as_array).is_some_and(|a| !a.is_empty()));
    if content.is_empty() && !has_other {
        return error(StatusCode::BAD_REQUEST, 50006, "Cannot send an empty message");
    }
    let nonce = body.get("nonce").filter(|n| !n.is_null()).cloned();
    match &nonce {
        None | Some(Value::Number(_)) => {}
        Some(Value::String(text)) if text.chars().count() <= 25 => {}
        Some(_) => {
            return invalid_form("nonce", "BASE_TYPE_MAX_LENGTH", "Must be 25 or fewer in length.");
        }
    }
    let enforce_nonce = body.get("enforce_nonce").and_then(Value::as_bool).unwrap_or(false);
    let message_reference = body.get("message_reference").filter(|v| !v.is_null()).cloned();
    let allowed_mentions = body.get("allowed_mentions").filter(|v| !v.is_null()).cloned();
    if let Some(allowed) = &allowed_mentions {
        let parse: Vec<&str> = allowed["parse"]
            .as_array()
            .map(|p| p.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if parse.iter().any(|kind| !["roles", "users", "everyone"].contains(kind)) {
            return invalid_form(
                "allowed_mentions",
                "BASE_TYPE_CHOICES",
                "Value must be one of {'roles', 'users', 'everyone'}.",
            );
        }
        // Discord refuses a type both parsed and listed.
        for kind in ["users", "roles"] {
            if parse.contains(&kind) && allowed[kind].as_array().is_some_and(|ids| !ids.is_empty())
            {
                return invalid_form(
                    "allowed_mentions",
                    "MESSAGE_ALLOWED_MENTIONS_PARSE_EXCLUSIVE",
                    "parse and the list of ids are mutually exclusive.",
                );
            }
        }
    }
    let id = {
        let mut state = ctx.shared.lock();
        // A reply to a message Discord does not know fails unless `fail_if_not_exists` is false.
        if let Some(reference) = &message_reference {
            let target = reference["message_id"]
                .as_str()
                .map(str::to_owned)
                .or_else(|| reference["message_id"].as_u64().map(|id| id.to_string()));
            let known = target.as_deref().is_some_and(|target| {
                state.messages.iter().any(|m| m["id"].as_str() == Some(target))
            });
            if !known && reference["fail_if_not_exists"].as_bool() != Some(false) {
                return invalid_form(
                    "message_reference",
                    "MESSAGE_REFERENCE_UNKNOWN_MESSAGE",
                    "Unknown message",
                );
            }
        }
        // With `enforce_nonce`, a second post with the same nonce in the channel gets the first
        // message back instead of a new one.
        let earlier = state
            .sent
            .iter()
            .find(|m| {
                enforce_nonce && nonce.is_some() && m.channel_id == channel_id && m.nonce == nonce
            })
            .map(|m| m.id);
        if let Some(id) = earlier {
            let mut message = state::message(id, channel_id, state::bot_user(), &content, vec![]);
            message["nonce"] = nonce.clone().unwrap_or(Value::Null);
            return Json(message).into_response();
        }
        let id = state.next_id();
        state.sent.push(SentMessage {
            id,
            channel_id,
            content: content.clone(),
            message_reference: message_reference.clone(),
            allowed_mentions,
            nonce: nonce.clone(),
            enforce_nonce,
        });
        id
    };
    let _ = ctx.shared.sent.send_replace(ctx.shared.lock().sent.len());
    let mut message = state::message(id, channel_id, state::bot_user(), &content, vec![]);
    if let Some(nonce) = nonce {
        message["nonce"] = nonce;
    }
    if let Some(reference) = message_reference {
        message["message_reference"] = reference;
    }
    // Discord tells the gateway of the bot's own messages too.
    ctx.shared.lock().messages.push(message.clone());
    ctx.shared.dispatch("MESSAGE_CREATE", message.clone());
    Json(message).into_response()
}

/// The answer of the next fault queued for `route`, if any.
pub(crate) fn take_fault(ctx: &Ctx, route: Route) -> Option<Response> {
    let fault = ctx.shared.lock().faults.get_mut(&route).and_then(|queue| queue.pop_front());
    fault.map(|fault| fault_response(&fault))
}

fn fault_response(fault: &SendFault) -> Response {
    match *fault {
        SendFault::TooManyRequests { retry_after, global } => {
            let body = json!({"message": "You are being rate limited.", "retry_after": retry_after, "global": global, "code": 0});
            let mut response = (StatusCode::TOO_MANY_REQUESTS, Json(body)).into_response();
            let headers = response.headers_mut();
            let seconds = retry_after.ceil().max(0.0) as u64;
            headers.insert("retry-after", seconds.into());
            if let Ok(value) = format!("{retry_after:.3}").parse() {
                headers.insert("x-ratelimit-reset-after", value);
            }
            headers.insert("x-ratelimit-limit", 5u64.into());
            headers.insert("x-ratelimit-remaining", 0u64.into());
            if global {
                headers.insert("x-ratelimit-global", axum::http::HeaderValue::from_static("true"));
                headers.insert("x-ratelimit-scope", axum::http::HeaderValue::from_static("global"));
            } else {
                headers.insert("x-ratelimit-scope", axum::http::HeaderValue::from_static("user"));
            }
            response
        }
        SendFault::Status { status } => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            error(
                status,
                0,
                &format!("{}: {}", status.as_u16(), status.canonical_reason().unwrap_or("Error")),
            )
        }
    }
}

#[derive(serde::Deserialize)]
struct ListQuery {
    before: Option<u64>,
    after: Option<u64>,
    limit: Option<u64>,
}

/// `GET /channels/{id}/messages`: at most `limit` (1 to 100, default 50) messages, newest
/// first; with `after`, the oldest ones after that id; with `before`, the newest before it.
async fn list_messages(
    State(ctx): State<Ctx>,
    Path(channel_id): Path<String>,
    Query(query): Query<ListQuery>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&headers) {
        return unauthorized();
    }
    if let Some(fault) = take_fault(&ctx, Route::ListMessages) {
        return fault;
    }
    ctx.shared.history_asked.send_modify(|n| *n += 1);
    // Read after the hold: what was posted meanwhile is in the answer, as it would be.
    let _ = ctx.shared.history_held.subscribe().wait_for(|held| !*held).await;
    let limit = query.limit.unwrap_or(50);
    if !(1..=100).contains(&limit) {
        return invalid_form("limit", "NUMBER_TYPE_MAX", "int value should be between 1 and 100.");
    }
    let limit = limit as usize;
    let id_of = |m: &Value| m["id"].as_str().and_then(|id| id.parse::<u64>().ok()).unwrap_or(0);
    let state = ctx.shared.lock();
    let in_channel: Vec<&Value> =
        state.messages.iter().filter(|m| m["channel_id"] == channel_id).collect();
    let mut chosen: Vec<Value> = if let Some(after) = query.after {
        in_channel.into_iter().filter(|m| id_of(m) > after).take(limit).cloned().collect()
    } else {
        let before = query.before.unwrap_or(u64::MAX);
        let older: Vec<&Value> = in_channel.into_iter().filter(|m| id_of(m) < before).collect();
        older[older.len().saturating_sub(limit)..].iter().map(|m| (*m).clone()).collect()
    };
    chosen.reverse();
    Json(chosen).into_response()
}

fn unknown_channel() -> Response {
    error(StatusCode::NOT_FOUND, 10003, "Unknown Channel")
}

/// `GET /channels/{id}`: a channel a message was injected in, or a thread; else 404 10003.
async fn get_channel(
    State(ctx): State<Ctx>,
    Path(channel_id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&headers) {
        return unauthorized();
    }
    if let Some(fault) = take_fault(&ctx, Route::GetChannel) {
        return fault;
    }
    let channel =
        channel_id.parse::<u64>().ok().and_then(|id| ctx.shared.lock().channels.get(&id).cloned());
    match channel {
        Some(channel) => Json(channel).into_response(),
        None => unknown_channel(),
    }
}

/// `POST /channels/{id}/typing`: recorded, 204.
async fn typing(
    State(ctx): State<Ctx>,
    Path(channel_id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&headers) {
        return unauthorized();
    }
    if let Some(fault) = take_fault(&ctx, Route::Typing) {
        return fault;
    }
    let Ok(channel_id) = channel_id.parse::<u64>() else {
        return unknown_channel();
    };
    ctx.shared.lock().typing.push(channel_id);
    StatusCode::NO_CONTENT.into_response()
}

/// `POST /channels/{cid}/messages/{mid}/threads {"name": ...}`: a public thread whose id is the
/// message's; a second one for the same message gets 400 code 160004, as on Discord.
async fn thread_from_message(
    State(ctx): State<Ctx>,
    Path((channel_id, message_id)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !authorized(&headers) {
        return unauthorized();
    }
    if let Some(fault) = take_fault(&ctx, Route::StartThread) {
        return fault;
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let Some(name) = body
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty() && n.chars().count() <= 100)
    else {
        return invalid_form("name", "BASE_TYPE_REQUIRED", "This field is required");
    };
    let parent = {
        let state = ctx.shared.lock();
        let parent = channel_id.parse::<u64>().ok().and_then(|id| state.channels.get(&id).cloned());
        let found = state
            .messages
            .iter()
            .any(|m| m["id"] == message_id.as_str() && m["channel_id"] == channel_id.as_str());
        match (parent, found) {
            (Some(parent), true) => parent,
            (None, _) => return unknown_channel(),
            (Some(_), false) => return error(StatusCode::NOT_FOUND, 10008, "Unknown Message"),
        }
    };
    let Some(guild_id) = parent["guild_id"].as_str().and_then(|g| g.parse::<u64>().ok()) else {
        return error(StatusCode::BAD_REQUEST, 50024, "Cannot execute action on this channel type");
    };
    let (Ok(parent_id), Ok(message_id)) = (channel_id.parse::<u64>(), message_id.parse::<u64>())
    else {
        return unknown_channel();
    };
    match ctx.shared.create_thread(guild_id, parent_id, name, Some(message_id), FakeDiscord::BOT_ID)
    {
        Some(thread) => (StatusCode::CREATED, Json(thread)).into_response(),
        None => error(
            StatusCode::BAD_REQUEST,
            160004,
            "A thread has already been created for this message",
        ),
    }
}
