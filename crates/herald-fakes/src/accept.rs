//! The accept loop of the fakes that speak WebSocket (Discord, Slack): written out rather than
//! `axum::serve` so that shutdown ends open connections (WebSockets included, served with
//! upgrades), so that while the fake is down every connection is dropped unanswered, and so
//! that a handler can [`Mute`] its own connection.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::{Extension, Router};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
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
        let mute = Mute::default();
        let service = TowerToHyperService::new(router.clone().layer(Extension(mute.clone())));
        let stream = Muted { stream, mute };
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

/// A switch on one connection (a request's extension): once on, the connection is a hung
/// server's. Nothing more is sent to the client; what the client sends is drained and
/// dropped, frames and close frames alike, so the handler reads nothing until the client
/// closes the TCP connection itself, which it then sees as the end of the stream.
#[derive(Clone, Debug, Default)]
pub(crate) struct Mute(Arc<AtomicBool>);

impl Mute {
    /// From now on, nothing is written to the connection or read from it but its end.
    pub(crate) fn set(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    fn on(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// An accepted connection that its [`Mute`] can hang.
struct Muted {
    stream: TcpStream,
    mute: Mute,
}

impl AsyncRead for Muted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.mute.on() {
            return Pin::new(&mut self.stream).poll_read(cx, buf);
        }
        let mut scratch = [0u8; 4096];
        loop {
            let mut drained = ReadBuf::new(&mut scratch);
            match Pin::new(&mut self.stream).poll_read(cx, &mut drained) {
                // The end of the stream, handed on as one (nothing put in `buf`).
                Poll::Ready(Ok(())) if drained.filled().is_empty() => return Poll::Ready(Ok(())),
                Poll::Ready(Ok(())) => {}
                other => return other,
            }
        }
    }
}

impl AsyncWrite for Muted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.mute.on() {
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.mute.on() {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    // A hung server sends no FIN either; the connection closes when the fake drops it.
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.mute.on() {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
