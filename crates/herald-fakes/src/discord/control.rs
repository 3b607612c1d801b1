//! The control API under `/_fake/`, for the binary and for tests over HTTP:
//! - `POST /_fake/messages` with an [`InboundMessage`] (`{"author_id": 1, "content": "hi"}` is a
//!   DM; add `channel_id`, `guild_id`, `mention_bot`, `author_is_bot`) → `{"id": "…", "seq": N}`
//! - `GET /_fake/sent` (`?channel_id=N` for one channel), `GET /_fake/identifies`
//! - `POST /_fake/close {"code": 4014}`: closes every gateway connection with that code

use axum::Json;
use axum::Router;
use axum::extract::{Query, State};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};

use super::server::Ctx;
use super::state::{Event, Identify, InboundMessage, SentMessage};

pub(crate) fn routes() -> Router<Ctx> {
    Router::new()
        .route("/_fake/messages", post(inject))
        .route("/_fake/sent", get(sent))
        .route("/_fake/identifies", get(identifies))
        .route("/_fake/close", post(close))
}

async fn inject(State(ctx): State<Ctx>, Json(msg): Json<InboundMessage>) -> Json<Value> {
    let (id, seq) = ctx.shared.inject(&msg);
    Json(json!({"id": id.to_string(), "seq": seq}))
}

#[derive(Deserialize)]
struct SentQuery {
    channel_id: Option<u64>,
}

async fn sent(State(ctx): State<Ctx>, Query(query): Query<SentQuery>) -> Json<Vec<SentMessage>> {
    let state = ctx.shared.lock();
    Json(
        state
            .sent
            .iter()
            .filter(|m| query.channel_id.is_none_or(|c| c == m.channel_id))
            .cloned()
            .collect(),
    )
}

async fn identifies(State(ctx): State<Ctx>) -> Json<Vec<Identify>> {
    Json(ctx.shared.lock().identifies.clone())
}

#[derive(Deserialize)]
struct Close {
    code: u16,
}

async fn close(State(ctx): State<Ctx>, Json(close): Json<Close>) -> Json<Value> {
    let _ = ctx.shared.events.send(Event::Close(close.code));
    Json(json!({"ok": true}))
}
