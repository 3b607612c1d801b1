//! The accept loop: like the Discord fake's, written out so that shutdown ends open
//! connections (WebSockets included, which are served with upgrades), and so that while down
//! every connection is dropped unanswered.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
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
    loop {
        let stream = tokio::select! {
            () = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // Frames go out as written; Nagle would hold an envelope back until the client
        // acknowledged the previous one.
        let _ = stream.set_nodelay(true);
        let mut down = shared.down.subscribe();
        if *down.borrow_and_update() {
            // Down: the connection is closed before a byte is read.
            drop(stream);
            continue;
        }
        let service = TowerToHyperService::new(router.clone());
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let builder = auto::Builder::new(TokioExecutor::new());
            let serving = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
            tokio::select! {
                () = shutdown.cancelled() => {}
                _ = down.wait_for(|down| *down) => {}
                _ = serving => {}
            }
        });
    }
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
