//! The HTTP side: an accept loop serving an axum router, and the Bot API handler.
//!
//! The loop is written out (rather than `axum::serve`) so that a handler can end its own
//! connection without a response, which [`TelegramFault::Drop`] and offline mode need: each
//! connection gets a token its handlers may cancel, and the connection task then drops the
//! socket.
//!
//! [`TelegramFault::Drop`]: super::TelegramFault::Drop

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{FromRequest, Multipart, Path, Query, Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::{Form, Router};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::FakeTelegram;
use super::faults::{ApiError, TelegramFault};
use super::params::Params;
use super::records::RecordedRequest;
use super::state::Shared;

/// The longest a long poll is held, whatever `timeout` asks for.
const MAX_POLL: Duration = Duration::from_secs(50);

/// What every handler sees: the server's state and its own connection's kill switch.
#[derive(Clone)]
pub(crate) struct Ctx {
    pub shared: Arc<Shared>,
    connection: CancellationToken,
}

/// Accepts and serves connections until `shutdown` is cancelled, which also ends open ones.
pub(crate) async fn serve(listener: TcpListener, shared: Arc<Shared>, shutdown: CancellationToken) {
    let router = Router::new()
        .route("/{bot}/{method}", any(bot_api))
        .merge(super::control::routes())
        .fallback(|| async { ApiError::not_found() });
    tokio::spawn(super::webhook::deliver(shared.clone(), shutdown.clone()));
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

/// `/bot<token>/<method>`: offline, token, fault, then the method itself.
async fn bot_api(
    State(ctx): State<Ctx>,
    Path((bot, method)): Path<(String, String)>,
    request: Request,
) -> Response {
    let Some(token) = bot.strip_prefix("bot") else {
        return ApiError::not_found().into_response();
    };
    let method = method.to_ascii_lowercase();
    let (recorded, params) = read_params(request).await;
    let fault = {
        let mut state = ctx.shared.lock();
        if method == "getupdates" {
            let offset = params.as_ref().ok().and_then(|p| p.int("offset").ok().flatten());
            state.offsets.push(offset);
        }
        state.requests.push(RecordedRequest { method: method.clone(), body: recorded });
        if ctx.shared.is_offline() || token != FakeTelegram::TOKEN {
            None
        } else {
            state.take_fault(&method).filter(|fault| *fault != TelegramFault::Pass)
        }
    };
    if ctx.shared.is_offline() {
        return hang_up(&ctx).await;
    }
    if token != FakeTelegram::TOKEN {
        return ApiError::unauthorized().into_response();
    }
    if let Some(fault) = fault {
        return match ApiError::from_fault(&fault) {
            Some(error) => error.into_response(),
            None => hang_up(&ctx).await,
        };
    }
    let params = match params {
        Ok(params) => params,
        Err(error) => return error.into_response(),
    };
    if method == "getupdates" {
        return get_updates(&ctx, &params).await;
    }
    let answer = ctx.shared.lock().call(&method, &params);
    match answer {
        Some(Ok(result)) => {
            if method == "sendmessage" {
                ctx.shared.sent.send_modify(|n| *n += 1);
            }
            if method.ends_with("webhook") {
                // The poster starts or stops.
                ctx.shared.updates.send_modify(|n| *n += 1);
            }
            ok(&result.to_string())
        }
        Some(Err(error)) => error.into_response(),
        None => ApiError::not_found().into_response(),
    }
}

/// Answers at once when updates are waiting, else holds the request until one is queued or
/// the `timeout` passes.
async fn get_updates(ctx: &Ctx, params: &Params) -> Response {
    let (offset, limit, timeout) =
        match (params.int("offset"), params.int("limit"), params.int("timeout")) {
            (Ok(offset), Ok(limit), Ok(timeout)) => (offset, limit, timeout),
            (Err(error), _, _) | (_, Err(error), _) | (_, _, Err(error)) => {
                return error.into_response();
            }
        };
    let limit = usize::try_from(limit.unwrap_or(100).clamp(1, 100)).unwrap_or(100);
    let timeout = Duration::from_secs(timeout.unwrap_or(0).max(0).unsigned_abs()).min(MAX_POLL);
    let deadline = Instant::now() + timeout;
    // Subscribed before the first look, so an update queued after it still wakes us.
    let mut queued = ctx.shared.updates.subscribe();
    let mut offline = ctx.shared.offline.subscribe();
    loop {
        {
            let mut state = ctx.shared.lock();
            match state.poll(offset, limit) {
                Err(error) => return error.into_response(),
                Ok(batch) if !batch.is_empty() || Instant::now() >= deadline => {
                    return ok(&format!("[{}]", batch.join(",")));
                }
                Ok(_) => {}
            }
        }
        // Going offline cuts the held request too, as a lost network would. (The `Ref` that
        // `wait_for` returns is not `Send`, so it is dropped inside the branch.)
        let went_offline = async { offline.wait_for(|offline| *offline).await.is_ok() };
        tokio::select! {
            _ = queued.changed() => {}
            () = tokio::time::sleep_until(deadline) => {}
            true = went_offline => return hang_up(ctx).await,
        }
    }
}

/// The parameters (or why they cannot be read) and what to record of them.
async fn read_params(request: Request) -> (Value, Result<Params, ApiError>) {
    let query = Query::<Vec<(String, String)>>::try_from_uri(request.uri())
        .map_or_else(|_| Vec::new(), |q| q.0);
    let kind = request.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let kind = kind.to_ascii_lowercase();
    let params = if kind.starts_with("application/x-www-form-urlencoded") {
        Form::<Vec<(String, String)>>::from_request(request, &())
            .await
            .map(|Form(pairs)| Params::from_pairs(pairs))
            .map_err(|_| ApiError::bad_request("can't parse form body"))
    } else if kind.starts_with("multipart/form-data") {
        // teloxide sends `setWebhook` this way, for the certificate it may carry.
        multipart(request).await
    } else {
        match Bytes::from_request(request, &()).await {
            Ok(body) => Params::from_json(&body),
            Err(_) => Err(ApiError::bad_request("can't read the request body")),
        }
    };
    match params {
        Ok(mut params) => {
            params.add_missing(query);
            (params.to_value(), Ok(params))
        }
        Err(error) => (Value::Null, Err(error)),
    }
}

/// The text fields of a multipart body; the fake takes no files.
async fn multipart(request: Request) -> Result<Params, ApiError> {
    let unreadable = |_| ApiError::bad_request("can't parse multipart body");
    let mut form = Multipart::from_request(request, &())
        .await
        .map_err(|_| ApiError::bad_request("can't parse multipart body"))?;
    let mut pairs = Vec::new();
    while let Some(field) = form.next_field().await.map_err(unreadable)? {
        if field.file_name().is_some() {
            return Err(ApiError::bad_request("the fake takes no files"));
        }
        let name = field.name().unwrap_or_default().to_owned();
        pairs.push((name, field.text().await.map_err(unreadable)?));
    }
    Ok(Params::from_pairs(pairs))
}

/// `{"ok": true, "result": <result>}` from the result's JSON text.
fn ok(result: &str) -> Response {
    let body = format!("{{\"ok\":true,\"result\":{result}}}");
    ([(CONTENT_TYPE, "application/json")], body).into_response()
}

/// Ends the connection without an answer.
async fn hang_up(ctx: &Ctx) -> Response {
    ctx.connection.cancel();
    // The connection task drops this future with the socket.
    std::future::pending().await
}
