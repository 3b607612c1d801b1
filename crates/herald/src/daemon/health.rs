//! `gateway.health_listen`: `GET /healthz` (each platform's connection, the store's reads and
//! writes, the replies waiting to be delivered; 200 only when all is well) and `GET /metrics`
//! (Prometheus text).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Json};
use axum::routing::get;
use herald_core::Platform;
use herald_gateway::{
    Backlog, Metrics, PROMETHEUS_TEXT, PlatformState, PlatformStates, StoreFigures,
};
use herald_store::Store;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use serde_json::{Map, Value, json};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

/// How long the store may take to answer `/healthz`'s check before it counts as failed.
const STORE_CHECK: Duration = Duration::from_secs(2);
/// How long the oldest undelivered reply may wait before the daemon counts as degraded.
pub const UNDELIVERED_DEGRADED: Duration = Duration::from_secs(60);
/// How often a store whose writes fail is tried again, so health recovers with it.
const WRITE_PROBE_EVERY: Duration = Duration::from_secs(2);
/// Connections the port serves at once; a scraper and a probe or two need a handful.
pub const MAX_CONNECTIONS: usize = 64;
/// How long a client may take to send a request's head, and how long a kept-alive connection
/// may sit idle.
pub const HEAD_WITHIN: Duration = Duration::from_secs(5);
/// The longest a connection is kept, however busy.
const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);
/// The wait after a failed accept.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// What the endpoints read: handles on the running gateway and its store.
#[derive(Debug, Clone)]
pub struct HealthState {
    /// Each platform's connection.
    pub states: PlatformStates,
    /// The gateway's counters.
    pub metrics: Metrics,
    /// The store, pinged by `/healthz` and read for its writes' health.
    pub store: Store,
    /// The replies waiting for their platform.
    pub backlog: Backlog,
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
///
/// Every connection holds a file descriptor the platforms and the model also need, so the
/// port holds at most [`MAX_CONNECTIONS`] (more wait in the kernel's backlog, which costs the
/// process nothing), a client must send its request's head within [`HEAD_WITHIN`] (idle
/// keep-alive included), and no connection lives past [`CONNECTION_LIFETIME`].
pub async fn serve(listener: TcpListener, state: HealthState, stop: CancellationToken) {
    let addr = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
    info!(%addr, "serving /healthz and /metrics");
    let service = TowerToHyperService::new(router(state));
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let connections = TaskTracker::new();
    // Warned once per spell of failed accepts.
    let mut refused = false;
    loop {
        let slot = tokio::select! {
            () = stop.cancelled() => break,
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
        };
        let stream = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    refused = false;
                    stream
                }
                Err(e) => {
                    // Out of descriptors, most likely: wait for some to be given back.
                    if !refused {
                        warn!(%addr, error = %e, "the health endpoint could not accept a connection");
                    }
                    refused = true;
                    tokio::time::sleep(ACCEPT_PAUSE).await;
                    continue;
                }
            },
        };
        let service = service.clone();
        let stop = stop.clone();
        connections.spawn(async move {
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD_WITHIN)
                .serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                () = tokio::time::sleep(CONNECTION_LIFETIME) => {}
                () = stop.cancelled() => {}
            }
            // A request under way is answered; then the connection closes.
            connection.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(HEAD_WITHIN, connection).await;
            drop(slot);
        });
    }
    connections.close();
    connections.wait().await;
}

/// The endpoints' routes.
pub fn router(state: HealthState) -> Router {
    Router::new().route("/healthz", get(healthz)).route("/metrics", get(metrics)).with_state(state)
}

/// While the store's writes fail, tries the write lock every few seconds: writes may have
/// stopped coming (nothing to answer), and health must see the store come back all the same.
pub async fn watch_writes(store: Store, stop: CancellationToken) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(WRITE_PROBE_EVERY) => {}
        }
        if store.write_failing().is_some() {
            tokio::select! {
                () = stop.cancelled() => return,
                probed = store.probe_write() => if probed.is_ok() {
                    info!("the store takes writes again");
                },
            }
        }
    }
}

async fn healthz(State(state): State<HealthState>) -> (StatusCode, Json<Value>) {
    let reads = matches!(tokio::time::timeout(STORE_CHECK, state.store.ping()).await, Ok(Ok(())));
    let store = match state.store.write_failing() {
        Some(failing) => StoreCheck {
            ok: false,
            error: Some(failing.error),
            failing_for: Some(failing.since.elapsed()),
        },
        None if !reads => StoreCheck {
            ok: false,
            error: Some("the database does not answer".into()),
            failing_for: None,
        },
        None => StoreCheck { ok: true, error: None, failing_for: None },
    };
    let backlog = (state.backlog.pending(), state.backlog.oldest());
    let (mut code, mut body) = report(&state.states.snapshot(), &store, backlog);
    if state.stopping.is_cancelled() {
        code = StatusCode::SERVICE_UNAVAILABLE;
        body["status"] = json!("stopping");
    }
    (code, Json(body))
}

async fn metrics(State(state): State<HealthState>) -> impl IntoResponse {
    let store = StoreFigures {
        write_retries: state.store.busy_retries(),
        write_failures: state.store.write_failures(),
    };
    // Read at scrape time, like the store's figures, so the gauges are never stale.
    state.metrics.set_outbox(state.backlog.pending(), state.backlog.oldest());
    let text = state.metrics.render_prometheus(store);
    ([(header::CONTENT_TYPE, PROMETHEUS_TEXT)], text)
}

/// What `/healthz` found of the store.
#[derive(Debug, Clone, Default)]
pub struct StoreCheck {
    /// Reads answer and writes go through.
    pub ok: bool,
    /// What fails, in one line.
    pub error: Option<String>,
    /// How long writes have been failing.
    pub failing_for: Option<Duration>,
}

/// The `/healthz` answer: `ok` (200) when every platform is connected, the store reads and
/// writes, and no reply has waited past [`UNDELIVERED_DEGRADED`]; otherwise 503, `failed`
/// when no platform can come back or the store fails, else `degraded`.
pub fn report(
    platforms: &[(Platform, PlatformState)],
    store: &StoreCheck,
    (pending, oldest): (u64, Option<Duration>),
) -> (StatusCode, Value) {
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
    let late = oldest.is_some_and(|age| age >= UNDELIVERED_DEGRADED);
    let status = if !store.ok || platforms.is_empty() || platforms.iter().all(failed) {
        "failed"
    } else if platforms.iter().all(connected) && !late {
        "ok"
    } else {
        "degraded"
    };
    let code = if status == "ok" { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    let mut store_json = json!({ "ok": store.ok });
    if let Some(error) = &store.error {
        store_json["error"] = json!(error);
    }
    if let Some(failing) = store.failing_for {
        store_json["failing_s"] = json!(failing.as_secs());
    }
    let outbox = json!({ "pending": pending, "oldest_s": oldest.map_or(0, |age| age.as_secs()) });
    (code, json!({ "status": status, "platforms": each, "store": store_json, "outbox": outbox }))
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
        let store = StoreCheck { ok: store_ok, ..StoreCheck::default() };
        let (got, body) = report(&platforms, &store, (0, None));
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
        let store = StoreCheck { ok: true, ..StoreCheck::default() };
        let (_, body) = report(&platforms, &store, (0, None));
        assert_eq!(
            body["platforms"]["telegram"],
            json!({ "state": "retrying", "error": "timed out" })
        );
    }

    #[test]
    fn failing_writes_fail_and_a_late_reply_degrades() {
        let platforms = [(Platform::Telegram, PlatformState::Connected { bot: "b".into() })];
        let failing = StoreCheck {
            ok: false,
            error: Some("the database stayed locked".into()),
            failing_for: Some(Duration::from_secs(41)),
        };
        let (code, body) = report(&platforms, &failing, (0, None));
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            body["store"],
            json!({ "ok": false, "error": "the database stayed locked", "failing_s": 41 })
        );
        let ok = StoreCheck { ok: true, ..StoreCheck::default() };
        let waiting = (3, Some(UNDELIVERED_DEGRADED - Duration::from_secs(1)));
        assert_eq!(report(&platforms, &ok, waiting).0, StatusCode::OK);
        let (code, body) = report(&platforms, &ok, (3, Some(UNDELIVERED_DEGRADED)));
        assert_eq!((code, &body["status"]), (StatusCode::SERVICE_UNAVAILABLE, &json!("degraded")));
        assert_eq!(body["outbox"], json!({ "pending": 3, "oldest_s": 60 }));
    }
}
