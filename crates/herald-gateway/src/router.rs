//! The router: every inbound message authorized, mapped to its session key and handed to
//! that key's worker; workers spawned on demand and dropped when idle.

use std::collections::HashMap;
use std::sync::Arc;

use herald_agent::Provider;
use herald_core::{
    AdapterEvent, ChatKind, ChatRef, Inbound, Placement, Platform, SessionKey, UserRef,
};
use herald_store::Session;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;
use tracing::{debug, error, info, warn};

use crate::auth::{self, Pairing, Verdict};
use crate::commands::Command;
use crate::cursors::{CursorKey, Cursors};
use crate::link::{PlatformState, PlatformStates};
use crate::outbox::Parcel;
use crate::shared::Shared;
use crate::worker::{Idle, Input, Worker};

/// Inputs a worker may have waiting before the router waits for it.
const WORKER_INBOX: usize = 256;
/// Keys with a message queued for another replica past which the finished ones are forgotten.
const FORWARDING_SWEEP: usize = 1024;
/// Messages being queued for other replicas at once.
const FORWARDING_AT_ONCE: usize = 512;

/// What reaches the router from the adapter tasks.
#[derive(Debug)]
pub(crate) enum Event {
    /// Something the adapter reported.
    Adapter(AdapterEvent),
    /// The adapter returned: `Some(error)` when it failed.
    Stopped(Option<String>),
}

pub(crate) struct WorkerHandle {
    inbox: mpsc::Sender<Input>,
    sent: u64,
}

/// The router's state.
pub(crate) struct Router<P> {
    pub(crate) shared: Arc<Shared<P>>,
    pub(crate) workers: HashMap<SessionKey, WorkerHandle>,
    pub(crate) tracker: TaskTracker,
    pub(crate) states: PlatformStates,
    pub(crate) cursors: Cursors,
    idle: mpsc::Sender<Idle>,
    pairing: Pairing,
    /// Per key, the last message on its way into the store for the replica running it.
    forwarding: HashMap<SessionKey, JoinHandle<()>>,
    /// Messages on their way into the store at once, at most: past that the router waits,
    /// and so do the platforms.
    forwarding_room: Arc<Semaphore>,
}

impl<P: Provider + 'static> Router<P> {
    pub(crate) fn new(
        shared: Arc<Shared<P>>,
        states: PlatformStates,
        cursors: Cursors,
        idle: mpsc::Sender<Idle>,
    ) -> Self {
        Router {
            shared,
            workers: HashMap::new(),
            tracker: TaskTracker::new(),
            states,
            cursors,
            idle,
            pairing: Pairing::default(),
            forwarding: HashMap::new(),
            forwarding_room: Arc::new(Semaphore::new(FORWARDING_AT_ONCE)),
        }
    }

    /// Picks up what a previous run left: sessions whose last message was not answered, then
    /// messages that were queued, in arrival order.
    pub(crate) async fn recover(&mut self) {
        // Replies stored before the last stop but never taken by their platform go first, in
        // their sessions' lines: what the workers answer next is queued behind them. Replicas
        // sharing a store claim such replies one by one instead (see replicas.rs): some of
        // them are another live replica's, on their way out.
        let replies = match self.shared.store.is_shared() {
            true => Ok(Vec::new()),
            false => self.shared.store.undelivered().await,
        };
        match replies {
            Ok(replies) => {
                if !replies.is_empty() {
                    info!(
                        replies = replies.len(),
                        "sending the replies stored before the last stop"
                    );
                }
                for reply in replies {
                    self.shared.outbox.post(Parcel::recovered(reply));
                }
            }
            Err(e) => warn!(error = %e, "could not read the replies left undelivered"),
        }
        match self.shared.store.unanswered_sessions().await {
            Ok(sessions) => {
                for session in sessions {
                    let Some(((chat, user), key)) = resume_target(&session) else { continue };
                    if self.shared.links.contains_key(&chat.platform) {
                        info!(key = %key, session = %session.id, "answering a message left unanswered at the last stop");
                        self.dispatch(key, Input::Resume(chat, user)).await;
                    }
                }
            }
            Err(e) => warn!(error = %e, "could not look for unanswered sessions"),
        }
        // Each key's worker takes its queue in at start, in arrival order.
        match self.shared.store.queued_inbound().await {
            Ok(queued) => {
                let mut keys: Vec<String> = Vec::new();
                for message in queued {
                    if self.shared.links.contains_key(&message.chat.platform)
                        && !keys.contains(&message.session_key)
                    {
                        keys.push(message.session_key);
                    }
                }
                for key in keys {
                    self.dispatch(SessionKey::from_stored(key), Input::Pull).await;
                }
            }
            Err(e) => warn!(error = %e, "could not read the inbound queue"),
        }
    }

    pub(crate) async fn on_event(&mut self, platform: Platform, event: Event) {
        match event {
            Event::Adapter(AdapterEvent::Inbound(inbound)) => self.on_inbound(inbound).await,
            Event::Adapter(
                event @ (AdapterEvent::Cursor(_)
                | AdapterEvent::ChannelCursor { .. }
                | AdapterEvent::Keep { .. }),
            ) => {
                if let Some((key, value)) = CursorKey::of_event(platform, &event) {
                    self.cursors.save(key, value);
                }
            }
            Event::Adapter(AdapterEvent::Connected { bot }) => {
                info!(%platform, %bot, "platform connected");
                self.states.set(platform, PlatformState::Connected { bot });
            }
            Event::Adapter(AdapterEvent::Retrying { error, retry_in }) => {
                warn!(%platform, %error, retry_in_ms = retry_in.as_millis() as u64, "platform connection lost; retrying");
                self.states.set(platform, PlatformState::Retrying { error });
            }
            Event::Stopped(Some(error)) => {
                error!(%platform, %error, "platform stopped; the other platforms keep running");
                self.states.set(platform, PlatformState::Failed { error });
            }
            Event::Stopped(None) => info!(%platform, "platform stopped"),
        }
    }

    async fn on_inbound(&mut self, inbound: Inbound) {
        let platform = inbound.chat.platform;
        let access = self.shared.settings.access(platform);
        let verdict = match auth::authorize(&self.shared.store, &access, &inbound).await {
            Ok(verdict) => verdict,
            Err(e) => {
                warn!(%platform, error = %e, "could not check authorization; the message will be delivered again");
                return;
            }
        };
        match verdict {
            Verdict::Ignore(why) => {
                debug!(%platform, user = %inbound.user.id, chat = %inbound.chat.id, why, "message ignored");
                inbound.ack.settle();
            }
            Verdict::Pair => self.on_unknown(inbound).await,
            Verdict::Allowed(allowed) => {
                let mut inbound = inbound;
                // A command is answered where it was written; a message the platform answers
                // in a thread on it moves there now, so its session is the thread's from the
                // first answer on (see herald_core::reply).
                if Command::parse(&inbound.text).is_none() {
                    let style = self.shared.reply_style(platform);
                    let placement = Placement::of(&inbound.chat, &inbound.id, style);
                    inbound.chat = placement.follow_ups(&inbound.chat);
                }
                let key = SessionKey::for_chat(
                    &inbound.chat,
                    &inbound.user,
                    self.shared.settings.group_sessions_per_user,
                );
                self.dispatch(key, Input::Inbound(inbound, allowed)).await;
            }
        }
    }

    /// An unknown user in a DM: a pairing code (or `/whoami`), never the model.
    async fn on_unknown(&mut self, inbound: Inbound) {
        let platform = inbound.chat.platform;
        let reply = if Command::parse(&inbound.text) == Some(Command::Whoami) {
            Some(format!(
                "Your {platform} user id is {}. You may not talk to me yet.",
                inbound.user.id
            ))
        } else {
            let ttl = self.shared.settings.pairing_ttl;
            match self.pairing.reply(&self.shared.store, &inbound, ttl).await {
                Ok(reply) => reply,
                Err(e) => {
                    warn!(%platform, error = %e, "could not issue a pairing code; the message will be delivered again");
                    return;
                }
            }
        };
        if let (Some(reply), Some(link)) = (reply, self.shared.links.get(&platform)) {
            link.notify(&inbound.chat, reply).await;
        }
        inbound.ack.settle();
    }

    /// Hands an input to its key's worker. With no worker, one is started once this process
    /// holds the session's lock; when another replica holds it, a message is stored in the
    /// session's queue for that replica to answer.
    async fn dispatch(&mut self, key: SessionKey, input: Input) {
        let mut input = input;
        for _ in 0..2 {
            let handle = match self.workers.get_mut(&key) {
                Some(handle) => handle,
                None => {
                    let lock = match self.shared.store.lock_session(key.as_str()).await {
                        Ok(Some(lock)) => lock,
                        Ok(None) => {
                            debug!(key = %key, "another replica runs this session");
                            return self.elsewhere(&key, input).await;
                        }
                        Err(e) => {
                            // Unsettled, a message is delivered again; the sweep comes back
                            // for what waits in the store.
                            warn!(key = %key, error = %e, "could not take the session's lock; its input waits");
                            return;
                        }
                    };
                    // What this replica was still queueing for the key's last holder goes
                    // first: the new worker takes the queue in before anything else.
                    if let Some(queueing) = self.forwarding.remove(&key) {
                        let _ = queueing.await;
                    }
                    let Some((chat, user)) = self.input_origin(&key, &input).await else {
                        return;
                    };
                    let (inbox, inputs) = mpsc::channel(WORKER_INBOX);
                    let worker = Worker::new(
                        key.clone(),
                        self.shared.clone(),
                        self.idle.clone(),
                        chat,
                        user,
                        lock,
                    );
                    self.tracker.spawn(worker.run(inputs));
                    self.workers.entry(key.clone()).or_insert(WorkerHandle { inbox, sent: 0 })
                }
            };
            handle.sent += 1;
            match handle.inbox.send(input).await {
                Ok(()) => return,
                Err(mpsc::error::SendError(back)) => {
                    debug!(key = %key, "a session worker had stopped; starting it again");
                    self.workers.remove(&key);
                    input = back;
                }
            }
        }
    }

    /// Another replica runs this session: a message goes into the session's queue in the store
    /// (whoever holds the session hears of it and answers it in order); anything else is
    /// already that replica's to do. The store's round trip is not waited for here, where
    /// every other chat's message waits too: each key's messages go in one after another.
    async fn elsewhere(&mut self, key: &SessionKey, input: Input) {
        let Input::Inbound(inbound, _) = input else { return };
        let Inbound { id, chat, user, text, ack, .. } = inbound;
        let store = self.shared.store.clone();
        let before = self.forwarding.remove(key);
        let owner = key.clone();
        // Never closed.
        let room = Arc::clone(&self.forwarding_room).acquire_owned().await;
        let queueing = self.tracker.spawn(async move {
            let _room = room;
            if let Some(before) = before {
                let _ = before.await;
            }
            match store.queue_inbound(owner.as_str(), &id, &chat, &user, &text).await {
                Ok(queued) => {
                    ack.settle();
                    debug!(key = %owner, ?queued, "queued for the replica running the session");
                }
                Err(e) => {
                    warn!(key = %owner, error = %e, "could not queue a message for another replica; it will be delivered again");
                }
            }
        });
        if self.forwarding.len() >= FORWARDING_SWEEP {
            self.forwarding.retain(|_, queueing| !queueing.is_finished());
        }
        self.forwarding.insert(key.clone(), queueing);
    }

    /// Which chat and user a new worker starts with: the input's, or for a pull the first
    /// queued message's (`None` when nothing is queued any more).
    async fn input_origin(&self, key: &SessionKey, input: &Input) -> Option<(ChatRef, UserRef)> {
        match input {
            Input::Inbound(inbound, _) => Some((inbound.chat.clone(), inbound.user.clone())),
            Input::Resume(chat, user) => Some((chat.clone(), user.clone())),
            Input::Pull => match self.shared.store.queued_for(key.as_str()).await {
                Ok(queued) => queued.into_iter().next().map(|q| (q.chat, q.user)),
                Err(e) => {
                    warn!(key = %key, error = %e, "could not read a session's queue");
                    None
                }
            },
        }
    }

    /// A message was queued for `key`: the key's worker here, if there is one, takes it in.
    /// Every replica hears every queued message; one without the key's worker leaves it to the
    /// replica that has one, or to the sweep for keys whose holder is gone.
    pub(crate) async fn on_queued(&mut self, key: SessionKey) {
        if self.workers.contains_key(&key) {
            self.dispatch(key, Input::Pull).await;
        }
    }

    /// The sweep found messages queued for `key`: a worker here has them (it queued them, or
    /// heard of them); otherwise their holder may have died, and this replica takes them if it
    /// gets the lock.
    pub(crate) async fn on_orphan(&mut self, key: SessionKey) {
        if !self.workers.contains_key(&key) {
            self.dispatch(key, Input::Pull).await;
        }
    }

    /// Notifications may have been missed (the store's listening connection came back): every
    /// worker here looks at its queue once.
    pub(crate) async fn on_missed(&mut self) {
        let keys: Vec<SessionKey> = self.workers.keys().cloned().collect();
        for key in keys {
            self.dispatch(key, Input::Pull).await;
        }
    }

    /// A session left unanswered (its replica died mid-turn): answered here if this replica
    /// gets its lock.
    pub(crate) async fn on_unanswered(&mut self, session: Session) {
        let Some(((chat, user), key)) = resume_target(&session) else { return };
        if self.workers.contains_key(&key) || !self.shared.links.contains_key(&chat.platform) {
            return;
        }
        info!(key = %key, session = %session.id, "a message is left unanswered; answering it here if no replica runs its session");
        self.dispatch(key, Input::Resume(chat, user)).await;
    }

    /// Drops an idle worker, unless something was sent to it after it said so.
    pub(crate) fn on_idle(&mut self, idle: Idle) {
        if self.workers.get(&idle.key).is_some_and(|h| h.sent == idle.received) {
            self.workers.remove(&idle.key);
        }
    }
}

/// Where to answer a stored session: its chat, its user and its key.
fn resume_target(session: &Session) -> Option<((ChatRef, UserRef), SessionKey)> {
    let key = SessionKey::from_stored(session.session_key.clone()?);
    let kind = ChatKind::from_stored(session.chat_type.as_deref().unwrap_or_default());
    let chat = ChatRef {
        platform: session.source,
        id: session.chat_id.clone()?,
        kind,
        thread: session.thread_id.clone(),
    };
    let user = UserRef::new(session.user_id.clone().unwrap_or_default());
    Some(((chat, user), key))
}
