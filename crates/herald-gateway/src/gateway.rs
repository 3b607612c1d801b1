//! The gateway's top level: adapters started, the router's loop, and the drain at shutdown.
//! The loop answers heartbeats between events, so a watchdog sees whether it still turns.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::SelectAll;
use futures::{FutureExt, StreamExt};
use herald_agent::{Provider, ToolRegistry};
use herald_core::{Adapter, AdapterContext, AdapterEvent, Claims, Platform, Positions};
use herald_store::{Store, StoreError};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::compress::Compressor;
use crate::cursors::{self, CursorKey, Cursors};
use crate::events::PlatformEvents;
use crate::link::{Link, PlatformState, PlatformStates};
use crate::liveness::{BEATS_WAITING, Beat, Heartbeat, Started};
use crate::metrics::Metrics;
use crate::outbox::{Backlog, Outbox};
use crate::replicas::{self, Found, SavedPositions, StoreClaims};
use crate::router::{Event, Router};
use crate::settings::GatewaySettings;
use crate::shared::Shared;

/// Outbound requests an adapter may have waiting.
const OUTBOUND_QUEUE: usize = 1024;
/// Work found by the replicas' sweep that may wait for the router.
const FOUND_WAITING: usize = 1024;
/// How long adapters get to deliver the last replies after the drain.
const ADAPTER_FLUSH: Duration = Duration::from_secs(10);

/// Why [`Gateway::run`] ended other than by its shutdown.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Every platform's adapter stopped for good (a refused token, say): nothing is left to
    /// serve, and a restart policy may try again. The reasons, one per platform.
    #[error("every platform stopped: {0}")]
    PlatformsStopped(String),
}

/// The daemon: platforms in, sessions and the agent in the middle, replies out.
#[derive(Debug)]
pub struct Gateway<P> {
    store: Store,
    provider: P,
    tools: ToolRegistry,
    settings: GatewaySettings,
    links: HashMap<Platform, Link>,
    events: SelectAll<PlatformEvents>,
    adapters: TaskTracker,
    stop_adapters: CancellationToken,
    states: PlatformStates,
    metrics: Metrics,
    beats: (mpsc::Sender<Beat>, mpsc::Receiver<Beat>),
    started: Started,
    backlog: Backlog,
    claims: Claims,
}

impl<P: Provider + 'static> Gateway<P> {
    /// A gateway over this store, answering with this provider and these tools.
    pub fn new(store: Store, provider: P, tools: ToolRegistry, settings: GatewaySettings) -> Self {
        // Replicas sharing a store take turns through it; alone, everything is ours.
        let claims = match store.is_shared() {
            true => Claims::new(StoreClaims { store: store.clone() }),
            false => Claims::solo(),
        };
        Gateway {
            store,
            provider,
            tools,
            settings,
            links: HashMap::new(),
            events: SelectAll::new(),
            adapters: TaskTracker::new(),
            stop_adapters: CancellationToken::new(),
            states: PlatformStates::default(),
            metrics: Metrics::default(),
            beats: mpsc::channel(BEATS_WAITING),
            started: Started::default(),
            backlog: Backlog::default(),
            claims,
        }
    }

    /// Who grants the claims adapters wait for (a poller, a shard): by default every claim is
    /// this process's at once, as for one herald alone.
    pub fn set_claims(&mut self, claims: Claims) {
        self.claims = claims;
    }

    /// Each platform's state, for health reports; it stays current while the gateway runs.
    pub fn states(&self) -> PlatformStates {
        self.states.clone()
    }

    /// The gateway's counters, for `/metrics`; they stay current while the gateway runs.
    pub fn metrics(&self) -> Metrics {
        self.metrics.clone()
    }

    /// The replies waiting for their platform, for health reports; it stays current.
    pub fn backlog(&self) -> Backlog {
        self.backlog.clone()
    }

    /// A liveness probe answered by the gateway's event loop, for the service watchdog.
    pub fn heartbeat(&self) -> Heartbeat {
        Heartbeat(self.beats.0.clone())
    }

    /// Resolves once [`Gateway::run`] has started its loop, for the service's readiness.
    pub fn started(&self) -> Started {
        self.started.clone()
    }

    /// Starts a platform adapter, resuming from its saved cursor. A platform that fails later
    /// is reported and the others keep running.
    pub async fn add_adapter<A: Adapter>(&mut self, adapter: A) -> Result<(), StoreError> {
        let platform = adapter.platform();
        let saved = cursors::load(&self.store, platform).await?;
        let (outbound, outbound_rx) = mpsc::channel(OUTBOUND_QUEUE);
        let (events, ends) = PlatformEvents::new(platform);
        self.events.push(events);
        let link = Link { outbound, caps: adapter.capabilities(), metrics: self.metrics.clone() };
        self.links.insert(platform, link);
        self.states.set(platform, PlatformState::Starting);
        self.metrics.add_platform(platform);
        let context = AdapterContext {
            events: ends.events,
            outbound: outbound_rx,
            cursor: saved.cursor,
            channel_cursors: saved.channels,
            kept: saved.kept,
            claims: self.claims.clone(),
            positions: Positions::new(SavedPositions { store: self.store.clone(), platform }),
        };
        let stop = self.stop_adapters.clone();
        self.adapters.spawn(async move {
            let result = adapter.run(context, stop).await;
            let _ = ends.stopped.send(result.err().map(|e| e.to_string()));
        });
        Ok(())
    }

    /// Runs until `shutdown` resolves, or until every platform stopped for good, then stops
    /// taking messages, lets running turns finish for up to `drain_timeout`, delivers their
    /// replies and closes the store.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), GatewayError> {
        let Gateway {
            store,
            provider,
            tools,
            settings,
            links,
            mut events,
            adapters,
            stop_adapters,
            states,
            metrics,
            beats,
            started,
            backlog,
            claims: _,
        } = self;
        // Only the heartbeats handed out keep the channel open; with none, `recv` is `None`.
        let (_, mut beats) = beats;
        let drain = settings.drain_timeout;
        let outbox = Outbox::new(store.clone(), links.clone(), backlog);
        let shared = Arc::new(Shared {
            outbox: outbox.clone(),
            compressor: Compressor::new(settings.compression.clone()),
            store: store.clone(),
            provider,
            tools,
            runs: Arc::new(Semaphore::new(settings.max_concurrent_runs.max(1))),
            settings,
            links,
            stop_turns: CancellationToken::new(),
            metrics: metrics.clone(),
        });
        let stop_turns = shared.stop_turns.clone();
        let (idle_tx, mut idle_rx) = mpsc::channel(64);
        let (cursors, cursor_saver) = Cursors::start(store.clone());
        let mut router = Router::new(shared, states, cursors.clone(), idle_tx);
        router.recover().await;
        let (found_tx, mut found_rx) = mpsc::channel(FOUND_WAITING);
        let stop_watch = CancellationToken::new();
        if store.is_shared() {
            let watch =
                replicas::watch(store.clone(), outbox.clone(), found_tx, stop_watch.clone());
            tokio::spawn(watch);
        }
        info!("gateway running");
        started.0.cancel();
        tokio::pin!(shutdown);
        let stopped = loop {
            tokio::select! {
                biased;
                () = &mut shutdown => break None,
                // Before the events: a steady stream of them must not starve the heartbeat.
                Some(beat) = beats.recv() => {
                    let _ = beat.send(());
                }
                Some((platform, event)) = events.next() => {
                    if let Event::Adapter(AdapterEvent::Inbound(_)) = &event {
                        metrics.received(platform);
                    }
                    let ended = matches!(event, Event::Stopped(_));
                    router.on_event(platform, event).await;
                    if ended && let Some(reasons) = router.states.all_failed() {
                        break Some(reasons);
                    }
                }
                Some(idle) = idle_rx.recv() => router.on_idle(idle),
                Some(found) = found_rx.recv() => match found {
                    Found::Heard(key, message) => router.on_queued(key, message).await,
                    Found::Missed => router.on_missed().await,
                    Found::Queued(key) => router.on_orphan(key).await,
                    Found::Unanswered(session) => router.on_unanswered(*session).await,
                },
            }
        };

        info!(
            workers = router.workers.len(),
            drain_s = drain.as_secs(),
            "shutting down: finishing running turns"
        );
        stop_adapters.cancel();
        stop_watch.cancel();
        router.workers.clear();
        router.tracker.close();
        let workers = router.tracker.clone();
        let finished = keep_cursors(&cursors, &mut events, &mut beats, workers.wait(), drain).await;
        if !finished {
            warn!(
                "the drain time is over: stopping the turns still running (their messages are answered after the restart)"
            );
            stop_turns.cancel();
            let workers = workers.wait();
            keep_cursors(&cursors, &mut events, &mut beats, workers, Duration::from_secs(5)).await;
        }
        // The replies of the finished turns, and those still being tried again, go out while
        // the platforms are still there; what does not make it is sent at the next start.
        let drained = async {
            if !outbox.drain(ADAPTER_FLUSH).await {
                warn!(
                    "some replies were not delivered before the stop; they are sent at the next start"
                );
            }
        };
        keep_cursors(&cursors, &mut events, &mut beats, drained, ADAPTER_FLUSH * 2).await;
        // The last senders of the adapters' outbound queues go with the router and the
        // outbox: adapters deliver what is queued and return.
        drop(outbox);
        let states = router.states.clone();
        drop(router);
        adapters.close();
        let flushed =
            keep_cursors(&cursors, &mut events, &mut beats, adapters.wait(), ADAPTER_FLUSH).await;
        if !flushed {
            warn!("a platform did not finish sending within {} s", ADAPTER_FLUSH.as_secs());
        }
        drop(states);
        // The saver writes the last cursors once its last handle is gone.
        drop(cursors);
        if let Err(e) = cursor_saver.await {
            warn!(error = %e, "the cursor saver failed; a restart may see some messages again");
        }
        store.close().await;
        info!("gateway stopped");
        match stopped {
            Some(reasons) => Err(GatewayError::PlatformsStopped(reasons)),
            None => Ok(()),
        }
    }
}

/// Waits for `done` up to `limit` while still saving the cursors adapters report (and
/// dropping new messages unsettled, so the platform delivers them again after the restart)
/// and answering heartbeats: the drain is progress too.
async fn keep_cursors(
    cursors: &Cursors,
    events: &mut SelectAll<PlatformEvents>,
    beats: &mut mpsc::Receiver<Beat>,
    done: impl Future<Output = ()>,
    limit: Duration,
) -> bool {
    let deadline = tokio::time::sleep(limit);
    tokio::pin!(done, deadline);
    let keep = |(platform, event): (Platform, Event)| {
        if let Event::Adapter(event) = &event
            && let Some((key, value)) = CursorKey::of_event(platform, event)
        {
            cursors.save(key, value);
        }
    };
    loop {
        tokio::select! {
            () = &mut done => {
                // What was reported just before the end still counts.
                while let Some(Some(event)) = events.next().now_or_never() {
                    keep(event);
                }
                return true;
            }
            () = &mut deadline => return false,
            Some(beat) = beats.recv() => {
                let _ = beat.send(());
            }
            Some(event) = events.next() => keep(event),
        }
    }
}
