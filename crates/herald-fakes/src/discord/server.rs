//! The fake Discord's router (REST, the Gateway at `/`, the control API), served by the
//! shared accept loop in `crate::accept`.

use std::sync::Arc;

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
    crate::accept::serve(listener, router, &shared.offline, shutdown).await;
}
