//! Telegram updates as herald's `Inbound` messages: who wrote where, and whether to the bot.

use std::ops::Range;

use herald_core::{Ack, ChatRef, Inbound, Platform, UserRef};
use teloxide::types::{Message, MessageEntityKind, Update, UpdateKind};

/// Who the bot is, as `getMe` said.
#[derive(Debug, Clone)]
pub(crate) struct BotIdentity {
    /// The bot's user id.
    pub(crate) id: u64,
    /// The bot's username, without the `@`.
    pub(crate) username: String,
}

/// The message in `update`, or `None` when the update is not for the bot: not a text message,
/// written by a bot, in a channel, or a command addressed to another bot. The ack is a
/// placeholder for the caller to replace.
pub(crate) fn inbound(update: &Update, bot: &BotIdentity) -> Option<Inbound> {
    let UpdateKind::Message(msg) = &update.kind else {
        return None;
    };
    message(msg, bot)
}

fn message(msg: &Message, bot: &BotIdentity) -> Option<Inbound> {
    let from = msg.from.as_ref()?;
    if from.is_bot || from.id.0 == bot.id {
        return None;
    }
    let chat_id = msg.chat.id.0.to_string();
    let mut chat = if msg.chat.is_private() {
        ChatRef::direct(Platform::Telegram, chat_id.clone())
    } else if msg.chat.is_group() || msg.chat.is_supergroup() {
        ChatRef::group(Platform::Telegram, chat_id.clone())
    } else {
        return None;
    };
    let topic = msg.thread_id.filter(|_| msg.is_topic_message);
    if let Some(thread) = topic {
        chat = chat.in_thread(thread.0.0.to_string());
    }
    let (text, mentioned) = addressed_text(msg.text()?, msg.entities().unwrap_or_default(), bot)?;
    // In a forum topic every message "replies" to the topic's first message: not a real reply.
    let reply_to_bot = msg.reply_to_message().is_some_and(|reply| {
        topic.is_none_or(|thread| thread.0 != reply.id)
            && reply.from.as_ref().is_some_and(|user| user.id.0 == bot.id)
    });
    let name =
        from.username.clone().or_else(|| Some(from.first_name.clone())).filter(|n| !n.is_empty());
    Some(Inbound {
        id: format!("{chat_id}:{}", msg.id.0),
        chat,
        user: UserRef { id: from.id.0.to_string(), name },
        text,
        mentioned,
        reply_to_bot,
        ack: Ack::none(),
    })
}

/// The text with mentions of the bot removed and `/cmd@bot` reduced to `/cmd`, and whether the
/// bot was mentioned; `None` when the message starts with a command for another bot.
fn addressed_text(
    text: &str,
    entities: &[teloxide::types::MessageEntity],
    bot: &BotIdentity,
) -> Option<(String, bool)> {
    let mut mentioned = false;
    let mut edits: Vec<(Range<usize>, &str)> = Vec::new();
    for entity in entities {
        let Some(range) = byte_range(text, entity.offset, entity.length) else {
            continue;
        };
        let span = &text[range.clone()];
        match &entity.kind {
            MessageEntityKind::Mention
                if span.strip_prefix('@').is_some_and(|n| is_bot(n, bot)) =>
            {
                mentioned = true;
                edits.push((with_trailing_space(text, range), ""));
            }
            MessageEntityKind::TextMention { user } if user.id.0 == bot.id => {
                mentioned = true;
                edits.push((with_trailing_space(text, range), ""));
            }
            MessageEntityKind::BotCommand => match span.split_once('@') {
                Some((command, name)) if is_bot(name, bot) => {
                    mentioned = true;
                    edits.push((range, command));
                }
                Some(_) if entity.offset == 0 => return None,
                _ => {}
            },
            _ => {}
        }
    }
    edits.sort_by_key(|(range, _)| range.start);
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (range, replacement) in edits {
        if range.start < at {
            continue;
        }
        out.push_str(&text[at..range.start]);
        out.push_str(replacement);
        at = range.end;
    }
    out.push_str(&text[at..]);
    Some((out.trim().to_owned(), mentioned))
}

fn is_bot(username: &str, bot: &BotIdentity) -> bool {
    username.eq_ignore_ascii_case(&bot.username)
}

/// `range` extended over the whitespace that follows it.
fn with_trailing_space(text: &str, range: Range<usize>) -> Range<usize> {
    let rest = &text[range.end..];
    let space = rest.len() - rest.trim_start().len();
    range.start..range.end + space
}

/// Telegram counts entity offsets in UTF-16 units; this is the byte range they cover, or `None`
/// when they fall outside the text or inside a character.
fn byte_range(text: &str, offset: usize, length: usize) -> Option<Range<usize>> {
    Some(byte_offset(text, offset)?..byte_offset(text, offset.checked_add(length)?)?)
}

fn byte_offset(text: &str, units: usize) -> Option<usize> {
    let mut seen = 0;
    for (at, c) in text.char_indices() {
        if seen == units {
            return Some(at);
        }
        if seen > units {
            return None;
        }
        seen += c.len_utf16();
    }
    (seen == units).then_some(text.len())
}

#[cfg(test)]
#[path = "inbound_tests.rs"]
mod tests;
