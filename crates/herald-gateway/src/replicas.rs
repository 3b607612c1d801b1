//! What keeps replicas sharing one PostgreSQL store in step: each hears when another queued a
//! message for a session it runs, and sweeps the store for work whose replica died (queued
//! messages, an unanswered last message, replies never delivered). Each piece of work is taken
//! through the store (a session's lock, a reply's claim), so exactly one replica does it.
//!
//! Claims for adapters (the Telegram poller, Discord shards) come from the store too.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use herald_core::{Claim, Claimer, Platform, PositionSource, SessionKey};
use herald_store::{Heard, QueuedInbound, Session, Store};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::outbox::{Outbox, Parcel};

/// How often the store is swept for queued messages and replies nobody is sending.
const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// How often it is swept for sessions left unanswered: a query over every routed session, and
/// only for a session nobody writes to again (a new message makes its next holder look at once).
const UNANSWERED_EVERY: Duration = Duration::from_secs(15);
/// How long a claimed reply is this replica's before another may send it (renewed while
/// this replica keeps trying it).
pub(crate) const REPLY_CLAIM: Duration = Duration::from_secs(10);
/// Replies claimed per sweep.
const CLAIM_BATCH: i64 = 50;
/// How often a claim that was refused is asked for again.
const CLAIM_RETRY: Duration = Duration::from_secs(1);

/// Work the sweep found for the router.
#[derive(Debug)]
pub(crate) enum Found {
    /// Another replica queued a message for this session key (the message, when the
    /// notification carried it): its holder takes it in.
    Heard(SessionKey, Option<Box<QueuedInbound>>),
    /// Notifications may have been missed: every worker here looks at its queue.
    Missed,
    /// Messages wait in the queue of this session key and no replica holds its session (the
    /// sweep): taken in by this replica if it gets the session's lock first.
    Queued(SessionKey),
    /// This session's last message is unanswered.
    Unanswered(Box<Session>),
}

/// Listens and sweeps until `stop`, sending what it finds to the router and posting claimed
/// replies to the outbox.
pub(crate) async fn watch(
    store: Store,
    outbox: Outbox,
    found: mpsc::Sender<Found>,
    stop: CancellationToken,
) {
    let mut heard = store.queued_notifications();
    let mut sweep = tokio::time::interval(SWEEP_EVERY);
    let mut unanswered = tokio::time::interval(UNANSWERED_EVERY);
    let mut renewal = tokio::time::interval(REPLY_CLAIM / 3);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    unanswered.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            Some(heard) = heard.recv() => {
                let news = match heard {
                    Heard::Queued { key, message } => {
                        Found::Heard(SessionKey::from_stored(key), message)
                    }
                    Heard::Missed => Found::Missed,
                };
                if found.send(news).await.is_err() {
                    return;
                }
            }
            _ = sweep.tick() => {
                match store.orphaned_keys().await {
                    Ok(keys) => {
                        for key in keys {
                            if found.send(Found::Queued(SessionKey::from_stored(key))).await.is_err() {
                                return;
                            }
                        }
                    }
                    Err(e) => debug!(error = %e, "could not sweep the inbound queue"),
                }
                match store.claim_undelivered(CLAIM_BATCH, REPLY_CLAIM).await {
                    Ok(replies) => {
                        let here = outbox.stored_ids();
                        for reply in replies.into_iter().filter(|r| !here.contains(&r.message_id)) {
                            debug!(reply = reply.message_id, "sending a reply another replica left undelivered");
                            outbox.post(Parcel::recovered(reply));
                        }
                    }
                    Err(e) => debug!(error = %e, "could not sweep the outbox"),
                }
            }
            _ = renewal.tick() => renew(&store, &outbox).await,
            _ = unanswered.tick() => {
                match store.unanswered_sessions().await {
                    Ok(sessions) => {
                        for session in sessions {
                            if found.send(Found::Unanswered(Box::new(session))).await.is_err() {
                                return;
                            }
                        }
                    }
                    Err(e) => debug!(error = %e, "could not sweep for unanswered sessions"),
                }
            }
        }
    }
}

/// Keeps this replica's claims on the replies it is still sending, so no other replica takes
/// them over while it tries.
async fn renew(store: &Store, outbox: &Outbox) {
    let ids = outbox.stored_ids();
    if !ids.is_empty()
        && let Err(e) = store.renew_claims(&ids, REPLY_CLAIM).await
    {
        debug!(error = %e, "could not renew the claims on replies being sent");
    }
}

/// Claims held through the store: a name is this replica's while it holds the store's lock
/// on it, and lost the moment the store's connection for locks breaks.
pub(crate) struct StoreClaims {
    pub(crate) store: Store,
}

impl Claimer for StoreClaims {
    fn hold(&self, name: String) -> Pin<Box<dyn Future<Output = Claim> + Send>> {
        let store = self.store.clone();
        Box::pin(async move {
            loop {
                match store.try_claim(&name).await {
                    Ok(Some(lock)) => {
                        let lost = CancellationToken::new();
                        let watch = lost.clone();
                        let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
                        tokio::spawn(async move {
                            tokio::select! {
                                () = lock.lost() => watch.cancel(),
                                // Dropping the claim gives the name up with the lock.
                                _ = release_rx => {}
                            }
                        });
                        return Claim::new(lost, Some(Box::new(release_tx)));
                    }
                    Ok(None) => {}
                    Err(e) => {
                        warn!(claim = %name, error = %e, "could not ask the store for a claim")
                    }
                }
                tokio::time::sleep(CLAIM_RETRY).await;
            }
        })
    }
}

/// A platform's channel positions as the store holds them now (any replica may have saved
/// them).
pub(crate) struct SavedPositions {
    pub(crate) store: Store,
    pub(crate) platform: Platform,
}

impl PositionSource for SavedPositions {
    fn channel_cursors(&self) -> Pin<Box<dyn Future<Output = BTreeMap<String, String>> + Send>> {
        let (store, platform) = (self.store.clone(), self.platform);
        Box::pin(async move {
            match crate::cursors::load(&store, platform).await {
                Ok(saved) => saved.channels,
                Err(e) => {
                    warn!(%platform, error = %e, "could not read the saved channel positions again");
                    BTreeMap::new()
                }
            }
        })
    }
}
