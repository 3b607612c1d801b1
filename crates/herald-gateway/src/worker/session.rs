//! Which session a worker's key talks to, created on first use.

use std::sync::Arc;

use herald_agent::{PromptContext, Provider, assemble_system_prompt};
use herald_core::ChatKind;
use herald_store::{NewSession, Opening, Session, StoreError};
use tracing::{info, warn};

use super::Worker;
use crate::turn::SessionInfo;

impl<P: Provider + 'static> Worker<P> {
    /// The key's current session, created (and routed) when there is none.
    pub(super) async fn session(&mut self) -> Result<SessionInfo, StoreError> {
        if let Some(info) = &self.session {
            return Ok(info.clone());
        }
        let new = self.new_session();
        let store = &self.shared.store;
        let (session, created) = match std::mem::take(&mut self.unrouted) {
            true => store.create_routed(self.key.as_str(), &new).await?,
            false => store.route_or_create(self.key.as_str(), &new).await?,
        };
        if !created {
            return self.remember(session).await;
        }
        self.started(&session);
        // Its prompt is the one just stored (prompts are stored by their text's hash).
        let info = SessionInfo { session, system_prompt: Arc::from(new.system_prompt) };
        self.session = Some(info.clone());
        Ok(info)
    }

    /// A session this worker created: it holds nothing yet.
    fn started(&mut self, session: &Session) {
        info!(key = %self.key, session = %session.id, "session started");
        self.shared.compressor.note_new(&session.id);
        self.fresh = true;
    }

    /// Reads the key's session as the worker starts (creating it when `create` and there is
    /// none), in one read with what it needs later: whether that session ends with a message
    /// nobody answered, and whether messages wait in the key's queue (taken for true when the
    /// read failed).
    pub(super) async fn open(&mut self, create: bool) -> (bool, bool) {
        let store = &self.shared.store;
        let opening = match create {
            true => store.opening_or_create(self.key.as_str(), &self.new_session()).await,
            false => store.opening(self.key.as_str()).await,
        };
        match opening {
            Ok(Opening { routed: Some(routed), queued }) => {
                if routed.created {
                    self.started(&routed.session);
                }
                let system_prompt = Arc::from(routed.system_prompt);
                self.session = Some(SessionInfo { session: routed.session, system_prompt });
                (routed.unanswered, queued)
            }
            Ok(Opening { routed: None, queued }) => {
                self.unrouted = true;
                (false, queued)
            }
            Err(e) => {
                warn!(key = %self.key, error = %e, "could not read the session to see whether it was left unanswered");
                (false, true)
            }
        }
    }

    /// Whether the key's session ends with a message nobody answered.
    pub(super) async fn left_unanswered(&self) -> bool {
        match self.shared.store.left_unanswered(self.key.as_str()).await {
            Ok(unanswered) => unanswered,
            Err(e) => {
                warn!(key = %self.key, error = %e, "could not read the session to see whether it was left unanswered");
                false
            }
        }
    }

    /// Like [`Worker::session`], logging a failure; whether there is a session.
    pub(super) async fn session_or_log(&mut self) -> bool {
        match self.session().await {
            Ok(_) => true,
            Err(e) => {
                warn!(key = %self.key, error = %e, "could not open the session; its messages wait in the store");
                false
            }
        }
    }

    /// The conversation continues in `child` (compressed): the same stored system prompt.
    pub(super) fn moved_to(&mut self, child: Session) {
        info!(key = %self.key, session = %child.id, "the conversation continues in a compressed session");
        if let Some(info) = &mut self.session {
            info.session = child;
        }
    }

    /// Caches a session with its stored system prompt, read back verbatim.
    pub(super) async fn remember(&mut self, session: Session) -> Result<SessionInfo, StoreError> {
        let prompt = self.shared.store.system_prompt(&session.id).await?.unwrap_or_default();
        let info = SessionInfo { session, system_prompt: Arc::from(prompt) };
        self.session = Some(info.clone());
        Ok(info)
    }

    /// A new session for this key, its system prompt assembled now from the current persona.
    pub(super) fn new_session(&self) -> NewSession {
        let chat = &self.chat;
        let kind = match (&chat.thread, chat.kind) {
            (Some(_), _) => "thread",
            (None, ChatKind::Direct) => "dm",
            (None, ChatKind::Group) => "group",
        };
        let persona = self.shared.settings.persona();
        let prompt = assemble_system_prompt(&PromptContext {
            persona: &persona,
            platform: chat.platform,
            chat_kind: kind,
            date: chrono::Local::now().date_naive(),
        });
        NewSession {
            session_key: Some(self.key.as_str().to_owned()),
            chat_id: Some(chat.id.clone()),
            thread_id: chat.thread.clone(),
            user_id: Some(self.user.id.clone()),
            chat_type: Some(chat.kind.as_str().to_owned()),
            model: Some(self.shared.settings.model.clone()),
            ..NewSession::new(chat.platform, prompt)
        }
    }
}
