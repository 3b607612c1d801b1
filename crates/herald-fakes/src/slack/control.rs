//! The control API under `/_fake/`, for the binary and for tests over HTTP:
//! - `POST /_fake/posts` with a [`Post`] (`{"user": "U1", "text": "hi"}` is a DM; add `channel`,
//!   `thread_ts`, `mention`, `mention_first`, `bot_id`) → [`super::Injected`]
//! - `POST /_fake/edits {"channel": "C1", "ts": "…", "text": "new"}`,
//!   `POST /_fake/deletions {"channel": "C1", "ts": "…"}` → [`super::Injected`] (404 unknown)
//! - `GET /_fake/posted` (`?channel=C1` for one channel), `/_fake/updates`, `/_fake/reactions`,
//!   `/_fake/calls` (`?method=chat.postMessage`), `/_fake/deliveries`, `/_fake/connections`
//! - `POST /_fake/ack_timeout {"ms": 200}`
//! - `POST /_fake/fault {"method": "chat.postMessage", "fault": {"kind": "rate_limited",
//!   "retry_after": 1}, "times": 2}` (kinds: `rate_limited`, `status` with `status`,
//!   `status_after` with `status` (carried out, then answered so), `error` with `error`;
//!   `times` defaults to 1)
//! - `POST /_fake/disconnect {"reason": "refresh_requested"}` (or `warning`, `link_disabled`)
//! - `POST /_fake/drop` (sockets dropped, no close frame), `POST /_fake/silence`
//! - `POST /_fake/down {"seconds": 5}`: down a moment after answering, up again after that
//! - `POST /_fake/invalid_auth {"invalid": true}`
//! - `POST /_fake/held {"count": 9}`: connections other processes of the app hold, against
//!   Slack's limit of 10

use std::collections::HashMap;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};

use super::events::Post;
use super::postman::{Command, Outbound};
use super::server::{Ctx, up_after};
use super::state::SlackFault;
use super::{ApiCall, Delivery, DisconnectReason, Posted, Reaction, Updated};

/// How long `/_fake/down` waits before going down, so that its own answer gets out.
const DOWN_DELAY: Duration = Duration::from_millis(100);

pub(crate) fn routes() -> Router<Ctx> {
    Router::new()
        .route("/_fake/posts", post(inject))
        .route("/_fake/edits", post(edit))
        .route("/_fake/deletions", post(delete))
        .route("/_fake/posted", get(posted))
        .route("/_fake/updates", get(updates))
        .route("/_fake/reactions", get(reactions))
        .route("/_fake/calls", get(calls))
        .route("/_fake/deliveries", get(deliveries))
        .route("/_fake/connections", get(connections))
        .route("/_fake/ack_timeout", post(ack_timeout))
        .route("/_fake/fault", post(fault))
        .route("/_fake/disconnect", post(disconnect))
        .route("/_fake/drop", post(drop_connections))
        .route("/_fake/silence", post(silence))
        .route("/_fake/down", post(down))
        .route("/_fake/invalid_auth", post(invalid_auth))
        .route("/_fake/held", post(held))
}

fn ok() -> Json<Value> {
    Json(json!({"ok": true}))
}

async fn inject(State(ctx): State<Ctx>, Json(post): Json<Post>) -> Json<super::Injected> {
    Json(ctx.shared.inject(&post))
}

#[derive(Deserialize)]
struct Edit {
    channel: String,
    ts: String,
    text: String,
}

fn injected_or_404(injected: Option<super::Injected>) -> Response {
    match injected {
        Some(injected) => Json(injected).into_response(),
        None => {
            (StatusCode::NOT_FOUND, Json(json!({"error": "message_not_found"}))).into_response()
        }
    }
}

async fn edit(State(ctx): State<Ctx>, Json(edit): Json<Edit>) -> Response {
    injected_or_404(ctx.shared.edit(&edit.channel, &edit.ts, &edit.text))
}

#[derive(Deserialize)]
struct Deletion {
    channel: String,
    ts: String,
}

async fn delete(State(ctx): State<Ctx>, Json(deletion): Json<Deletion>) -> Response {
    injected_or_404(ctx.shared.delete(&deletion.channel, &deletion.ts))
}

async fn posted(
    State(ctx): State<Ctx>,
    Query(query): Query<HashMap<String, String>>,
) -> Json<Vec<Posted>> {
    let state = ctx.shared.lock();
    let channel = query.get("channel");
    Json(state.posted.iter().filter(|p| channel.is_none_or(|c| *c == p.channel)).cloned().collect())
}

async fn updates(State(ctx): State<Ctx>) -> Json<Vec<Updated>> {
    Json(ctx.shared.lock().updated.clone())
}

async fn reactions(State(ctx): State<Ctx>) -> Json<Vec<Reaction>> {
    Json(ctx.shared.lock().reactions.clone())
}

async fn calls(
    State(ctx): State<Ctx>,
    Query(query): Query<HashMap<String, String>>,
) -> Json<Vec<ApiCall>> {
    let state = ctx.shared.lock();
    let method = query.get("method");
    Json(state.calls.iter().filter(|c| method.is_none_or(|m| *m == c.method)).cloned().collect())
}

async fn deliveries(State(ctx): State<Ctx>) -> Json<Vec<Delivery>> {
    Json(ctx.shared.lock().deliveries.clone())
}

async fn connections(State(ctx): State<Ctx>) -> Json<Value> {
    let open = ctx.shared.open.load(std::sync::atomic::Ordering::SeqCst);
    let state = ctx.shared.lock();
    Json(json!({
        "open": open, "opened": state.connections_opened, "held": state.held, "peak": state.peak,
        "events": state.sockets,
    }))
}

#[derive(Deserialize)]
struct AckTimeout {
    ms: u64,
}

async fn ack_timeout(State(ctx): State<Ctx>, Json(body): Json<AckTimeout>) -> Json<Value> {
    ctx.shared.lock().ack_timeout = Duration::from_millis(body.ms);
    ok()
}

#[derive(Deserialize)]
struct MethodFault {
    method: String,
    fault: SlackFault,
    times: Option<usize>,
}

async fn fault(State(ctx): State<Ctx>, Json(body): Json<MethodFault>) -> Json<Value> {
    let mut state = ctx.shared.lock();
    let queue = state.faults.entry(body.method).or_default();
    queue.extend(std::iter::repeat_n(body.fault, body.times.unwrap_or(1)));
    ok()
}

#[derive(Deserialize)]
struct Disconnect {
    reason: DisconnectReason,
}

async fn disconnect(State(ctx): State<Ctx>, Json(body): Json<Disconnect>) -> Json<Value> {
    let reason = body.reason.as_str().to_owned();
    ctx.shared.tell_postman(Command::Everyone(Outbound::Disconnect(reason)));
    ok()
}

async fn drop_connections(State(ctx): State<Ctx>) -> Json<Value> {
    ctx.shared.tell_postman(Command::Everyone(Outbound::Abort));
    ok()
}

async fn silence(State(ctx): State<Ctx>) -> Json<Value> {
    ctx.shared.tell_postman(Command::Everyone(Outbound::Silence));
    ok()
}

#[derive(Deserialize)]
struct Down {
    seconds: f64,
}

async fn down(State(ctx): State<Ctx>, Json(body): Json<Down>) -> Response {
    let Ok(duration) = Duration::try_from_secs_f64(body.seconds) else {
        return (StatusCode::BAD_REQUEST, Json(json!({"error": "seconds must be positive"})))
            .into_response();
    };
    let shared = ctx.shared.clone();
    let shutdown = ctx.shutdown.clone();
    tokio::spawn(async move {
        tokio::time::sleep(DOWN_DELAY).await;
        shared.down.send_replace(true);
        up_after(shared, shutdown, duration);
    });
    ok().into_response()
}

#[derive(Deserialize)]
struct InvalidAuth {
    invalid: bool,
}

async fn invalid_auth(State(ctx): State<Ctx>, Json(body): Json<InvalidAuth>) -> Json<Value> {
    ctx.shared.lock().invalid_auth = body.invalid;
    ok()
}

#[derive(Deserialize)]
struct Held {
    count: usize,
}

async fn held(State(ctx): State<Ctx>, Json(body): Json<Held>) -> Json<Value> {
    ctx.shared.lock().held = body.count;
    ctx.shared.bump();
    ok()
}
