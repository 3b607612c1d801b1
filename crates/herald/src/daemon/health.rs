//! `gateway.health_listen`: `GET /healthz` (each platform's connection and the store, 200
//! only when all is well) and `GET /metrics` (Prometheus text).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Json};
use axum::routing::get;
use herald_core::Platform;
use herald_gateway::{Metrics, PROMETHEUS_TEXT, PlatformState, PlatformStates, StoreFigures};
use herald_store::Store;
use serde_json::{Map, Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// How long the store may take to answer `/healthz`'s check before it counts as failed.
const STORE_CHECK: Duration = Duration::from_secs(2);

/// What the endpoints read: handles on the running gateway and its store.
#[derive(Debug, Clone)]
pub struct HealthState {
    /// Each platform's connection.
    pub states: PlatformStates,
    /// The gateway's counters.
    pub metrics: Metrics,
    /// The store, pinged by `/healthz` and read for its write retries.
    pub store: Store,
    /// Cancelled once the daemon begins to stop: a load balancer should look elsewhere.
    pub stopping: CancellationToken,
}

/// Binds `health_listen`; a taken or forbidden address stops the daemon at startup.
pub async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr).await.with_context(|| {
        format!(
            "could not listen on gateway.health_listen = \"{addr}\": pick a free address and port, \
             or remove the key to turn /healthz and /metrics off"
        )
    })
}

/// Serves the endpoints on `listener` until `stop` is cancelled.
pub async fn serve(listener: TcpListener, state: HealthState, stop: CancellationToken) {
    let addr = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
    info!(%addr, "serving /healthz and /metrics");
    let served =
        axum::serve(listener, router(state)).with_graceful_shutdown(stop.cancelled_owned()).await;
    if let Err(e) = served {
        warn!(%addr, error = %e, "the health endpoint stopped");
    }
}

/// The endpoints' routes.
pub fn router(state: HealthState) -> Router {
    Router::new().route("/healthz", get(healthz)).route("/metrics", get(metrics)).with_state(state)
}

async fn healthz(State(state): State<HealthState>) -> (StatusCode, Json<Value>) {
    let store_ok =
        matches!(tokio::time::timeout(STORE_CHECK, state.store.ping()).await, Ok(Ok(())));
    let (mut code, mut body) = report(&state.states.snapshot(), store_ok);
    if state.stopping.is_cancelled() {
        code = StatusCode::SERVICE_UNAVAILABLE;
        body["status"] = json!("stopping");
    }
    (code, Json(body))
}

async fn metrics(State(state): State<HealthState>) -> impl IntoResponse {
    let store = StoreFigures {
        write_retries: state.store.busy_retries(),
        write_failures: store_write_failures_placeholder(&state.store),
    };
    let text = state.metrics.render_prometheus(store);
    ([(header::CONTENT_TYPE, PROMETHEUS_TEXT)], text)
}

/// PLACEHOLDER for the lead: replace with `store.write_failures()` once herald-store has it.
/// Until then no failure is counted, so `herald_store_write_failures_total` stays 0.
fn store_write_failures_placeholder(_store: &Store) -> u64 {
    0
}

/// The `/healthz` answer: `ok` (200) when every platform is connected and the store answers;
/// otherwise 503, `failed` when no platform can come back or the store is gone, else
/// `degraded`.
pub fn report(platforms: &[(Platform, PlatformState)], store_ok: bool) -> (StatusCode, Value) {
    let mut each = Map::new();
    for (platform, state) in platforms {
        let entry = match state {
            PlatformState::Starting => json!({ "state": "starting" }),
            PlatformState::Connected { bot } => json!({ "state": "connected", "bot": bot }),
            PlatformState::Retrying { error } => json!({ "state": "retrying", "error": error }),
            PlatformState::Failed { error } => json!({ "state": "failed", "error": error }),
        };
        each.insert(platform.to_string(), entry);
    }
    let connected =
        |(_, s): &(Platform, PlatformState)| matches!(s, PlatformState::Connected { .. });
    let failed = |(_, s): &(Platform, PlatformState)| matches!(s, PlatformState::Failed { .. });
    let status = if !store_ok || platforms.is_empty() || platforms.iter().all(failed) {
        "failed"
    } else if platforms.iter().all(connected) {
        "ok"
    } else {
        "degraded"
    };
    let code = if status == "ok" { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (code, json!({ "status": status, "platforms": each, "store": { "ok": store_ok } }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(platforms: &[&PlatformState], store_ok: bool, code: StatusCode, status: &str) {
        let platforms: Vec<_> = platforms
            .iter()
            .map(|s| (*s).clone())
            .zip([Platform::Telegram, Platform::Slack])
            .map(|(s, p)| (p, s))
            .collect();
        let (got, body) = report(&platforms, store_ok);
        assert_eq!((got, body["status"].as_str()), (code, Some(status)), "{platforms:?}: {body}");
        assert_eq!(body["store"]["ok"], store_ok);
    }

    #[test]
    fn healthy_only_when_everything_is_connected() {
        let connected = PlatformState::Connected { bot: "herald_bot".into() };
        let retrying = PlatformState::Retrying { error: "timed out".into() };
        let failed = PlatformState::Failed { error: "token refused".into() };
        let unavailable = StatusCode::SERVICE_UNAVAILABLE;
        check(&[&connected], true, StatusCode::OK, "ok");
        check(&[&connected], false, unavailable, "failed");
        check(&[&PlatformState::Starting], true, unavailable, "degraded");
        check(&[&retrying], true, unavailable, "degraded");
        check(&[&connected, &failed], true, unavailable, "degraded");
        check(&[&failed], true, unavailable, "failed");
        check(&[&failed, &failed], true, unavailable, "failed");
        check(&[], true, unavailable, "failed");
    }

    #[test]
    fn each_platform_reports_its_state_and_error() {
        let platforms =
            [(Platform::Telegram, PlatformState::Retrying { error: "timed out".into() })];
        let (_, body) = report(&platforms, true);
        assert_eq!(
            body["platforms"]["telegram"],
            json!({ "state": "retrying", "error": "timed out" })
        );
    }
}
