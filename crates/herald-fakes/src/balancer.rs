//! A tiny HTTP load balancer for replica tests: each request goes to the next of N backends in
//! turn, and to the one after when a backend refuses the connection (a replica that is down).
//! A backend that accepted the request but failed it is not asked again: the request may have
//! been handled, and the caller (Telegram) decides whether to send it again.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Headers that belong to one connection, not to the request: never forwarded.
const HOP_BY_HOP: &[header::HeaderName] = &[
    header::CONNECTION,
    header::HOST,
    header::CONTENT_LENGTH,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::TE,
    header::TRAILER,
    header::PROXY_AUTHORIZATION,
];

/// A running balancer; it stops when dropped.
#[derive(Debug)]
pub struct Balancer {
    addr: SocketAddr,
    shutdown: CancellationToken,
}

impl Drop for Balancer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

struct Backends {
    urls: Vec<String>,
    next: AtomicUsize,
    client: reqwest::Client,
}

impl Balancer {
    /// Starts a balancer on `127.0.0.1` (a port chosen by the system) in front of `backends`,
    /// base URLs like `http://127.0.0.1:8443`.
    pub async fn start(backends: Vec<String>) -> io::Result<Balancer> {
        Balancer::start_on(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), backends).await
    }

    /// Starts a balancer on `addr` in front of `backends`.
    pub async fn start_on(addr: SocketAddr, backends: Vec<String>) -> io::Result<Balancer> {
        if backends.is_empty() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "no backends to balance"));
        }
        let client = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(io::Error::other)?;
        let urls = backends.into_iter().map(|u| u.trim_end_matches('/').to_owned()).collect();
        let backends = Arc::new(Backends { urls, next: AtomicUsize::new(0), client });
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shutdown = CancellationToken::new();
        let router = Router::new().fallback(forward).with_state(backends);
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await;
        });
        Ok(Balancer { addr, shutdown })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its base URL, like `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting requests.
    pub fn shutdown(&self) {
        self.shutdown.cancel();
    }
}

/// Sends the request to the backends in turn until one accepts the connection.
async fn forward(
    State(backends): State<Arc<Backends>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut forwarded = headers;
    for name in HOP_BY_HOP {
        forwarded.remove(name);
    }
    let count = backends.urls.len();
    let first = backends.next.fetch_add(1, Ordering::Relaxed);
    for turn in 0..count {
        let url = format!("{}{path}", backends.urls[(first + turn) % count]);
        let request = backends
            .client
            .request(method.clone(), &url)
            .headers(forwarded.clone())
            .body(body.clone());
        match request.send().await {
            Ok(answer) => return relay(answer).await,
            // Refused: the backend is down, and never saw the request.
            Err(err) if err.is_connect() => continue,
            Err(_) => return StatusCode::BAD_GATEWAY.into_response(),
        }
    }
    (StatusCode::BAD_GATEWAY, "no backend accepted the connection").into_response()
}

/// The backend's answer, passed on.
async fn relay(answer: reqwest::Response) -> Response {
    let status = answer.status();
    let mut headers = answer.headers().clone();
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    match answer.bytes().await {
        Ok(body) => (status, headers, body).into_response(),
        Err(_) => StatusCode::BAD_GATEWAY.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A backend that answers every request with its name.
    async fn backend(name: &'static str) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
        let addr = listener.local_addr().expect("a bound listener has an address");
        let router = Router::new().fallback(move |uri: Uri| async move { format!("{name} {uri}") });
        tokio::spawn(async move { axum::serve(listener, router).await });
        format!("http://{addr}")
    }

    /// A URL where nothing listens: a port bound, then freed.
    async fn nobody() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
        let addr = listener.local_addr().expect("a bound listener has an address");
        drop(listener);
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn requests_go_round_robin_and_skip_a_backend_that_refuses() {
        let backends = vec![backend("a").await, nobody().await, backend("c").await];
        let balancer = Balancer::start(backends).await.expect("the balancer starts");
        let client = reqwest::Client::builder().no_proxy().build().expect("a client");
        let mut answers = Vec::new();
        for _ in 0..3 {
            let url = format!("{}/hook?x=1", balancer.url());
            let answer = client.post(url).body("{}").send().await.expect("an answer");
            assert_eq!(answer.status(), StatusCode::OK);
            answers.push(answer.text().await.expect("a body"));
        }
        // The second request found b down and went on to c.
        assert_eq!(answers, ["a /hook?x=1", "c /hook?x=1", "c /hook?x=1"]);
    }
}
