//! What adapters hand the gateway (`Inbound`) and what the gateway asks them to do (`Outbound`).

use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::chat::{ChatRef, UserRef};

/// A message a person wrote to the bot, translated from the platform's event.
#[derive(Debug)]
pub struct Inbound {
    /// The platform's id for this message, stable across redelivery (dedupe key).
    pub id: String,
    /// Where it was written.
    pub chat: ChatRef,
    /// Who wrote it.
    pub user: UserRef,
    /// The text, with a leading mention of the bot removed and `/cmd@bot` reduced to `/cmd`.
    pub text: String,
    /// Whether the message mentions the bot.
    pub mentioned: bool,
    /// Whether the message replies to one of the bot's messages.
    pub reply_to_bot: bool,
    /// Settled by the gateway once the message is stored (or deliberately ignored).
    pub ack: Ack,
}

impl Inbound {
    /// Whether the message is addressed to the bot (a mention or a reply to it).
    pub fn addressed(&self) -> bool {
        self.mentioned || self.reply_to_bot
    }
}

/// The gateway's promise about one inbound message: settled once it is durable.
///
/// Settled means the message is stored with its platform id (so a redelivery is answered
/// once), or deliberately ignored (unauthorized, not addressed); it never waits for the
/// answer. An ack dropped unsettled means "not kept: deliver it again". What an adapter does
/// with it, per platform:
/// - Telegram: the update offset moves only past settled updates; no deadline, as an update
///   not confirmed is simply fetched again.
/// - Discord: a channel's cursor ([`crate::AdapterEvent::ChannelCursor`]) moves only past
///   settled messages, so a backfill after a gap starts at the first unsettled one; no
///   deadline either.
/// - Slack: the envelope is acknowledged once settled, which must happen within 3 s of its
///   arrival, or Slack delivers it again (`retry_attempt`) and the dedupe answers it once. An
///   envelope is never acknowledged unsettled, so a late store costs a redelivery, not a loss.
///
/// A message whose sender the platform can answer privately (a Discord slash command) has an
/// [`Ack::answerable`] ack: the gateway refuses it with one line for its sender instead
/// ([`Ack::refuse`]) when the sender may not use the bot, and the adapter answers with that
/// line alone.
#[derive(Debug)]
pub struct Ack(Option<Settle>);

#[derive(Debug)]
enum Settle {
    Kept(oneshot::Sender<()>),
    Answerable(oneshot::Sender<Taken>),
}

/// How the gateway took a message with an [`Ack::answerable`] ack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Taken {
    /// Kept (stored or recorded): it is answered as usual.
    Kept,
    /// Its sender may not use the bot: this line, for them alone, is all the answer.
    Refused(String),
}

impl Ack {
    /// A new ack and the receiver that resolves when it is settled (an error when dropped).
    pub fn new() -> (Ack, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        (Ack(Some(Settle::Kept(tx))), rx)
    }

    /// An ack whose receiver also hears a refusal and its line (an error when dropped).
    pub fn answerable() -> (Ack, oneshot::Receiver<Taken>) {
        let (tx, rx) = oneshot::channel();
        (Ack(Some(Settle::Answerable(tx))), rx)
    }

    /// An ack nobody waits for.
    pub fn none() -> Ack {
        Ack(None)
    }

    /// Whether a refusal reaches the sender ([`Ack::answerable`]).
    pub fn answers_refusal(&self) -> bool {
        matches!(self.0, Some(Settle::Answerable(_)))
    }

    /// Marks the message as kept: stored, or deliberately ignored.
    pub fn settle(mut self) {
        match self.0.take() {
            Some(Settle::Kept(tx)) => drop(tx.send(())),
            Some(Settle::Answerable(tx)) => drop(tx.send(Taken::Kept)),
            None => {}
        }
    }

    /// Refuses the message with `line` for its sender alone; to an ack that cannot carry it,
    /// the same as [`Ack::settle`] (deliberately ignored).
    pub fn refuse(mut self, line: String) {
        match self.0.take() {
            Some(Settle::Kept(tx)) => drop(tx.send(())),
            Some(Settle::Answerable(tx)) => drop(tx.send(Taken::Refused(line))),
            None => {}
        }
    }
}

/// The platform's id of a message the bot sent.
pub type SentId = String;

/// Something the gateway asks an adapter to do.
#[derive(Debug)]
pub enum Outbound {
    /// Send a reply, written in markdown: the adapter converts the markup and splits it to the
    /// platform's limit. `done` receives the ids of the messages sent, or the failure.
    Send {
        /// Where to send it.
        chat: ChatRef,
        /// Markdown text.
        text: String,
        /// Reply to this platform message id, if the platform supports replies.
        reply_to: Option<String>,
        /// The inbound message this answers, when the platform answers some in place of a
        /// message (a Discord slash command's interaction).
        answers: Option<String>,
        /// A stored reply's name and progress, the same on every try across restarts; `None`
        /// for a line that is not stored (a command's answer, a notice).
        track: Option<Tracking>,
        /// Resolved when the platform accepted every part, or when sending failed for good.
        done: Option<oneshot::Sender<Result<Vec<SentId>, SendError>>>,
    },
    /// Replace the text of a message the bot sent before.
    Edit {
        /// The chat of the message.
        chat: ChatRef,
        /// The message to edit.
        message: SentId,
        /// New markdown text (within one message's limit).
        text: String,
    },
    /// Show that the bot is working ("typing..."); platforms clear it by themselves.
    Typing {
        /// The chat to show it in.
        chat: ChatRef,
    },
}

/// A stored reply as its adapter sees it: which one it is, how much of it the platform took
/// already, and whether an earlier try may have reached the platform unseen.
///
/// An adapter sends the reply's pieces from [`Tracking::from`] on and reports each piece the
/// platform took with [`Tracking::taken`], so a reply cut short (a failed piece, a crash) is
/// resumed where it stopped, never resent whole.
#[derive(Debug, Clone)]
pub struct Tracking {
    /// Names the reply across tries and restarts (its outbox entry). A platform that
    /// deduplicates sends (Discord's `nonce`) keys each piece with it; one that does not (Slack)
    /// marks each piece with it and looks for the mark before sending a piece again.
    pub key: String,
    /// How many pieces the platform took already: sending starts at this piece.
    pub from: usize,
    /// An earlier try of piece [`Tracking::from`] may have reached the platform without an
    /// answer (a restart, a timeout, a 5xx): look before sending it again where the platform
    /// cannot deduplicate.
    pub again: bool,
    /// When the reply was stored, in milliseconds since the epoch (0 when unknown): no earlier
    /// try can have reached the platform before then, which bounds a look for one.
    pub stored_at: i64,
    progress: Option<mpsc::UnboundedSender<usize>>,
}

impl Tracking {
    /// A reply named `key`, stored at `stored_at`, `from` pieces of which the platform took
    /// already; the receiver hears the count of pieces taken after each one.
    pub fn new(
        key: String,
        from: usize,
        again: bool,
        stored_at: i64,
    ) -> (Tracking, mpsc::UnboundedReceiver<usize>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Tracking { key, from, again, stored_at, progress: Some(tx) }, rx)
    }

    /// Tracking nobody listens to (tests, smoke checks), stored at an unknown time.
    pub fn detached(key: String) -> Tracking {
        Tracking { key, from: 0, again: false, stored_at: 0, progress: None }
    }

    /// The platform took every piece up to and including `piece` (0-based, of `pieces` in
    /// the whole reply). Said only while more follow: the reply's settlement covers the last.
    pub fn taken(&self, piece: usize, pieces: usize) {
        if piece + 1 < pieces
            && let Some(progress) = &self.progress
        {
            let _ = progress.send(piece + 1);
        }
    }
}

/// The piece to start at, for a reply of `pieces` pieces: 0 for an untracked one; `pieces`
/// (nothing left to send) when the platform took them all and only the outbox did not hear.
pub fn first_piece(track: Option<&Tracking>, pieces: usize) -> usize {
    track.map_or(0, |t| t.from.min(pieces))
}

/// Why a message could not be delivered after the adapter's retries.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum SendError {
    /// The platform refused it for good (chat not found, bot blocked, message invalid).
    #[error("the platform refused the message: {0}")]
    Rejected(String),
    /// The platform kept failing or could not be reached within the retries.
    #[error("the platform could not be reached: {0}")]
    Unreachable(String),
    /// The adapter stopped before the message was sent.
    #[error("the adapter stopped")]
    Stopped,
}

/// How long to wait before retrying a platform call: the platform's `retry_after` when it gave
/// one, else capped exponential backoff from `attempt` (0-based).
pub fn backoff(attempt: u32, retry_after: Option<Duration>, cap: Duration) -> Duration {
    if let Some(after) = retry_after {
        return after;
    }
    let base = Duration::from_millis(250).saturating_mul(1 << attempt.min(16));
    base.min(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_the_cap_and_honours_retry_after() {
        let cap = Duration::from_secs(30);
        assert_eq!(backoff(0, None, cap), Duration::from_millis(250));
        assert_eq!(backoff(2, None, cap), Duration::from_secs(1));
        assert_eq!(backoff(40, None, cap), cap);
        assert_eq!(backoff(5, Some(Duration::from_secs(3)), cap), Duration::from_secs(3));
    }

    #[tokio::test]
    async fn a_dropped_ack_is_not_a_settled_one() {
        let (ack, rx) = Ack::new();
        drop(ack);
        assert!(rx.await.is_err());
        let (ack, rx) = Ack::new();
        ack.settle();
        assert!(rx.await.is_ok());
    }
}
