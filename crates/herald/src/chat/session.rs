//! Which session `herald chat` talks to: a new one, the most recent (`--continue`), or a named
//! one (`--resume`); for the last two, the newest session of its chain.

use herald_agent::{PromptContext, assemble_system_prompt};
use herald_core::Platform;
use herald_store::{NewSession, Session, SessionFilter, Store};

use crate::cli::ChatArgs;
use crate::config::Config;
use crate::output;

/// The chat's current session and the model it talks to.
#[derive(Debug)]
pub struct Chat {
    /// The session written to.
    pub session: Session,
    /// The model of this session.
    pub model: String,
    /// The session's stored system prompt, sent verbatim every turn.
    pub system_prompt: String,
    /// The person at the terminal, as the store knows them.
    pub user: String,
    resumed: bool,
    /// Said once before the banner: the session asked for was continued by another.
    notice: Option<String>,
    /// `--model`, which applies to new sessions too.
    model_override: Option<String>,
    max_iterations: u32,
}

/// The terminal's user: `$USER`, else `local`.
pub fn cli_user() -> String {
    std::env::var("USER").ok().filter(|u| !u.is_empty()).unwrap_or_else(|| "local".to_owned())
}

impl Chat {
    /// Picks the session as the flags say, creating one when needed.
    pub async fn start(store: &Store, config: &Config, args: &ChatArgs) -> anyhow::Result<Chat> {
        let user = cli_user();
        let existing = if let Some(reference) = &args.resume {
            Some(store.resolve_session(reference).await?)
        } else if args.continue_last {
            let filter = SessionFilter {
                source: Some(Platform::Cli),
                user_id: Some(user.clone()),
                limit: Some(1),
            };
            store.list_sessions(&filter).await?.into_iter().next()
        } else {
            None
        };
        let mut notice = None;
        let existing = match existing {
            Some(asked) => {
                // A compressed session goes on in the newest of its chain: resuming the old one
                // would give its conversation two current sessions.
                let newest = store.newest_in_chain(&asked.id).await?;
                if newest.id != asked.id {
                    notice = Some(continued(store, &asked, &newest).await?);
                }
                Some(newest)
            }
            None => None,
        };
        let mut chat = match existing {
            Some(session) => {
                store.reopen_session(&session.id).await?;
                let system_prompt = store.system_prompt(&session.id).await?.unwrap_or_default();
                let model = args
                    .model
                    .clone()
                    .or_else(|| session.model.clone())
                    .unwrap_or_else(|| config.model.model.clone());
                Chat {
                    session,
                    model,
                    system_prompt,
                    user,
                    resumed: true,
                    notice,
                    model_override: None,
                    max_iterations: 0,
                }
            }
            None => Chat::create(store, config, user, args.model.clone()).await?,
        };
        chat.model_override = args.model.clone();
        chat.max_iterations = config.model.max_iterations;
        Ok(chat)
    }

    /// Ends the current session and starts a fresh one (`/new`).
    pub async fn new_session(&mut self, store: &Store, config: &Config) -> anyhow::Result<()> {
        store.end_session(&self.session.id, "new").await?;
        let fresh =
            Chat::create(store, config, self.user.clone(), self.model_override.clone()).await?;
        *self = Chat {
            model_override: self.model_override.take(),
            max_iterations: self.max_iterations,
            ..fresh
        };
        Ok(())
    }

    /// Most model calls per message.
    pub fn max_iterations(&self) -> u32 {
        self.max_iterations
    }

    /// One line saying where the person is, after a line saying why it is not the session
    /// asked for when it is not.
    pub fn banner(&self) -> String {
        let title = self.session.title.as_deref().map(|t| format!(" \"{t}\"")).unwrap_or_default();
        let state = if self.resumed {
            format!("resumed, {} messages", self.session.message_count)
        } else {
            "new".to_owned()
        };
        let notice = self.notice.as_ref().map(|n| format!("{n}\n")).unwrap_or_default();
        format!(
            "{notice}herald chat: session {}{title} ({state}, model {}). /help for commands.",
            self.session.id, self.model
        )
    }

    async fn create(
        store: &Store,
        config: &Config,
        user: String,
        model: Option<String>,
    ) -> anyhow::Result<Chat> {
        let persona = config.agent.persona_text()?;
        let system_prompt = assemble_system_prompt(&PromptContext {
            persona: &persona,
            platform: Platform::Cli,
            chat_kind: "terminal",
            date: chrono::Local::now().date_naive(),
        });
        let model = model.unwrap_or_else(|| config.model.model.clone());
        let new = NewSession {
            user_id: Some(user.clone()),
            chat_type: Some("terminal".to_owned()),
            model: Some(model.clone()),
            ..NewSession::new(Platform::Cli, system_prompt.clone())
        };
        let session = store.create_session(&new).await?;
        Ok(Chat {
            session,
            model,
            system_prompt,
            user,
            resumed: false,
            notice: None,
            model_override: None,
            max_iterations: config.model.max_iterations,
        })
    }
}

/// `session 0193ab… was continued by 0193cd… (compressed); resuming that`.
async fn continued(store: &Store, asked: &Session, newest: &Session) -> anyhow::Result<String> {
    let short = output::short_ids(store, [asked.id.as_str(), newest.id.as_str()]).await?;
    let name = |id: &String| short.get(id).cloned().unwrap_or_else(|| id.clone());
    let why = asked.end_reason.as_deref().map(|r| format!(" ({})", output::one_line(r)));
    Ok(format!(
        "session {} was continued by {}{}; resuming that",
        name(&asked.id),
        name(&newest.id),
        why.unwrap_or_default()
    ))
}
