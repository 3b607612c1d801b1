//! Application commands and interactions: `GET`/`PUT /applications/{app}/commands` (the global
//! set, bulk overwritten; every PUT is counted so a test can see a restart did not register
//! again), INTERACTION_CREATE for an injected slash command, and `POST
//! /interactions/{id}/{token}/callback` (recorded; a second answer gets 400 code 40060, an
//! unknown interaction 404 code 10062), and the interaction webhook: `POST
//! /webhooks/{app}/{token}` (a followup) and `PATCH /webhooks/{app}/{token}/messages/@original`
//! (the deferred answer), both recorded as [`Followup`]s. `GET /applications/@me` (and the
//! oauth2 one) describe the application.

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::FakeDiscord;
use super::rest::{authorized, error, take_fault, unauthorized};
use super::server::Ctx;
use super::state::{Route, Shared};

/// A slash command a user runs, to be dispatched as INTERACTION_CREATE.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct SlashCommand {
    /// Who runs it.
    pub user_id: u64,
    /// The command's name, without the slash.
    pub name: String,
    /// Its options as Discord sends them (`[{"name": "text", "type": 3, "value": "hi"}]`).
    #[serde(default)]
    pub options: Vec<Value>,
    /// The channel; `None` is the user's DM channel.
    #[serde(default)]
    pub channel_id: Option<u64>,
    /// The server; `None` is a DM.
    #[serde(default)]
    pub guild_id: Option<u64>,
}

/// How the bot answered an interaction.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct InteractionResponse {
    /// The interaction's id.
    pub interaction_id: u64,
    /// The callback `type` (4: a message, 5: deferred).
    pub kind: u64,
    /// The callback `data` (`content`, `flags`: 64 is ephemeral).
    pub data: Value,
}

pub(crate) fn routes() -> Router<Ctx> {
    Router::new()
        .route("/api/v10/applications/{app}/commands", get(list_commands).put(put_commands))
        .route("/api/v10/interactions/{id}/{token}/callback", post(callback))
        .route("/api/v10/webhooks/{app}/{token}", post(followup))
        .route(
            "/api/v10/webhooks/{app}/{token}/messages/@original",
            axum::routing::patch(edit_original),
        )
        .route("/api/v10/applications/@me", get(application))
        .route("/api/v10/oauth2/applications/@me", get(application))
}

/// A message sent through an interaction's webhook.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Followup {
    /// The interaction's token.
    pub token: String,
    /// Whether it edited the original answer (else a new followup message).
    pub edits_original: bool,
    /// The body as sent (`content`, `flags`, ...).
    pub body: Value,
}

impl Shared {
    /// Dispatches `command` as INTERACTION_CREATE; (interaction id, its token).
    pub fn inject_command(&self, command: &SlashCommand) -> (u64, String) {
        let channel_id =
            command.channel_id.unwrap_or_else(|| FakeDiscord::dm_channel(command.user_id));
        let (id, token) = {
            let mut state = self.lock();
            let id = state.next_id();
            let token = format!("fake-interaction-token-{id}");
            state.interactions.push((id, token.clone(), channel_id));
            (id, token)
        };
        let user = json!({"id": command.user_id.to_string(), "username": format!("user{}", command.user_id), "discriminator": "0", "global_name": null, "avatar": null});
        let mut d = json!({
            "id": id.to_string(),
            "application_id": FakeDiscord::BOT_ID.to_string(),
            "type": 2,
            "token": token,
            "version": 1,
            "channel_id": channel_id.to_string(),
            "locale": "en-US",
            "app_permissions": "0",
            "entitlements": [],
            "authorizing_integration_owners": {},
            // Required by clients (serenity drops an interaction without it); an unboosted server's limit.
            "attachment_size_limit": 10_485_760,
            "data": {"id": id.to_string(), "name": command.name, "type": 1, "options": command.options},
        });
        // The context: 0 in a server, 1 in the bot's DM.
        d["context"] = json!(if command.guild_id.is_some() { 0 } else { 1 });
        match command.guild_id {
            Some(guild) => {
                d["guild_id"] = json!(guild.to_string());
                d["guild_locale"] = json!("en-US");
                d["member"] = json!({"user": user, "roles": [], "joined_at": "2026-01-01T00:00:00.000000+00:00", "deaf": false, "mute": false, "flags": 0, "permissions": "0"});
            }
            None => d["user"] = user,
        }
        self.dispatch("INTERACTION_CREATE", d);
        (id, token)
    }
}

async fn list_commands(State(ctx): State<Ctx>, headers: HeaderMap) -> Response {
    if !authorized(&headers) {
        return unauthorized();
    }
    Json(ctx.shared.lock().commands.clone()).into_response()
}

async fn put_commands(
    State(ctx): State<Ctx>,
    Path(app): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !authorized(&headers) {
        return unauthorized();
    }
    if let Some(fault) = take_fault(&ctx, Route::PutCommands) {
        return fault;
    }
    if app != FakeDiscord::BOT_ID.to_string() {
        return error(StatusCode::FORBIDDEN, 50001, "Missing Access");
    }
    let Ok(Value::Array(commands)) = serde_json::from_slice::<Value>(&body) else {
        return error(StatusCode::BAD_REQUEST, 50109, "The request body contains invalid JSON.");
    };
    let mut state = ctx.shared.lock();
    let mut stored = Vec::new();
    for mut command in commands {
        let id = state.next_id();
        command["id"] = json!(id.to_string());
        command["application_id"] = json!(FakeDiscord::BOT_ID.to_string());
        command["version"] = json!(id.to_string());
        // Discord answers with the whole object: the fields a client may leave out filled in.
        for (field, default) in [
            ("type", json!(1)),
            ("default_member_permissions", Value::Null),
            ("options", json!([])),
            ("nsfw", json!(false)),
        ] {
            if command.get(field).is_none() {
                command[field] = default;
            }
        }
        stored.push(command);
    }
    state.commands = stored.clone();
    state.command_puts += 1;
    Json(stored).into_response()
}

async fn callback(
    State(ctx): State<Ctx>,
    Path((id, token)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    if let Some(fault) = take_fault(&ctx, Route::InteractionCallback) {
        return fault;
    }
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return error(StatusCode::BAD_REQUEST, 50109, "The request body contains invalid JSON.");
    };
    let mut state = ctx.shared.lock();
    let Some(interaction_id) = id
        .parse::<u64>()
        .ok()
        .filter(|id| state.interactions.iter().any(|(i, t, _)| i == id && *t == token))
    else {
        return error(StatusCode::NOT_FOUND, 10062, "Unknown interaction");
    };
    if state.interaction_responses.iter().any(|r| r.interaction_id == interaction_id) {
        return error(StatusCode::BAD_REQUEST, 40060, "Interaction has already been acknowledged.");
    }
    let content = body["data"]["content"].as_str().unwrap_or_default();
    if content.chars().count() > super::MAX_CONTENT {
        let errors = json!({"data": {"content": {"_errors": [{"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 2000 or fewer in length."}]}}});
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"message": "Invalid Form Body", "code": 50035, "errors": errors})),
        )
            .into_response();
    }
    state.interaction_responses.push(InteractionResponse {
        interaction_id,
        kind: body["type"].as_u64().unwrap_or(0),
        data: body["data"].clone(),
    });
    StatusCode::NO_CONTENT.into_response()
}

async fn application(headers: HeaderMap) -> Response {
    if !authorized(&headers) {
        return unauthorized();
    }
    let id = FakeDiscord::BOT_ID.to_string();
    Json(json!({"id": id, "name": FakeDiscord::BOT_USERNAME, "icon": null, "description": "", "bot_public": false, "bot_require_code_grant": false, "verify_key": "00", "flags": 0, "bot": super::state::bot_user(), "owner": {"id": "1", "username": "owner", "discriminator": "0", "avatar": null}, "team": null}))
        .into_response()
}

/// Records a webhook message for interaction `token`, or 404 10015 for a token never given.
fn record_followup(
    ctx: &Ctx,
    app: &str,
    token: &str,
    body: &Bytes,
    edits_original: bool,
) -> Response {
    if let Some(fault) = take_fault(ctx, Route::Followup) {
        return fault;
    }
    let Ok(body) = serde_json::from_slice::<Value>(body) else {
        return error(StatusCode::BAD_REQUEST, 50109, "The request body contains invalid JSON.");
    };
    let mut state = ctx.shared.lock();
    let channel =
        state.interactions.iter().find(|(_, t, _)| t == token).map(|(_, _, channel)| *channel);
    let Some(channel) = channel.filter(|_| app == FakeDiscord::BOT_ID.to_string()) else {
        return error(StatusCode::NOT_FOUND, 10015, "Unknown Webhook");
    };
    if body["content"].as_str().is_some_and(|c| c.chars().count() > super::MAX_CONTENT) {
        let errors = json!({"content": {"_errors": [{"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 2000 or fewer in length."}]}});
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"message": "Invalid Form Body", "code": 50035, "errors": errors})),
        )
            .into_response();
    }
    let id = state.next_id();
    let content = body["content"].as_str().unwrap_or_default().to_owned();
    state.followups.push(Followup { token: token.to_owned(), edits_original, body });
    Json(super::state::message(id, channel, super::state::bot_user(), &content, vec![]))
        .into_response()
}

async fn followup(
    State(ctx): State<Ctx>,
    Path((app, token)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    record_followup(&ctx, &app, &token, &body, false)
}

async fn edit_original(
    State(ctx): State<Ctx>,
    Path((app, token)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    record_followup(&ctx, &app, &token, &body, true)
}
