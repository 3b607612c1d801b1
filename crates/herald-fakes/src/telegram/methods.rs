//! The Bot API methods that answer at once, run on the locked state (`getUpdates`, which may
//! wait, is in the server).
//!
//! Each checks what Telegram checks and answers with Telegram's words, so teloxide turns the
//! answer into the same `ApiError`: empty or over-long text, a message that is not the bot's or
//! not changed by an edit, a `getUpdates` while a webhook is set.

use serde_json::{Value, json};

use super::faults::ApiError;
use super::params::Params;
use super::records::{EditedMessage, SentMessage};
use super::state::{State, Stored};
use super::user::ChatKind;
use super::wire;

/// The longest text Telegram takes, in UTF-16 units (counted here on the raw text, markup
/// included, which is stricter than Telegram for HTML).
pub(crate) const MAX_TEXT: usize = 4096;

/// The chat actions Telegram knows.
const ACTIONS: &[&str] = &[
    "typing",
    "upload_photo",
    "record_video",
    "upload_video",
    "record_voice",
    "upload_voice",
    "upload_document",
    "choose_sticker",
    "find_location",
    "record_video_note",
    "upload_video_note",
];

/// What Telegram says to `getUpdates` while a webhook is set.
const WEBHOOK_ACTIVE: &str = "Conflict: can't use getUpdates method while webhook is active; use \
                              deleteWebhook to delete the webhook first";

impl State {
    /// Answers `method` (lowercase); `None` if the fake does not know it.
    pub(crate) fn call(
        &mut self,
        method: &str,
        params: &Params,
    ) -> Option<Result<Value, ApiError>> {
        Some(match method {
            "getme" => Ok(wire::me()),
            "getwebhookinfo" => Ok(self.webhook_info()),
            "setwebhook" => self.set_webhook(params),
            "deletewebhook" => {
                self.webhook = None;
                if params.string("drop_pending_updates").as_deref() == Some("true") {
                    self.drop_pending();
                }
                Ok(Value::Bool(true))
            }
            "sendmessage" => self.send_message(params),
            "editmessagetext" => self.edit_message_text(params),
            "sendchataction" => self.send_chat_action(params),
            "setmycommands" => match params.list("commands") {
                Some(commands) => {
                    self.commands = Value::Array(commands);
                    Ok(Value::Bool(true))
                }
                None => Err(ApiError::bad_request("parameter \"commands\" is required")),
            },
            "getmycommands" => Ok(self.commands.clone()),
            _ => return None,
        })
    }

    /// Checks that polling is allowed, confirms `offset` and returns the next updates.
    pub(crate) fn poll(
        &mut self,
        offset: Option<i64>,
        limit: usize,
    ) -> Result<Vec<&str>, ApiError> {
        if self.webhook.is_some() {
            return Err(ApiError::new(409, WEBHOOK_ACTIVE));
        }
        self.confirm(offset);
        Ok(self.batch(limit))
    }

    fn webhook_info(&self) -> Value {
        let mut info = json!({
            "url": self.webhook.as_ref().map(|w| w.url.clone()).unwrap_or_default(),
            "has_custom_certificate": false,
            "pending_update_count": self.pending(),
        });
        if let Some(webhook) = &self.webhook {
            info["max_connections"] = json!(webhook.max_connections);
            if let Some(allowed) = &webhook.allowed_updates {
                info["allowed_updates"] = json!(allowed);
            }
            if let Some((date, message)) = &self.webhook_error {
                info["last_error_date"] = json!(date);
                info["last_error_message"] = json!(message);
            }
        }
        info
    }

    fn send_message(&mut self, params: &Params) -> Result<Value, ApiError> {
        let chat_id = params.chat_id()?;
        let text = params.string("text").unwrap_or_default();
        check_text(&text, "message is too long")?;
        let parse_mode = self.parse_mode(params)?;
        let thread = params.int("message_thread_id")?;
        let reply_to = params.reply_to()?;

        let chat = self.chat(chat_id, thread);
        let (chat_json, forum) = (chat.json.clone(), chat.kind == ChatKind::Forum);
        let id = self.allocate(chat_id);
        let message = wire::Message {
            id,
            chat: &chat_json,
            from: wire::bot_user(),
            text: &text,
            thread,
            forum,
            reply_to: reply_to.and_then(|r| self.nested(chat_id, r)),
        }
        .to_json();
        self.sent.push(SentMessage {
            message_id: id,
            chat_id,
            thread_id: thread,
            text: text.clone(),
            parse_mode: parse_mode.clone(),
            reply_to,
        });
        self.last_bot.insert((chat_id, thread), id);
        let stored = Stored { from_bot: true, text, parse_mode, json: message.clone() };
        self.messages.insert((chat_id, id), stored);
        Ok(message)
    }

    fn edit_message_text(&mut self, params: &Params) -> Result<Value, ApiError> {
        let chat_id = params.chat_id()?;
        let Some(id) = params.int("message_id")? else {
            return Err(ApiError::bad_request("message identifier is not specified"));
        };
        let text = params.string("text").unwrap_or_default();
        check_text(&text, "MESSAGE_TOO_LONG")?;
        let parse_mode = self.parse_mode(params)?;
        let Some(stored) = self.messages.get_mut(&(chat_id, id)) else {
            return Err(ApiError::bad_request("message to edit not found"));
        };
        if !stored.from_bot {
            return Err(ApiError::bad_request("message can't be edited"));
        }
        if stored.text == text && stored.parse_mode == parse_mode {
            return Err(ApiError::bad_request(
                "message is not modified: specified new message content and reply markup are \
                 exactly the same as a current content and reply markup of the message",
            ));
        }
        stored.text.clone_from(&text);
        stored.parse_mode.clone_from(&parse_mode);
        stored.json["text"] = json!(text);
        stored.json["edit_date"] = json!(wire::now());
        let edited = stored.json.clone();
        self.edits.push(EditedMessage { chat_id, message_id: id, text, parse_mode });
        Ok(edited)
    }

    fn send_chat_action(&mut self, params: &Params) -> Result<Value, ApiError> {
        let chat_id = params.chat_id()?;
        let action = params.string("action").unwrap_or_default();
        if !ACTIONS.contains(&action.as_str()) {
            return Err(ApiError::bad_request("wrong parameter action in request"));
        }
        self.actions.push((chat_id, action));
        Ok(Value::Bool(true))
    }

    /// The `parse_mode`, refused while markup is rejected.
    fn parse_mode(&self, params: &Params) -> Result<Option<String>, ApiError> {
        let mode = params.string("parse_mode").filter(|m| !m.is_empty());
        if self.reject_markup && mode.is_some() {
            return Err(ApiError::bad_request(
                "can't parse entities: Can't find end tag corresponding to start tag \"b\"",
            ));
        }
        Ok(mode)
    }
}

/// Refuses empty (or blank) and over-long text, the latter with `too_long`.
fn check_text(text: &str, too_long: &str) -> Result<(), ApiError> {
    if text.trim().is_empty() {
        return Err(ApiError::bad_request("message text is empty"));
    }
    if wire::utf16_len(text) > MAX_TEXT {
        return Err(ApiError::bad_request(too_long));
    }
    Ok(())
}
