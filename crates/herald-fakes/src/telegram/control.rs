//! The control API under `/_fake/`: what [`super::FakeTelegram`] offers in Rust, over HTTP for
//! the binary. It keeps answering while the Bot API is offline.

use axum::Json;
use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};

use super::faults::TelegramFault;
use super::records::{EditedMessage, RecordedRequest, SentMessage};
use super::server::Ctx;
use super::user::UserMessage;

/// The control routes.
pub(crate) fn routes() -> Router<Ctx> {
    Router::new()
        .route("/_fake/messages", post(inject))
        .route("/_fake/raw_messages", post(inject_raw))
        .route("/_fake/redeliver", post(redeliver))
        .route("/_fake/sent", get(sent))
        .route("/_fake/edits", get(edits))
        .route("/_fake/chat_actions", get(chat_actions))
        .route("/_fake/requests", get(requests))
        .route("/_fake/offsets", get(offsets))
        .route("/_fake/pending", get(pending))
        .route("/_fake/fault", post(push_fault))
        .route("/_fake/offline", post(offline))
        .route("/_fake/reject_markup", post(reject_markup))
        .route("/_fake/webhook", post(webhook).get(webhook_state))
        .route("/_fake/repeat", post(repeat))
        .route("/_fake/reset", post(reset))
}

async fn inject(State(ctx): State<Ctx>, Json(msg): Json<UserMessage>) -> Json<Value> {
    let id = ctx.shared.queue(|state| state.inject(&msg));
    Json(json!({ "update_id": id }))
}

/// The body is read as text: `Json` would refuse the lone surrogates this route exists for.
async fn inject_raw(State(ctx): State<Ctx>, message: String) -> Response {
    match ctx.shared.queue(|state| state.inject_raw(&message)) {
        Ok(id) => Json(json!({ "update_id": id })).into_response(),
        Err(error) => (StatusCode::BAD_REQUEST, Json(json!({ "error": error }))).into_response(),
    }
}

#[derive(Deserialize)]
struct Update {
    update_id: i64,
}

async fn redeliver(State(ctx): State<Ctx>, Json(update): Json<Update>) -> Response {
    match ctx.shared.queue(|state| state.redeliver(update.update_id)) {
        Some(id) => Json(json!({ "update_id": id })).into_response(),
        None => {
            let error = format!("no update {} was ever queued", update.update_id);
            (StatusCode::NOT_FOUND, Json(json!({ "error": error }))).into_response()
        }
    }
}

#[derive(Deserialize)]
struct ChatFilter {
    #[serde(default)]
    chat_id: Option<i64>,
}

async fn sent(State(ctx): State<Ctx>, Query(filter): Query<ChatFilter>) -> Json<Vec<SentMessage>> {
    let state = ctx.shared.lock();
    let wanted = |m: &&SentMessage| filter.chat_id.is_none_or(|chat| m.chat_id == chat);
    Json(state.sent.iter().filter(wanted).cloned().collect())
}

async fn edits(State(ctx): State<Ctx>) -> Json<Vec<EditedMessage>> {
    Json(ctx.shared.lock().edits.clone())
}

async fn chat_actions(State(ctx): State<Ctx>) -> Json<Vec<Value>> {
    let state = ctx.shared.lock();
    Json(
        state
            .actions
            .iter()
            .map(|(chat, action)| json!({"chat_id": chat, "action": action}))
            .collect(),
    )
}

async fn requests(State(ctx): State<Ctx>) -> Json<Vec<RecordedRequest>> {
    Json(ctx.shared.lock().requests.clone())
}

async fn offsets(State(ctx): State<Ctx>) -> Json<Vec<Option<i64>>> {
    Json(ctx.shared.lock().offsets.clone())
}

async fn pending(State(ctx): State<Ctx>) -> Json<Value> {
    Json(json!({ "pending_updates": ctx.shared.lock().pending() }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FaultRequest {
    method: String,
    fault: TelegramFault,
}

async fn push_fault(State(ctx): State<Ctx>, Json(request): Json<FaultRequest>) -> Json<Value> {
    let mut state = ctx.shared.lock();
    let queue = state.faults.entry(request.method.to_ascii_lowercase()).or_default();
    queue.push_back(request.fault);
    Json(json!({ "queued_faults": queue.len() }))
}

#[derive(Deserialize)]
struct Offline {
    offline: bool,
}

async fn offline(State(ctx): State<Ctx>, Json(request): Json<Offline>) -> StatusCode {
    ctx.shared.offline.send_replace(request.offline);
    StatusCode::NO_CONTENT
}

#[derive(Deserialize)]
struct RejectMarkup {
    reject: bool,
}

async fn reject_markup(State(ctx): State<Ctx>, Json(request): Json<RejectMarkup>) -> StatusCode {
    ctx.shared.lock().reject_markup = request.reject;
    StatusCode::NO_CONTENT
}

#[derive(Deserialize)]
struct Webhook {
    url: Option<String>,
}

async fn webhook(State(ctx): State<Ctx>, Json(request): Json<Webhook>) -> StatusCode {
    ctx.shared.queue(|state| state.webhook = request.url.map(super::state::Webhook::unchecked));
    StatusCode::NO_CONTENT
}

async fn webhook_state(State(ctx): State<Ctx>) -> Json<Value> {
    let state = ctx.shared.lock();
    Json(json!({
        "url": state.webhook.as_ref().map(|w| w.url.clone()),
        "pending_updates": state.pending(),
        "in_flight": state.in_flight.len(),
        "delivered": state.delivered,
        "posts": state.posts.iter().map(|(id, status)| json!({"update_id": id, "status": status})).collect::<Vec<_>>(),
    }))
}

async fn repeat(State(ctx): State<Ctx>, Json(update): Json<Update>) -> Response {
    if ctx.shared.queue(|state| state.repeat(update.update_id)) {
        Json(json!({ "update_id": update.update_id })).into_response()
    } else {
        let error = format!("no update {} was ever queued", update.update_id);
        (StatusCode::NOT_FOUND, Json(json!({ "error": error }))).into_response()
    }
}

async fn reset(State(ctx): State<Ctx>) -> StatusCode {
    ctx.shared.lock().reset_records();
    StatusCode::NO_CONTENT
}
