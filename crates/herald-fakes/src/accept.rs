//! The accept loop of the fakes that speak WebSocket (Discord, Slack): written out rather than
//! `axum::serve` so that shutdown ends open connections (WebSockets included, served with
//! upgrades), and so that while the fake is down every connection is dropped unanswered.

use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Serves `router` until `shutdown`; while `down` holds true, connections are refused and open
/// ones are closed.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    down: &watch::Sender<bool>,
    shutdown: CancellationToken,
) {
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
        // Frames go out as written, as from the platforms' edges; Nagle would hold a frame back
        // until the client acknowledged the previous one.
        let _ = stream.set_nodelay(true);
        let mut down = down.subscribe();
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
