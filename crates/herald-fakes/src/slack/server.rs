//! The fake Slack's router (Web API, Socket Mode at `/link`, the control API), served by the
//! shared accept loop in `crate::accept`.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::state::Shared;

/// What every handler sees.
#[derive(Clone)]
pub(crate) struct Ctx {
    pub shared: Arc<Shared>,
    /// Where Socket Mode URLs point, like `ws://127.0.0.1:PORT`.
    pub socket_url: String,
    pub shutdown: CancellationToken,
}

pub(crate) async fn serve(listener: TcpListener, ctx: Ctx) {
    let shutdown = ctx.shutdown.clone();
    let shared = ctx.shared.clone();
    let router = Router::new()
        .route("/link", get(super::socket::upgrade))
        .route("/link/", get(super::socket::upgrade))
        .merge(super::web::routes())
        .merge(super::control::routes())
        .fallback(|| async { (StatusCode::NOT_FOUND, "not found") })
        .with_state(ctx);
    crate::accept::serve(listener, router, &shared.down, shutdown).await;
}

/// Brings the fake up again after `duration` (unless it stops first).
pub(crate) fn up_after(shared: Arc<Shared>, shutdown: CancellationToken, duration: Duration) {
    tokio::spawn(async move {
        tokio::select! {
            () = shutdown.cancelled() => {}
            () = tokio::time::sleep(duration) => {
                shared.down.send_replace(false);
            }
        }
    });
}
