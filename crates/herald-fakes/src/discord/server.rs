//! The accept loop: like the Telegram fake's, written out so that shutdown ends open
//! connections (WebSockets included, which are served with upgrades), and so that while offline
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
    pub gateway_url: String,
    pub shutdown: CancellationToken,
}

pub(crate) async fn serve(listener: TcpListener, ctx: Ctx) {
    let shutdown = ctx.shutdown.clone();
    let shared = ctx.shared.clone();
    let router = Router::new()
        .route("/", get(super::gateway::upgrade))
        .merge(super::rest::routes())
        .merge(super::interactions::routes())
        .merge(super::control::routes())
        .fallback(|| async {
            (
                StatusCode::NOT_FOUND,
                axum::Json(serde_json::json!({"message": "404: Not Found", "code": 0})),
            )
        })
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
        // Frames go out as written, as from Discord's edge; Nagle would hold a dispatch back
        // until the client acknowledged the previous one.
        let _ = stream.set_nodelay(true);
        let mut offline = shared.offline.subscribe();
        if *offline.borrow_and_update() {
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
                _ = offline.wait_for(|down| *down) => {}
                _ = serving => {}
            }
        });
    }
}
