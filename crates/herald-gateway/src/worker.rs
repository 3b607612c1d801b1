//! One worker per active session key: messages of one conversation strictly in order, one
//! agent run at a time, and a real FIFO for what arrives meanwhile.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use herald_agent::Provider;
use herald_core::{ChatRef, Inbound, Placement, SessionKey, UserRef};
use herald_store::{Appended, NewMessage, QueuedInbound, SessionLock};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::auth::Allowed;
use crate::commands::Command;
use crate::settings::BusyInput;
use crate::shared::Shared;
use crate::turn::{self, SessionInfo, TurnEnd, TurnJob};

/// What the router hands a worker.
#[derive(Debug)]
pub(crate) enum Input {
    /// An authorized message (or command) from the platform.
    Inbound(Inbound, Allowed),
    /// The session's last message was left unanswered by a restart.
    Resume(ChatRef, UserRef),
    /// Messages were queued in the store for this key (by another replica, or before a
    /// restart): take them in (a new worker does so as it starts).
    Pull,
    /// Another replica queued this message for this key: take it in.
    Queued(Box<QueuedInbound>),
}

/// A worker saying it has been idle, having received `received` inputs in all.
#[derive(Debug)]
pub(crate) struct Idle {
    pub(crate) key: SessionKey,
    pub(crate) received: u64,
}

/// What waits for the running turn to end.
#[derive(Debug)]
enum Pending {
    /// A stored, queued message (its `inbound_queue` position), and who wrote it where.
    Message { seq: i64, reply_to: Option<String>, chat: ChatRef, user: UserRef },
    /// A command that changes the session, and the inbound id it answers.
    Command(Command, Allowed, Option<String>),
    /// Answer the session's unanswered last message, written by this user in this chat.
    Resume(ChatRef, UserRef),
}

/// The state of one conversation's worker.
pub(crate) struct Worker<P> {
    key: SessionKey,
    shared: Arc<Shared<P>>,
    idle: mpsc::Sender<Idle>,
    session: Option<SessionInfo>,
    queue: VecDeque<Pending>,
    running: Option<CancellationToken>,
    chat: ChatRef,
    user: UserRef,
    received: u64,
    /// This key's session lock: no other replica runs the session while it is held.
    lock: SessionLock,
    /// Queue positions already taken into `queue`, so a pull takes each message once.
    known: HashSet<i64>,
    /// The key had no route when the worker started (nothing has routed it since but this
    /// worker, which holds its lock).
    unrouted: bool,
    /// The worker created the session, and no turn or command has run in it since: it holds
    /// nothing yet.
    fresh: bool,
}

impl<P: Provider + 'static> Worker<P> {
    pub(crate) fn new(
        key: SessionKey,
        shared: Arc<Shared<P>>,
        idle: mpsc::Sender<Idle>,
        chat: ChatRef,
        user: UserRef,
        lock: SessionLock,
        received: u64,
    ) -> Self {
        Worker {
            key,
            shared,
            idle,
            session: None,
            queue: VecDeque::new(),
            running: None,
            chat,
            user,
            received,
            lock,
            known: HashSet::new(),
            unrouted: false,
            fresh: false,
        }
    }

    /// Runs `first` (the input it was started for), then what the router hands over, until the
    /// router drops the sender (idle or shutdown) and the running turn ended. Queued messages
    /// left at shutdown stay in the store and are answered after a restart.
    pub(crate) async fn run(mut self, first: Input, mut inputs: mpsc::Receiver<Input>) {
        let idle_after = self.shared.settings.idle_worker;
        let mut closed = false;
        let mut told_idle = false;
        let mut lost = false;
        // What waits in the store for this key goes first: it arrived before anything the
        // router hands over from now on. A replica that died in the middle of a turn left its
        // message unanswered: whoever holds the session next answers it first.
        // Started by a message, the worker creates the session it needs in the same read.
        let create =
            matches!(&first, Input::Inbound(inbound, _) if Command::parse(&inbound.text).is_none());
        let (unanswered, queued) = self.open(create).await;
        // A message whose turn was cut short (a crash, the end of the drain) is answered on
        // its own before what was queued behind it, or the next turn would take it in as mere
        // history. Where a newer message interrupts a turn, it is taken in with the newer one,
        // as the interruption would have. Alone on its store, the router asks for this at
        // start (`Input::Resume`); on a shared one, another replica's death leaves it here.
        // Asked for, it is queued whatever the first read said (a failed read says no):
        // `start_next` looks at the session again before it answers.
        if matches!(first, Input::Resume(..)) || (self.shared.store.is_shared() && unanswered) {
            self.queue.push_back(Pending::Resume(self.chat.clone(), self.user.clone()));
        }
        if queued {
            self.pull().await;
        }
        let interrupt = self.shared.settings.busy_input == BusyInput::Interrupt;
        if interrupt && self.queue.iter().any(|p| matches!(p, Pending::Message { .. })) {
            self.queue.retain(|p| !matches!(p, Pending::Resume(..)));
        }
        // Behind what waits in the store: a command waits for the turn started first. A pull's
        // messages were just taken in.
        let mut turn: Option<JoinHandle<TurnEnd>> = self.start_next().await;
        if !matches!(first, Input::Pull | Input::Resume(..))
            && let Some(started) = self.on_input(first, turn.is_some()).await
        {
            turn = Some(started);
        }
        loop {
            if turn.is_none() && !closed {
                turn = self.start_next().await;
            }
            if closed && turn.is_none() {
                // Another replica may run the session now: what waits is its to do.
                if !lost {
                    self.finish_commands().await;
                }
                break;
            }
            let idle = turn.is_none() && self.queue.is_empty() && !told_idle;
            tokio::select! {
                input = inputs.recv(), if !closed => match input {
                    Some(input) => {
                        self.received += 1;
                        told_idle = false;
                        if let Some(started) = self.on_input(input, turn.is_some()).await {
                            turn = Some(started);
                        }
                    }
                    None => closed = true,
                },
                end = async { turn.as_mut().expect("guarded by is_some").await }, if turn.is_some() => {
                    turn = None;
                    self.running = None;
                    match end {
                        Ok(TurnEnd::Answered { moved: Some(child) }) => self.moved_to(*child),
                        Ok(TurnEnd::Answered { moved: None } | TurnEnd::Nothing) => {}
                        // The turn may have compressed the conversation before it failed: the
                        // route says where it goes on.
                        Ok(TurnEnd::Failed | TurnEnd::Cancelled) => self.session = None,
                        Err(e) => warn!(key = %self.key, error = %e, "a turn task failed"),
                    }
                }
                () = tokio::time::sleep(idle_after), if idle => {
                    // Never waits: the router may be waiting for this worker's inbox. When the
                    // router is behind, the worker says so again after another idle spell.
                    let idle = Idle { key: self.key.clone(), received: self.received };
                    told_idle = self.idle.try_send(idle).is_ok();
                }
                () = self.lock.lost(), if !lost => {
                    // The store no longer vouches that this replica alone runs the session:
                    // stop at once; the unanswered message is answered by whoever holds it next.
                    warn!(key = %self.key, "lost the session's lock (the store's connection broke); stopping its turn");
                    lost = true;
                    closed = true;
                    self.queue.clear();
                    if let Some(running) = &self.running {
                        running.cancel();
                    }
                    // The router finds the inbox closed and takes the lock again before it
                    // runs the session here.
                }
            }
        }
    }

    /// Takes in what the store has queued for this key and this worker has not seen, in queue
    /// order; a command is run as a command.
    async fn pull(&mut self) {
        let queued = match self.shared.store.queued_for(self.key.as_str()).await {
            Ok(queued) => queued,
            Err(e) => {
                warn!(key = %self.key, error = %e, "could not read the session's queued messages; they wait in the store");
                return;
            }
        };
        for message in queued {
            if self.known.insert(message.seq) {
                self.take_in(message).await;
            }
        }
    }

    /// One message another replica (or an earlier run) queued for this key.
    async fn take_in(&mut self, queued: QueuedInbound) {
        self.chat = queued.chat.clone();
        self.user = queued.user.clone();
        if let Some(command) = Command::parse(&queued.content) {
            // Stored as a message by whoever received it; it is a command: it leaves the queue
            // without entering the history, like a command received here. Gone already, it was
            // run by whoever took it out.
            match self.shared.store.unqueue(queued.seq).await {
                Ok(true) => {}
                Ok(false) => return,
                Err(e) => {
                    warn!(key = %self.key, error = %e, "could not take a queued command out of the queue");
                    return;
                }
            }
            let answers = Some(queued.message_id);
            self.queue.push_back(Pending::Command(command, Allowed::Listed, answers));
            return;
        }
        let style = self.shared.reply_style(queued.chat.platform);
        let reply_to = match Placement::of(&queued.chat, &queued.message_id, style) {
            Placement::Quote(message) => Some(message),
            Placement::Plain | Placement::Thread(_) => None,
        };
        let (chat, user) = (queued.chat, queued.user);
        self.queue.push_back(Pending::Message { seq: queued.seq, reply_to, chat, user });
    }

    async fn on_input(&mut self, input: Input, busy: bool) -> Option<JoinHandle<TurnEnd>> {
        match input {
            Input::Inbound(inbound, allowed) => {
                self.chat = inbound.chat.clone();
                self.user = inbound.user.clone();
                match Command::parse(&inbound.text) {
                    Some(command) => self.on_command(command, inbound, allowed, busy).await,
                    None => self.on_message(inbound, busy).await,
                }
            }
            Input::Pull => {
                self.pull().await;
                None
            }
            Input::Queued(message) => {
                if self.known.insert(message.seq) {
                    self.take_in(*message).await;
                }
                None
            }
            Input::Resume(chat, user) => {
                self.queue.push_back(Pending::Resume(chat, user));
                None
            }
        }
    }

    /// Stores the message before anything else: appended to the history when the session is
    /// free, queued when it is busy. The ack is settled only once it is stored; an unsettled
    /// ack makes the platform deliver it again.
    async fn on_message(&mut self, inbound: Inbound, busy: bool) -> Option<JoinHandle<TurnEnd>> {
        let Inbound { id, chat, user, text, ack, .. } = inbound;
        // The router already moved a message that opens a thread into it: what is left is
        // whether to quote the message.
        let reply_to = match Placement::of(&chat, &id, self.shared.reply_style(chat.platform)) {
            Placement::Quote(message) => Some(message),
            Placement::Plain | Placement::Thread(_) => None,
        };
        let session = match self.session().await {
            Ok(session) => session,
            Err(e) => {
                warn!(key = %self.key, error = %e, "could not open the session; the message will be delivered again");
                return None;
            }
        };
        let fresh = std::mem::take(&mut self.fresh);
        let store = &self.shared.store;
        if busy || !self.queue.is_empty() {
            let queued = store.queue_inbound(self.key.as_str(), &id, &chat, &user, &text);
            match queued.await {
                Ok(Some(seq)) => {
                    ack.settle();
                    self.known.insert(seq);
                    debug!(key = %self.key, seq, "queued while the session is busy");
                    let (chat, user) = (chat.clone(), user.clone());
                    self.queue.push_back(Pending::Message { seq, reply_to, chat, user });
                    if self.shared.settings.busy_input == BusyInput::Interrupt
                        && let Some(running) = &self.running
                    {
                        running.cancel();
                    }
                }
                Ok(None) => ack.settle(),
                Err(e) => {
                    warn!(key = %self.key, error = %e, "could not queue a message; it will be delivered again")
                }
            }
            return None;
        }
        // Just created, the session holds nothing else: its history needs no reading back.
        let first = fresh.then(|| text.clone());
        let message = NewMessage::user(text);
        match store.append_inbound(&session.session.id, chat.platform, &id, message).await {
            Ok(Appended::Stored(_)) => {
                ack.settle();
                Some(self.spawn_turn(Vec::new(), reply_to, first))
            }
            Ok(Appended::Duplicate) => {
                ack.settle();
                debug!(key = %self.key, id = %id, "a redelivered message was ignored");
                None
            }
            Err(e) => {
                warn!(key = %self.key, error = %e, "could not store a message; it will be delivered again");
                None
            }
        }
    }

    async fn on_command(
        &mut self,
        command: Command,
        inbound: Inbound,
        allowed: Allowed,
        busy: bool,
    ) -> Option<JoinHandle<TurnEnd>> {
        let recorded = self.shared.store.record_inbound(inbound.chat.platform, &inbound.id);
        match recorded.await {
            Ok(true) => inbound.ack.settle(),
            Ok(false) => {
                inbound.ack.settle();
                return None;
            }
            Err(e) => {
                warn!(key = %self.key, error = %e, "could not record a command; it will be delivered again");
                return None;
            }
        }
        if busy && command.waits_for_turn() {
            self.queue.push_back(Pending::Command(command, allowed, Some(inbound.id)));
            return None;
        }
        self.run_command(command, allowed, busy, Some(inbound.id)).await
    }

    /// Starts what waits: the next message (in interrupt mode, every waiting message at
    /// once), a command, or a resumed answer.
    async fn start_next(&mut self) -> Option<JoinHandle<TurnEnd>> {
        while let Some(pending) = self.queue.pop_front() {
            match pending {
                Pending::Message { seq, mut reply_to, mut chat, mut user } => {
                    let mut take = vec![seq];
                    while self.shared.settings.busy_input == BusyInput::Interrupt {
                        let Some(Pending::Message { .. }) = self.queue.front() else { break };
                        if let Some(Pending::Message { seq, reply_to: newer, chat: c, user: u }) =
                            self.queue.pop_front()
                        {
                            take.push(seq);
                            (reply_to, chat, user) = (newer, c, u);
                        }
                    }
                    // The turn answers the newest of them, where and for whom it was written.
                    (self.chat, self.user) = (chat, user);
                    if self.session_or_log().await {
                        return Some(self.spawn_turn(take, reply_to, None));
                    }
                }
                Pending::Resume(chat, user) => {
                    (self.chat, self.user) = (chat, user);
                    // Asked for twice (the sweep, and this worker's own look at the session
                    // when it started), or answered meanwhile: answered once.
                    if self.left_unanswered().await && self.session_or_log().await {
                        return Some(self.spawn_turn(Vec::new(), None, None));
                    }
                }
                Pending::Command(command, allowed, answers) => {
                    if let Some(started) = self.run_command(command, allowed, false, answers).await
                    {
                        return Some(started);
                    }
                }
            }
        }
        None
    }

    /// At shutdown: commands still waiting are quick and change only the store; run them.
    async fn finish_commands(&mut self) {
        while let Some(pending) = self.queue.pop_front() {
            // /retry and /compress call the model: not during the drain.
            if let Pending::Command(command, allowed, answers) = pending
                && !matches!(command, Command::Retry | Command::Compress)
            {
                let _ = self.run_command(command, allowed, false, answers).await;
            }
        }
    }

    fn spawn_turn(
        &mut self,
        take: Vec<i64>,
        reply_to: Option<String>,
        first: Option<String>,
    ) -> JoinHandle<TurnEnd> {
        self.fresh = false;
        let cancel = self.shared.stop_turns.child_token();
        self.running = Some(cancel.clone());
        let job = TurnJob {
            session: self.session.clone().expect("a turn starts only once the session is known"),
            chat: self.chat.clone(),
            user: self.user.clone(),
            take,
            reply_to,
            first,
            cancel,
        };
        tokio::spawn(turn::run(self.shared.clone(), job))
    }
}

mod session;
mod slash;
pub(crate) mod start;
