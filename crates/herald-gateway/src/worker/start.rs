//! A key's task before it runs the session: it asks the store for the session's lock, off the
//! router's loop, and while another replica holds the session it queues this replica's
//! messages for that replica, one after another, in order.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use herald_agent::Provider;
use herald_core::{ChatRef, Inbound, SessionKey, UserRef};
use herald_store::{SessionLock, StoreError};
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::{Idle, Input, Worker};
use crate::shared::Shared;

/// Serves one key's inputs until the router drops its sender: as the session's worker once the
/// lock is this replica's, queueing messages while another replica holds it. `holds` tells the
/// router which of the two it is.
pub(crate) async fn serve<P: Provider + 'static>(
    key: SessionKey,
    shared: Arc<Shared<P>>,
    idle: mpsc::Sender<Idle>,
    mut inputs: mpsc::Receiver<Input>,
    holds: Arc<AtomicBool>,
) {
    let idle_after = shared.settings.idle_worker;
    let mut received = 0u64;
    // Whether another replica held the lock when this task last asked.
    let mut elsewhere = false;
    let mut told_idle = false;
    loop {
        let input = tokio::select! {
            input = inputs.recv() => match input {
                Some(input) => input,
                None => return,
            },
            () = tokio::time::sleep(idle_after), if !told_idle => {
                // Never waits, as in the worker.
                told_idle = idle.try_send(Idle { key: key.clone(), received }).is_ok();
                continue;
            }
        };
        received += 1;
        told_idle = false;
        // A message for a session held elsewhere goes straight to its queue. Anything else (a
        // pull, a resume) means the holder may be gone: the lock is asked for again. Once the
        // router has let go (shutdown), nothing new starts here: a message is stored for
        // whoever runs the session next.
        let input = match input {
            Input::Inbound(inbound, _) if elsewhere || inputs.is_closed() => {
                queue(&shared, &key, inbound).await;
                continue;
            }
            _ if inputs.is_closed() => continue,
            input => input,
        };
        let lock = match lock(&shared, &key).await {
            Ok(Some(lock)) => lock,
            Ok(None) => {
                debug!(key = %key, "another replica runs this session");
                // Alone on its store, the next message asks for the lock again.
                elsewhere = shared.store.is_shared();
                if let Input::Inbound(inbound, _) = input {
                    queue(&shared, &key, inbound).await;
                }
                continue;
            }
            Err(e) => {
                // Unsettled, a message is delivered again; the sweep comes back for what
                // waits in the store.
                warn!(key = %key, error = %e, "could not take the session's lock; its input waits");
                continue;
            }
        };
        elsewhere = false;
        let Some((chat, user)) = origin(&shared, &key, &input).await else {
            // A pull that found nothing queued any more: nothing to run.
            continue;
        };
        holds.store(true, Ordering::Release);
        let held = shared.metrics.session_held();
        let worker = Worker::new(key, shared.clone(), idle, chat, user, lock, received);
        worker.run(input, inputs).await;
        drop(held);
        holds.store(false, Ordering::Release);
        return;
    }
}

/// The session's lock, or `None` while another replica holds it. A store of one process has no
/// other replica, and no sweep to come back for queued messages: there the holder is this
/// process's last worker for the key, on its way out, and the lock is asked for again until
/// it is gone.
async fn lock<P>(shared: &Shared<P>, key: &SessionKey) -> Result<Option<SessionLock>, StoreError> {
    let mut tries = 0;
    loop {
        let lock = shared.store.lock_session(key.as_str()).await?;
        if lock.is_some() || shared.store.is_shared() || tries == LOCAL_TRIES {
            return Ok(lock);
        }
        tries += 1;
        tokio::time::sleep(LOCAL_PAUSE).await;
    }
}

/// How often, and how far apart, a store of one process asks again for a held lock.
const LOCAL_TRIES: u32 = 100;
const LOCAL_PAUSE: Duration = Duration::from_millis(10);

/// Stores a message in the session's queue for the replica running it, which hears of it and
/// answers it in order.
async fn queue<P>(shared: &Shared<P>, key: &SessionKey, inbound: Inbound) {
    let Inbound { id, chat, user, text, ack, .. } = inbound;
    match shared.store.queue_inbound(key.as_str(), &id, &chat, &user, &text).await {
        Ok(queued) => {
            ack.settle();
            debug!(key = %key, ?queued, "queued for the replica running the session");
        }
        Err(e) => {
            warn!(key = %key, error = %e, "could not queue a message for another replica; it will be delivered again");
        }
    }
}

/// Which chat and user a new worker starts with: the input's, or for a pull the first queued
/// message's (`None` when nothing is queued any more).
async fn origin<P>(
    shared: &Shared<P>,
    key: &SessionKey,
    input: &Input,
) -> Option<(ChatRef, UserRef)> {
    match input {
        Input::Inbound(inbound, _) => Some((inbound.chat.clone(), inbound.user.clone())),
        Input::Resume(chat, user) => Some((chat.clone(), user.clone())),
        Input::Queued(message) => Some((message.chat.clone(), message.user.clone())),
        Input::Pull => match shared.store.queued_for(key.as_str()).await {
            Ok(queued) => queued.into_iter().next().map(|q| (q.chat, q.user)),
            Err(e) => {
                warn!(key = %key, error = %e, "could not read a session's queue");
                None
            }
        },
    }
}
