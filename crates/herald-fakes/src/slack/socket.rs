//! Socket Mode connections at `/link/?ticket=…`: a ticket from `apps.connections.open` opens
//! one connection once (another gets 401). The fake sends `hello` with the number of open
//! connections, then the envelopes the postman hands this connection, and pings every
//! [`PING_INTERVAL`]; it reads acknowledgements (`{"envelope_id": …}`) and answers pings
//! (tungstenite does, as the socket is read).
//!
//! Slack keeps at most [`MAX_CONNECTIONS`] open for one app, whichever processes hold them
//! ([`super::FakeSlack::hold_connections`] stands for the others): `apps.connections.open`
//! still answers a URL, and the connection past the limit gets, instead of `hello`, a
//! `disconnect` with the reason `too_many_websockets`, and is closed.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Extension;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::FakeSlack;
use super::postman::{Command, Outbound};
use super::server::Ctx;
use super::state::{SocketEvent, now_ms};
use crate::accept::Mute;

/// The most Socket Mode connections Slack keeps open for one app.
pub const MAX_CONNECTIONS: usize = 10;
/// How often the fake pings each connection, as Slack's servers do.
pub const PING_INTERVAL: Duration = Duration::from_secs(10);
/// How long a connection stays open after its `disconnect` message (the client should have
/// connected again by then).
pub const DISCONNECT_GRACE: Duration = Duration::from_secs(1);
/// How long a silenced connection lingers before it is dropped.
const SILENCE: Duration = Duration::from_secs(120);

pub(crate) async fn upgrade(
    State(ctx): State<Ctx>,
    Extension(mute): Extension<Mute>,
    Query(query): Query<HashMap<String, String>>,
    ws: WebSocketUpgrade,
) -> Response {
    let ticket = query.get("ticket").map(String::as_str).unwrap_or_default();
    let (valid, id) = {
        let mut state = ctx.shared.lock();
        let valid = state.tickets.remove(ticket);
        if valid {
            state.connections_opened += 1;
        }
        (valid, state.connections_opened)
    };
    if !valid {
        return (StatusCode::UNAUTHORIZED, "invalid or used ticket").into_response();
    }
    ws.on_upgrade(move |mut socket| async move {
        if take_refresh(&ctx) {
            let message = json!({"type": "disconnect", "reason": "refresh_requested", "debug_info": debug_info(id)});
            if send(&mut socket, &message).await {
                let _ = socket.send(Message::Close(None)).await;
            }
            return;
        }
        let Some(open) = admit(&ctx, id) else {
            refuse(&mut socket, id).await;
            return;
        };
        serve(socket, &ctx, id, open, &mute).await;
        ctx.shared.open.fetch_sub(1, Ordering::SeqCst);
        ctx.shared.lock().sockets.push(SocketEvent::Closed { connection: id });
        ctx.shared.tell_postman(Command::Closed(id));
        ctx.shared.bump();
    })
}

/// Whether this connection is one of those [`super::FakeSlack::refresh_before_hello`] asked for.
fn take_refresh(ctx: &Ctx) -> bool {
    let mut state = ctx.shared.lock();
    let take = state.refresh_before_hello > 0;
    state.refresh_before_hello = state.refresh_before_hello.saturating_sub(1);
    take
}

/// Counts connection `id` as open and returns how many are, or `None` past the app's limit;
/// under the lock, so that two connections at once never both take the last place.
fn admit(ctx: &Ctx, id: u64) -> Option<usize> {
    let mut state = ctx.shared.lock();
    let mine = ctx.shared.open.load(Ordering::SeqCst);
    if mine + state.held >= MAX_CONNECTIONS {
        state.sockets.push(SocketEvent::Refused { connection: id });
        drop(state);
        ctx.shared.bump();
        return None;
    }
    ctx.shared.open.store(mine + 1, Ordering::SeqCst);
    state.peak = state.peak.max(mine + 1);
    state.sockets.push(SocketEvent::Opened { connection: id });
    Some(mine + 1 + state.held)
}

/// What Slack sends a connection past the limit, in place of `hello`.
async fn refuse(socket: &mut WebSocket, id: u64) {
    let message = json!({"type": "disconnect", "reason": "too_many_websockets", "debug_info": debug_info(id)});
    if send(socket, &message).await {
        let _ = socket.send(Message::Close(None)).await;
    }
}

async fn send(socket: &mut WebSocket, payload: &Value) -> bool {
    socket.send(Message::Text(payload.to_string().into())).await.is_ok()
}

fn debug_info(id: u64) -> Value {
    json!({"host": format!("applink-fake-{id}"), "build_number": 1, "approximate_connection_time": 18060})
}

async fn serve(mut socket: WebSocket, ctx: &Ctx, id: u64, open: usize, mute: &Mute) {
    let mut down = ctx.shared.down.subscribe();
    let hello = json!({
        "type": "hello",
        "num_connections": open,
        "debug_info": debug_info(id),
        "connection_info": {"app_id": FakeSlack::APP_ID},
    });
    if !send(&mut socket, &hello).await {
        return;
    }
    let (outbox, mut inbox) = mpsc::unbounded_channel();
    ctx.shared.tell_postman(Command::Open { id, outbox });
    ctx.shared.bump();
    let mut ping = tokio::time::interval_at(Instant::now() + PING_INTERVAL, PING_INTERVAL);
    // Set by a `disconnect`: when to close.
    let mut closing: Option<Instant> = None;
    loop {
        tokio::select! {
            () = ctx.shutdown.cancelled() => return,
            // Dropped with no close frame, as a network failure would.
            () = async { drop(down.wait_for(|down| *down).await) } => return,
            () = sleep_until(closing) => {
                let _ = socket.send(Message::Close(None)).await;
                return;
            }
            _ = ping.tick() => {
                if socket.send(Message::Ping(Vec::new().into())).await.is_err() {
                    return;
                }
            }
            outbound = inbox.recv() => match outbound {
                Some(Outbound::Envelope(envelope)) => {
                    if !send(&mut socket, &envelope).await {
                        return;
                    }
                }
                Some(Outbound::Disconnect(reason)) => {
                    let message = json!({"type": "disconnect", "reason": reason, "debug_info": debug_info(id)});
                    if !send(&mut socket, &message).await {
                        return;
                    }
                    closing = Some(Instant::now() + DISCONNECT_GRACE);
                }
                Some(Outbound::Abort) | None => return,
                Some(Outbound::Silence) => {
                    mute.set();
                    silent(&mut socket, ctx, &mut down).await;
                    return;
                }
            },
            frame = socket.recv() => match frame {
                Some(Ok(Message::Text(text))) => acknowledge(ctx, text.as_str()),
                Some(Ok(Message::Close(_)) | Err(_)) | None => return,
                Some(Ok(_)) => {}
            },
        }
    }
}

/// Neither sends nor reads anything more (the connection is muted: not even a pong goes out)
/// until the client closes the TCP connection, the fake stops or goes down, or [`SILENCE`]
/// passes. A close frame alone does not end it: a hung server never reads one.
async fn silent(socket: &mut WebSocket, ctx: &Ctx, down: &mut tokio::sync::watch::Receiver<bool>) {
    let lingering = tokio::time::sleep(SILENCE);
    tokio::pin!(lingering);
    loop {
        tokio::select! {
            () = ctx.shutdown.cancelled() => return,
            _ = down.wait_for(|down| *down) => return,
            () = &mut lingering => return,
            frame = socket.recv() => match frame {
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return,
            },
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Records `{"envelope_id": …}` (a `payload` beside it is allowed and ignored); other text is
/// ignored, as Slack does.
fn acknowledge(ctx: &Ctx, text: &str) {
    let Ok(message) = serde_json::from_str::<Value>(text) else { return };
    if let Some(envelope_id) = message["envelope_id"].as_str() {
        let at_ms = now_ms();
        ctx.shared.tell_postman(Command::Ack { envelope_id: envelope_id.to_owned(), at_ms });
    }
}
