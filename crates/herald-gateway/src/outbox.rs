//! Replies on their way out. Each chat's replies leave in the order they were stored, one at a
//! time, across restarts and compressions too; a reply the platform could not take is tried again while
//! the daemon runs, with capped backoff, until the platform takes or refuses it; and it leaves
//! the store's outbox the moment it did, so a crash resends at most what was in flight.
//! A reply split into pieces is tracked piece by piece: each piece the platform took is noted
//! in the store, and a later try (in this run or after a restart) starts at the next one.
//!
//! Replies sent again (after a restart, or after a failed try) go at the platform's pace, a
//! few at a time: a crash in the middle of that duplicates at most those few, and a platform
//! that just came back is not flooded.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use herald_core::{ChatRef, Platform, SendError, Tracking};
use herald_store::{Store, Undelivered, now_ms};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, error, info, warn};

use crate::link::{Link, Reply};

/// Replies sent again that may be in flight at once on one platform.
const RESENDS_IN_FLIGHT: usize = 3;
/// New replies that may be in flight at once on one platform: sent and not yet marked
/// delivered, so what a crash can send twice.
const SENDS_IN_FLIGHT: usize = 32;
/// The pace of replies sent again on one platform (Telegram takes about 30 a second).
const RESEND_EVERY: Duration = Duration::from_millis(40);
/// The first wait after a failed try, doubled up to [`RETRY_CAP`].
const RETRY_FIRST: Duration = Duration::from_secs(1);
/// The longest wait between two tries of one reply.
const RETRY_CAP: Duration = Duration::from_secs(60);

/// How one try of a reply ended.
enum Tried {
    /// The platform took it, or refused it for good.
    Settled,
    /// It could not be delivered now.
    Failed,
    /// The drain ended, or the platform is not configured.
    Stopped,
}

/// A stored reply to deliver.
#[derive(Debug, Clone)]
pub(crate) struct Parcel {
    /// Its outbox entry, cleared once the platform took or refused it.
    pub(crate) outbox: Option<i64>,
    pub(crate) chat: ChatRef,
    pub(crate) reply_to: Option<String>,
    /// The inbound message it answers in place, if any (see [`herald_core::Outbound::Send`]).
    pub(crate) answers: Option<String>,
    pub(crate) text: String,
    /// When it was stored (milliseconds since the epoch).
    pub(crate) stored_at: i64,
    /// Sent again (after a restart or a failed try): paced, a few at a time.
    pub(crate) again: bool,
    /// How many of its pieces the platform took already.
    pub(crate) pieces: usize,
}

impl Parcel {
    /// A line that is not stored (a command's answer, a failure notice): it keeps its place
    /// among the chat's replies, and is lost with the process.
    pub(crate) fn unstored(chat: ChatRef, reply_to: Option<String>, text: String) -> Parcel {
        Parcel {
            outbox: None,
            chat,
            reply_to,
            answers: None,
            text,
            stored_at: now_ms(),
            again: false,
            pieces: 0,
        }
    }

    /// The same line, answering the inbound message `answers` in place where the platform
    /// can (a slash command's interaction).
    pub(crate) fn answering(self, answers: Option<String>) -> Parcel {
        Parcel { answers, ..self }
    }

    /// A reply left in the outbox by an earlier run.
    pub(crate) fn recovered(reply: Undelivered) -> Parcel {
        Parcel {
            outbox: Some(reply.message_id),
            chat: reply.delivery.chat,
            reply_to: reply.delivery.reply_to,
            answers: None,
            text: reply.delivery.text,
            stored_at: reply.created_at,
            again: true,
            pieces: usize::try_from(reply.pieces).unwrap_or(0),
        }
    }
}

/// What waits to be delivered: how many replies, and how long the oldest has waited.
#[derive(Debug, Clone, Default)]
pub struct Backlog(Arc<Mutex<HashMap<String, VecDeque<Parcel>>>>);

impl Backlog {
    /// Replies stored and not yet taken by their platform.
    pub fn pending(&self) -> u64 {
        self.lines().values().map(|line| line.len() as u64).sum()
    }

    /// How long the oldest of them has waited; `None` when nothing waits.
    pub fn oldest(&self) -> Option<Duration> {
        let oldest =
            self.lines().values().filter_map(|line| line.front()).map(|p| p.stored_at).min()?;
        Some(Duration::from_millis(u64::try_from(now_ms() - oldest).unwrap_or(0)))
    }

    fn lines(&self) -> std::sync::MutexGuard<'_, HashMap<String, VecDeque<Parcel>>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// How many replies one platform may have in flight (a slot is held from the send until the
/// reply is marked delivered), and the pace of those sent again.
#[derive(Debug)]
struct Pacer {
    sends: Arc<Semaphore>,
    resends: Arc<Semaphore>,
    next: tokio::sync::Mutex<Instant>,
}

impl Pacer {
    fn new() -> Pacer {
        Pacer {
            sends: Arc::new(Semaphore::new(SENDS_IN_FLIGHT)),
            resends: Arc::new(Semaphore::new(RESENDS_IN_FLIGHT)),
            next: tokio::sync::Mutex::new(Instant::now()),
        }
    }

    /// Waits for a free slot; a reply sent again also waits for the platform's next turn.
    async fn slot(&self, again: bool) -> Option<tokio::sync::OwnedSemaphorePermit> {
        if !again {
            return self.sends.clone().acquire_owned().await.ok();
        }
        let permit = self.resends.clone().acquire_owned().await.ok()?;
        let mut next = self.next.lock().await;
        tokio::time::sleep_until(*next).await;
        *next = Instant::now() + RESEND_EVERY;
        Some(permit)
    }
}

/// Delivers stored replies: one courier task per chat with replies waiting.
#[derive(Debug, Clone)]
pub(crate) struct Outbox {
    backlog: Backlog,
    store: Store,
    links: Arc<HashMap<Platform, Link>>,
    pacers: Arc<HashMap<Platform, Pacer>>,
    couriers: TaskTracker,
    /// Cancelled at the end of the drain: couriers stop, what is left stays in the store.
    stop: CancellationToken,
}

impl Outbox {
    pub(crate) fn new(store: Store, links: HashMap<Platform, Link>, backlog: Backlog) -> Outbox {
        let pacers = links.keys().map(|p| (*p, Pacer::new())).collect();
        Outbox {
            backlog,
            store,
            links: Arc::new(links),
            pacers: Arc::new(pacers),
            couriers: TaskTracker::new(),
            stop: CancellationToken::new(),
        }
    }

    /// Queues a reply behind its chat's earlier ones, for a courier to deliver. A reply for a
    /// platform that is not configured stays in the store for a run that has it.
    pub(crate) fn post(&self, parcel: Parcel) {
        if let Some(chat) = self.enqueue(parcel) {
            self.dispatch(chat, false);
        }
    }

    /// Like [`Outbox::post`], but when the chat has nothing waiting this task makes the first
    /// try itself, sparing the common case a hop to another task; a courier takes over only
    /// for what must wait.
    pub(crate) async fn carry(&self, mut parcel: Parcel) {
        let Some(chat) = self.enqueue(parcel.clone()) else { return };
        match self.attempt(&mut parcel, 1).await {
            Tried::Settled => {
                if self.pop(&chat) {
                    self.dispatch(chat, false);
                }
            }
            Tried::Failed => {
                if let Some(front) =
                    self.backlog.lines().get_mut(&chat).and_then(VecDeque::front_mut)
                {
                    front.again = true;
                    front.pieces = parcel.pieces;
                }
                self.dispatch(chat, true);
            }
            Tried::Stopped => {}
        }
    }

    /// Adds a reply to its chat's line; the line's key when it was empty (nobody delivers it).
    fn enqueue(&self, parcel: Parcel) -> Option<String> {
        if !self.links.contains_key(&parcel.chat.platform) {
            return None;
        }
        let chat = &parcel.chat;
        let key = format!(
            "{}\u{1f}{}\u{1f}{}",
            chat.platform,
            chat.id,
            chat.thread.as_deref().unwrap_or("")
        );
        let mut lines = self.backlog.lines();
        let line = lines.entry(key.clone()).or_default();
        line.push_back(parcel);
        (line.len() == 1).then_some(key)
    }

    /// Takes the delivered reply off its line; whether more wait behind it.
    fn pop(&self, chat: &str) -> bool {
        let mut lines = self.backlog.lines();
        let Some(line) = lines.get_mut(chat) else { return false };
        line.pop_front();
        if line.is_empty() {
            lines.remove(chat);
            return false;
        }
        true
    }

    /// The outbox entries of every reply waiting here (their claims are this replica's).
    pub(crate) fn stored_ids(&self) -> Vec<i64> {
        self.backlog.lines().values().flatten().filter_map(|p| p.outbox).collect()
    }

    fn dispatch(&self, chat: String, wait_first: bool) {
        let outbox = self.clone();
        self.couriers.spawn(async move { outbox.courier(chat, wait_first).await });
    }

    /// Waits up to `limit` for every queued reply to be delivered, then stops the couriers;
    /// what is left is sent at the next start. Whether everything went.
    pub(crate) async fn drain(&self, limit: Duration) -> bool {
        self.couriers.close();
        let delivered = tokio::time::timeout(limit, self.couriers.wait()).await.is_ok();
        self.stop.cancel();
        self.couriers.wait().await;
        delivered
    }

    /// Delivers one chat's replies in order until none is left, or the drain ends.
    async fn courier(self, chat: String, mut wait_first: bool) {
        loop {
            let parcel = {
                let lines = self.backlog.lines();
                match lines.get(&chat).and_then(VecDeque::front) {
                    Some(parcel) => parcel.clone(),
                    None => return,
                }
            };
            if !self.deliver(parcel, std::mem::take(&mut wait_first)).await || !self.pop(&chat) {
                return;
            }
        }
    }

    /// Tries one reply until the platform takes or refuses it (after a first wait when it has
    /// failed already); false when the drain ended first (the reply stays in the store).
    async fn deliver(&self, mut parcel: Parcel, wait_first: bool) -> bool {
        let mut wait = RETRY_FIRST;
        let mut tries = u32::from(wait_first);
        loop {
            if tries > 0 {
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    () = self.stop.cancelled() => return false,
                }
                wait = (wait * 2).min(RETRY_CAP);
            }
            tries += 1;
            match self.attempt(&mut parcel, tries).await {
                Tried::Settled => return true,
                Tried::Stopped => return false,
                Tried::Failed => parcel.again = true,
            }
        }
    }

    /// One try of one reply, from the first piece the platform has not taken: settled when
    /// the platform took or refused the rest. The pieces taken are noted in `parcel` and, for
    /// a stored reply, in the store as they go.
    async fn attempt(&self, parcel: &mut Parcel, tries: u32) -> Tried {
        let platform = parcel.chat.platform;
        let (Some(link), Some(pacer)) = (self.links.get(&platform), self.pacers.get(&platform))
        else {
            return Tried::Stopped;
        };
        let _slot = tokio::select! {
            slot = pacer.slot(parcel.again) => slot,
            () = self.stop.cancelled() => return Tried::Stopped,
        };
        debug!(chat = %parcel.chat.id, reply = %parcel.text, "sending reply");
        // The outbox entry names the reply across restarts, so every try has the same key.
        let (track, mut progress) = match parcel.outbox {
            Some(id) => {
                let (track, progress) =
                    Tracking::new(id.to_string(), parcel.pieces, parcel.again, parcel.stored_at);
                (Some(track), Some(progress))
            }
            None => (None, None),
        };
        let chat = parcel.chat.clone();
        let reply = Reply {
            chat: &chat,
            text: parcel.text.clone(),
            reply_to: parcel.reply_to.clone(),
            answers: parcel.answers.clone(),
            track,
        };
        let send = link.send(reply);
        tokio::pin!(send);
        let sent = loop {
            tokio::select! {
                sent = &mut send => break sent,
                Some(pieces) = async { progress.as_mut()?.recv().await } => {
                    self.taken(parcel, pieces).await;
                }
            }
        };
        // Pieces reported just before the answer: noted too, or a failed try that follows
        // would leave them to be sent again after a restart.
        let mut late = None;
        if let Some(progress) = &mut progress {
            while let Ok(pieces) = progress.try_recv() {
                late = late.max(Some(pieces));
            }
        }
        if let Some(pieces) = late
            && sent.is_err()
        {
            self.taken(parcel, pieces).await;
        }
        match sent {
            Ok(_) => {
                if tries > 1 {
                    info!(%platform, chat = %parcel.chat.id, tries, "a reply that had failed was delivered");
                }
                self.settled(parcel).await;
                Tried::Settled
            }
            Err(e @ SendError::Rejected(_)) => {
                error!(%platform, chat = %parcel.chat.id, error = %e, "the platform refused a reply (it is stored in the session)");
                self.settled(parcel).await;
                Tried::Settled
            }
            Err(e) => {
                warn!(
                    %platform, chat = %parcel.chat.id, error = %e,
                    "a reply could not be delivered yet; it is stored and tried again with backoff"
                );
                Tried::Failed
            }
        }
    }

    /// Notes that the platform took `pieces` pieces of a reply (more are to come): a later try
    /// starts after them, in this run or the next.
    async fn taken(&self, parcel: &mut Parcel, pieces: usize) {
        parcel.pieces = parcel.pieces.max(pieces);
        if let Some(id) = parcel.outbox {
            let pieces = i64::try_from(parcel.pieces).unwrap_or(i64::MAX);
            if let Err(e) = self.store.pieces_taken(id, pieces).await {
                warn!(error = %e, "could not note the pieces of a reply delivered so far; they may be sent again after a restart");
            }
        }
    }

    /// Takes a reply out of the store's outbox once its platform took or refused it.
    async fn settled(&self, parcel: &Parcel) {
        if let Some(id) = parcel.outbox
            && let Err(e) = self.store.delivered(id).await
        {
            warn!(error = %e, "could not clear a delivered reply from the outbox; it may be sent again after a restart");
        }
    }
}
