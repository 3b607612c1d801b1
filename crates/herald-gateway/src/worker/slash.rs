//! The slash commands, answered without the model.

use herald_agent::Provider;
use herald_store::StoreError;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::Worker;
use crate::auth::Allowed;
use crate::commands::{Command, HELP};
use crate::compress::CompressFailed;
use crate::outbox::Parcel;
use crate::turn::TurnEnd;

impl<P: Provider + 'static> Worker<P> {
    /// Runs a command and answers it (in place of `answers`, the command's inbound id, where
    /// the platform can); `/retry` starts a turn and returns it.
    pub(super) async fn run_command(
        &mut self,
        command: Command,
        allowed: Allowed,
        busy: bool,
        answers: Option<String>,
    ) -> Option<JoinHandle<TurnEnd>> {
        // A command may write to the session (`/compress` moves it on).
        self.fresh = false;
        let result = match command {
            Command::Help => Ok(HELP.to_owned()),
            Command::Whoami => Ok(whoami(self.chat.platform, &self.user.id, allowed)),
            Command::Status => self.status(busy).await,
            Command::Stop => Ok(self.stop()),
            Command::New => self.fresh_session().await,
            Command::Undo => self.undo().await,
            Command::Title(title) => self.title(&title).await,
            Command::Compress => self.compress().await,
            Command::Retry => match self.retry().await {
                Ok(Some(started)) => return Some(started),
                Ok(None) => Ok("There is nothing to answer again.".to_owned()),
                Err(e) => Err(e),
            },
        };
        let reply = result.unwrap_or_else(|e| {
            warn!(key = %self.key, error = %e, "a command failed");
            "Sorry, that did not work (the store failed); please try again.".to_owned()
        });
        // Behind the chat's earlier replies, so an answer never overtakes one still waiting.
        self.shared
            .outbox
            .post(Parcel::unstored(self.chat.clone(), None, reply).answering(answers));
        None
    }

    async fn status(&mut self, busy: bool) -> Result<String, StoreError> {
        let id = self.session().await?.session.id;
        let session =
            self.shared.store.session(&id).await?.unwrap_or(self.session().await?.session);
        let waiting = self.queue.len();
        let depth = self.shared.store.chain(&id).await?.len().saturating_sub(1);
        let compression = &self.shared.compressor.settings;
        Ok(format!(
            "Session: {id}\nTitle: {title}\nMessages: {count}\nChain: {chain}\n\
             Context: {tokens} of {window} tokens (compressed at {limit})\nModel: {model}\nNow: {now}",
            title = session.title.as_deref().unwrap_or("(none; set one with /title NAME)"),
            count = session.message_count,
            chain = match depth {
                0 => "this is the first session (never compressed)".to_owned(),
                1 => "continues 1 earlier, compressed session".to_owned(),
                n => format!("continues {n} earlier, compressed sessions"),
            },
            tokens = session.context_tokens,
            window = compression.context_window,
            limit = compression.limit(),
            model = session.model.as_deref().unwrap_or(&self.shared.settings.model),
            now = match (busy, waiting) {
                (false, _) => "idle".to_owned(),
                (true, 0) => "answering".to_owned(),
                (true, n) => format!("answering, {n} more waiting"),
            },
        ))
    }

    fn stop(&mut self) -> String {
        match &self.running {
            Some(running) => {
                running.cancel();
                "Stopped.".to_owned()
            }
            None => "Nothing is running.".to_owned(),
        }
    }

    async fn fresh_session(&mut self) -> Result<String, StoreError> {
        let new = self.new_session();
        let session = self.shared.store.reroute(self.key.as_str(), &new, "new").await?;
        info!(key = %self.key, session = %session.id, "session started by /new");
        let id = session.id.clone();
        self.remember(session).await?;
        Ok(format!("Started a new conversation (session {id})."))
    }

    async fn compress(&mut self) -> Result<String, StoreError> {
        let info = self.session().await?;
        let cancel = self.shared.stop_turns.child_token();
        let turn = crate::turn::pipeline(&self.shared, &info, &self.chat, &self.user);
        let done = turn.compress_now(&self.shared.compressor, &cancel).await;
        Ok(match done {
            Ok(done) => {
                let id = done.child.id.clone();
                self.moved_to(done.child);
                format!(
                    "Compressed: {} earlier messages are now a summary and the last {} are kept as \
                     they were. The conversation goes on in session {id}; the earlier one is kept \
                     and searchable.",
                    done.summarized, done.kept
                )
            }
            Err(CompressFailed::NothingToCompress) => {
                "This conversation is too short to compress.".to_owned()
            }
            Err(CompressFailed::Store(e)) => return Err(e),
            Err(e) => format!("Could not compress ({e}); nothing changed."),
        })
    }

    async fn undo(&mut self) -> Result<String, StoreError> {
        let id = self.session().await?.session.id;
        self.shared.compressor.forget(&id);
        Ok(match self.shared.store.undo_last_exchange(&id).await? {
            0 => "There is nothing to undo.".to_owned(),
            _ => "Forgot your last message and its answer.".to_owned(),
        })
    }

    async fn title(&mut self, title: &str) -> Result<String, StoreError> {
        if title.is_empty() {
            return Ok("Usage: /title NAME".to_owned());
        }
        let id = self.session().await?.session.id;
        match self.shared.store.rename_session(&id, title).await {
            Ok(()) => Ok(format!("This conversation is now titled \u{201c}{title}\u{201d}.")),
            Err(StoreError::TitleTaken { .. }) => {
                Ok("Another conversation already has that title; pick another.".to_owned())
            }
            Err(e) => Err(e),
        }
    }

    async fn retry(&mut self) -> Result<Option<JoinHandle<TurnEnd>>, StoreError> {
        let id = self.session().await?.session.id;
        self.shared.compressor.forget(&id);
        match self.shared.store.reset_last_answer(&id).await? {
            Some(_) => Ok(Some(self.spawn_turn(Vec::new(), None, None))),
            None => Ok(None),
        }
    }
}

fn whoami(platform: herald_core::Platform, user: &str, allowed: Allowed) -> String {
    let why = match allowed {
        Allowed::Listed => "you are on the allowlist",
        Allowed::Paired => "the operator approved you",
        Allowed::Open => "this bot is open to everyone in direct messages",
    };
    format!("Your {platform} user id is {user}. You may talk to me: {why}.")
}
