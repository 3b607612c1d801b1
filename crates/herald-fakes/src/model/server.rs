//! The HTTP side: an accept loop serving an axum router, one task per connection.
//!
//! The loop is written out (rather than `axum::serve`) so that a handler can end its own
//! connection without a response, which is what [`Fault::Drop`] needs: each connection gets a
//! token that its handlers may cancel, and the connection task then drops the socket.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::header::AUTHORIZATION;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::faults::{self, Fault};
use super::script::Reply;
use super::state::Shared;
use super::wire::{self, ChatRequest, Usage};

/// Long conversations are big; the default 2 MB limit is too tight for a model API.
const BODY_LIMIT: usize = 64 * 1024 * 1024;

/// What every handler sees: the server's state and its own connection's kill switch.
#[derive(Clone)]
struct Ctx {
    shared: Arc<Shared>,
    connection: CancellationToken,
}

/// Accepts and serves connections until `shutdown` is cancelled, which also ends open ones.
pub(crate) async fn serve(listener: TcpListener, shared: Arc<Shared>, shutdown: CancellationToken) {
    let router = routes();
    loop {
        let stream = tokio::select! {
            () = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // Out of file descriptors and the like: wait rather than spin.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let connection = shutdown.child_token();
        let ctx = Ctx { shared: shared.clone(), connection: connection.clone() };
        let service = TowerToHyperService::new(router.clone().with_state(ctx));
        tokio::spawn(async move {
            let builder = auto::Builder::new(TokioExecutor::new());
            let serving = builder.serve_connection(TokioIo::new(stream), service);
            // Dropping the connection future closes the socket, answered or not.
            tokio::select! {
                () = connection.cancelled() => {}
                _ = serving => {}
            }
        });
    }
}

fn routes() -> Router<Ctx> {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/chat/completions", post(chat))
        .route("/v1/models", get(models))
        .route("/models", get(models))
        .route("/_fake/reply", post(push_reply))
        .route("/_fake/fault", post(push_fault))
        .route("/_fake/usage", post(push_usage))
        .route("/_fake/context_window", post(set_context_window))
        .route("/_fake/requests", get(requests))
        .route("/_fake/authorizations", get(authorizations))
        .route("/_fake/reset", post(reset))
        .fallback(unknown)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
}

async fn chat(State(ctx): State<Ctx>, headers: HeaderMap, body: Bytes) -> Response {
    let recorded = serde_json::from_slice::<Value>(&body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
    let authorization = headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let model = recorded.get("model").and_then(Value::as_str).map(str::to_owned);
    let (fault, latency) = {
        let mut state = ctx.shared.lock();
        (state.receive(recorded.clone(), authorization), state.latency)
    };
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    match fault {
        None => {}
        Some(Fault::Delay(delay)) => tokio::time::sleep(delay).await,
        Some(Fault::Status { code, retry_after, body }) => {
            return faults::status_response(code, retry_after, body.as_deref(), model.as_deref());
        }
        Some(Fault::Malformed) => return faults::malformed_response(),
        Some(Fault::Drop) => {
            ctx.connection.cancel();
            // The connection task drops this future with the socket.
            return std::future::pending().await;
        }
    }
    let request = match serde_json::from_value::<ChatRequest>(recorded) {
        Ok(request) => request,
        Err(err) => {
            return bad_request(&format!("could not parse the JSON body of your request: {err}"));
        }
    };
    if let Err(message) = request.validate() {
        return bad_request(&message);
    }
    let prompt_tokens = request.prompt_tokens();
    let window = ctx.shared.lock().context_window;
    if let Some(limit) = window.filter(|limit| prompt_tokens > *limit) {
        let body = wire::context_length_exceeded(limit, prompt_tokens);
        return (StatusCode::BAD_REQUEST, Json(body)).into_response();
    }
    let (id, (answer, usage)) = {
        let mut state = ctx.shared.lock();
        (state.completion_id(), state.answer(&request))
    };
    Json(wire::completion(id, &request, answer, usage)).into_response()
}

fn bad_request(message: &str) -> Response {
    (StatusCode::BAD_REQUEST, Json(wire::error(message, "invalid_request_error", None)))
        .into_response()
}

async fn models() -> Json<Value> {
    Json(wire::models())
}

async fn unknown(method: Method, uri: Uri) -> Response {
    let message = format!("Unknown request URL: {method} {uri}. Please check the URL for typos.");
    (
        StatusCode::NOT_FOUND,
        Json(wire::error(&message, "invalid_request_error", Some("unknown_url"))),
    )
        .into_response()
}

async fn push_reply(State(ctx): State<Ctx>, Json(reply): Json<Reply>) -> Json<Value> {
    let mut state = ctx.shared.lock();
    state.replies.push_back(reply);
    Json(json!({ "queued_replies": state.replies.len() }))
}

async fn push_fault(State(ctx): State<Ctx>, Json(fault): Json<Fault>) -> Json<Value> {
    let mut state = ctx.shared.lock();
    state.faults.push_back(fault);
    Json(json!({ "queued_faults": state.faults.len() }))
}

async fn push_usage(State(ctx): State<Ctx>, Json(usage): Json<Usage>) -> Json<Value> {
    let mut state = ctx.shared.lock();
    state.usages.push_back(usage);
    Json(json!({ "queued_usages": state.usages.len() }))
}

/// The body of `POST /_fake/context_window`; `null` or no `tokens` lifts the limit.
#[derive(Deserialize)]
struct ContextWindow {
    tokens: Option<u64>,
}

async fn set_context_window(
    State(ctx): State<Ctx>,
    Json(window): Json<Option<ContextWindow>>,
) -> Json<Value> {
    let tokens = window.and_then(|w| w.tokens);
    ctx.shared.lock().context_window = tokens;
    Json(json!({ "context_window": tokens }))
}

async fn requests(State(ctx): State<Ctx>) -> Json<Vec<Value>> {
    Json(ctx.shared.lock().requests.clone())
}

async fn authorizations(State(ctx): State<Ctx>) -> Json<Vec<Option<String>>> {
    Json(ctx.shared.lock().authorizations.clone())
}

async fn reset(State(ctx): State<Ctx>) -> StatusCode {
    ctx.shared.lock().reset();
    StatusCode::NO_CONTENT
}
