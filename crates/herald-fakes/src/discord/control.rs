//! The control API under `/_fake/`, for the binary and for tests over HTTP:
//! - `POST /_fake/messages` with an [`InboundMessage`] (`{"author_id": 1, "content": "hi"}` is a
//!   DM; add `channel_id`, `guild_id`, `mention_bot`, `author_is_bot`) → `{"id": "…", "seq": N}`
//!   (and `reply_to`, a message id)
//! - `GET /_fake/sent` (`?channel_id=N` for one channel), `GET /_fake/identifies`,
//!   `GET /_fake/typing`
//! - `GET /_fake/connections` → `[{"shard": [0, 2]}, ...]`: the open gateway connections
//! - `POST /_fake/shards {"recommended": 2, "required": 2}` (either optional): the `shards` of
//!   `GET /gateway/bot`, and the fewest shards an IDENTIFY may ask for (else 4011)
//! - `POST /_fake/threads {"guild_id": 7, "parent_id": 8, "name": "t"}` → `{"id": "…"}`
//! - `POST /_fake/forum_posts {"guild_id": 7, "forum_id": 9, "name": "t", "author_id": 1,
//!   "content": "hi"}` → `{"id": "…"}` (the thread's and its starter message's)
//! - `POST /_fake/close {"code": 4014}`: closes every gateway connection with that code
//! - `POST /_fake/reconnect` (op 7), `POST /_fake/invalid_session {"resumable": false}` (op 9)
//! - `POST /_fake/send_fault {"kind": "too_many_requests", "retry_after": 1.5, "global": false}`
//!   or `{"kind": "status", "status": 502}`: the next post gets it; add `"route":
//!   "list_messages"` (or `get_channel`, `typing`, `start_thread`, `put_commands`,
//!   `interaction_callback`, `followup`) for another route
//! - `POST /_fake/message_content {"denied": true}`: IDENTIFY with that intent closes 4014
//! - `POST /_fake/history {"held": true}`: message history answered only once released (`false`)
//!   → `{"requests": N}`, the history requests so far
//! - `POST /_fake/drop` (gateway sockets dropped, no close frame)
//! - `POST /_fake/heartbeat {"interval_ms": 500, "withhold_acks": true}` (either field optional)
//! - `POST /_fake/commands` with a [`super::SlashCommand`] (`{"user_id": 1, "name": "new"}`) →
//!   `{"id": "…", "token": "…"}`; `GET /_fake/commands` (`{"commands": [...], "puts": N}`),
//!   `GET /_fake/interaction_responses`, `GET /_fake/followups`
//!
//! There is no control route for going offline: the control API shares the port, so it would
//! be unreachable too; use [`super::FakeDiscord::set_offline`].

use axum::Json;
use axum::Router;
use axum::extract::{Query, State};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};

use super::FakeDiscord;
use super::server::Ctx;
use super::state::{Event, Identify, InboundMessage, Route, SendFault, SentMessage};

pub(crate) fn routes() -> Router<Ctx> {
    Router::new()
        .route("/_fake/messages", post(inject))
        .route("/_fake/sent", get(sent))
        .route("/_fake/identifies", get(identifies))
        .route("/_fake/connections", get(connections))
        .route("/_fake/shards", post(shards))
        .route("/_fake/close", post(close))
        .route("/_fake/typing", get(typing))
        .route("/_fake/threads", post(thread))
        .route("/_fake/forum_posts", post(forum_post))
        .route("/_fake/reconnect", post(reconnect))
        .route("/_fake/drop", post(drop_connections))
        .route("/_fake/heartbeat", post(heartbeat))
        .route("/_fake/commands", post(inject_command).get(commands))
        .route("/_fake/interaction_responses", get(interaction_responses))
        .route("/_fake/followups", get(followups))
        .route("/_fake/invalid_session", post(invalid_session))
        .route("/_fake/send_fault", post(send_fault))
        .route("/_fake/message_content", post(message_content))
        .route("/_fake/history", post(history))
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

async fn connections(State(ctx): State<Ctx>) -> Json<Vec<Value>> {
    let state = ctx.shared.lock();
    Json(state.connections.values().map(|shard| json!({"shard": shard})).collect())
}

#[derive(Deserialize)]
struct Shards {
    recommended: Option<u64>,
    required: Option<u64>,
}

async fn shards(State(ctx): State<Ctx>, Json(body): Json<Shards>) -> Json<Value> {
    let mut state = ctx.shared.lock();
    if let Some(shards) = body.recommended {
        state.shards = shards;
    }
    if let Some(shards) = body.required {
        state.required_shards = shards;
    }
    Json(json!({"ok": true}))
}

#[derive(Deserialize)]
struct Close {
    code: u16,
}

async fn close(State(ctx): State<Ctx>, Json(close): Json<Close>) -> Json<Value> {
    let _ = ctx.shared.events.send(Event::Close(close.code));
    Json(json!({"ok": true}))
}

async fn reconnect(State(ctx): State<Ctx>) -> Json<Value> {
    let _ = ctx.shared.events.send(Event::Reconnect);
    Json(json!({"ok": true}))
}

#[derive(Deserialize)]
struct InvalidSession {
    resumable: bool,
}

async fn invalid_session(State(ctx): State<Ctx>, Json(body): Json<InvalidSession>) -> Json<Value> {
    if !body.resumable {
        ctx.shared.lock().sessions.clear();
    }
    let _ = ctx.shared.events.send(Event::InvalidSession(body.resumable));
    Json(json!({"ok": true}))
}

#[derive(Deserialize)]
struct RouteFault {
    /// Absent: the post (`create_message`).
    route: Option<Route>,
    #[serde(flatten)]
    fault: SendFault,
}

async fn send_fault(State(ctx): State<Ctx>, Json(body): Json<RouteFault>) -> Json<Value> {
    let route = body.route.unwrap_or(Route::CreateMessage);
    ctx.shared.lock().faults.entry(route).or_default().push_back(body.fault);
    Json(json!({"ok": true}))
}

#[derive(Deserialize)]
struct MessageContent {
    denied: bool,
}

async fn message_content(State(ctx): State<Ctx>, Json(body): Json<MessageContent>) -> Json<Value> {
    ctx.shared.lock().message_content_denied = body.denied;
    Json(json!({"ok": true}))
}

#[derive(Deserialize)]
struct History {
    held: bool,
}

async fn history(State(ctx): State<Ctx>, Json(body): Json<History>) -> Json<Value> {
    ctx.shared.history_held.send_replace(body.held);
    Json(json!({"requests": *ctx.shared.history_asked.borrow()}))
}

async fn typing(State(ctx): State<Ctx>) -> Json<Vec<u64>> {
    Json(ctx.shared.lock().typing.clone())
}

#[derive(Deserialize)]
struct NewThread {
    guild_id: u64,
    parent_id: u64,
    name: String,
}

async fn thread(State(ctx): State<Ctx>, Json(body): Json<NewThread>) -> Json<Value> {
    let thread = ctx.shared.create_thread(
        body.guild_id,
        body.parent_id,
        &body.name,
        None,
        FakeDiscord::BOT_ID,
    );
    Json(json!({"id": thread.map(|t| t["id"].clone())}))
}

async fn drop_connections(State(ctx): State<Ctx>) -> Json<Value> {
    let _ = ctx.shared.events.send(Event::Abort);
    Json(json!({"ok": true}))
}

async fn inject_command(
    State(ctx): State<Ctx>,
    Json(command): Json<super::SlashCommand>,
) -> Json<Value> {
    let (id, token) = ctx.shared.inject_command(&command);
    Json(json!({"id": id.to_string(), "token": token}))
}

async fn commands(State(ctx): State<Ctx>) -> Json<Value> {
    let state = ctx.shared.lock();
    Json(json!({"commands": state.commands, "puts": state.command_puts}))
}

async fn interaction_responses(State(ctx): State<Ctx>) -> Json<Vec<super::InteractionResponse>> {
    Json(ctx.shared.lock().interaction_responses.clone())
}

async fn followups(State(ctx): State<Ctx>) -> Json<Vec<super::Followup>> {
    Json(ctx.shared.lock().followups.clone())
}

#[derive(Deserialize)]
struct ForumPost {
    guild_id: u64,
    forum_id: u64,
    name: String,
    author_id: u64,
    content: String,
}

async fn forum_post(State(ctx): State<Ctx>, Json(post): Json<ForumPost>) -> Json<Value> {
    let id = ctx.shared.create_forum_post(
        post.guild_id,
        post.forum_id,
        &post.name,
        post.author_id,
        &post.content,
    );
    Json(json!({"id": id.to_string()}))
}

#[derive(Deserialize)]
struct Heartbeat {
    interval_ms: Option<u64>,
    withhold_acks: Option<bool>,
}

async fn heartbeat(State(ctx): State<Ctx>, Json(body): Json<Heartbeat>) -> Json<Value> {
    let mut state = ctx.shared.lock();
    if let Some(ms) = body.interval_ms {
        state.heartbeat_interval_ms = ms;
    }
    if let Some(withheld) = body.withhold_acks {
        state.heartbeat_acks_withheld = withheld;
    }
    Json(json!({"ok": true}))
}
