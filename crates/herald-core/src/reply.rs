//! Where an answer goes, and which session the conversation's follow-ups belong to.
//!
//! The rule: the session key of a conversation is decided by where its follow-ups will be
//! written, before the answer is sent. In a DM the answer is a plain message. In a group chat,
//! or inside a thread, it quotes the user's message (Telegram quote-reply, Discord reply
//! reference), unless the platform answers top-level posts in a thread on the post (Slack's
//! `reply_in_thread`, Discord's `auto_thread`): then the thread is the conversation's from the
//! first answer on, and its key is the session's key already for the message that opened it.
//! A thread on a message is named by that message's id on both platforms (Slack `thread_ts`,
//! Discord's thread id), so the key is known before the thread exists, and a user who follows
//! the bot into the thread stays in the same session.

use crate::SessionKey;
use crate::chat::{ChatKind, ChatRef, UserRef};

/// How a platform answers a message in a group chat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyStyle {
    /// In place, referencing the user's message (Telegram; Discord without `auto_thread`).
    Quote,
    /// Top-level posts in a thread on the post (Slack `reply_in_thread`, Discord `auto_thread`).
    Thread,
}

/// Where the answer to one message is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// A plain message in the same chat (a DM, or inside the thread already).
    Plain,
    /// In the same chat, referencing the user's message with this id.
    Quote(String),
    /// In the thread on the user's message with this id, opened by the adapter if it does not
    /// exist yet (idempotently: a redelivery never opens a second one).
    Thread(String),
}

impl Placement {
    /// Where to answer `message` (its platform id), written in `chat`.
    pub fn of(chat: &ChatRef, message: &str, style: ReplyStyle) -> Placement {
        match (chat.kind, &chat.thread, style) {
            (ChatKind::Direct, _, _) => Placement::Plain,
            (ChatKind::Group, Some(_), ReplyStyle::Thread) => Placement::Plain,
            (ChatKind::Group, None, ReplyStyle::Thread) => Placement::Thread(message.to_owned()),
            (ChatKind::Group, _, ReplyStyle::Quote) => Placement::Quote(message.to_owned()),
        }
    }

    /// The chat the follow-ups will be written in: `chat`, or the thread the answer opens.
    pub fn follow_ups(&self, chat: &ChatRef) -> ChatRef {
        match self {
            Placement::Thread(thread) => chat.clone().in_thread(thread.clone()),
            Placement::Plain | Placement::Quote(_) => chat.clone(),
        }
    }
}

impl SessionKey {
    /// The key of a message in `chat` from `user` that is answered as `placement` says: the key
    /// of where its follow-ups will be written, so answering in a thread never moves the
    /// conversation to another session.
    pub fn for_answer(
        chat: &ChatRef,
        user: &UserRef,
        placement: &Placement,
        per_user_in_groups: bool,
    ) -> Self {
        SessionKey::for_chat(&placement.follow_ups(chat), user, per_user_in_groups)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Platform;

    fn check(chat: ChatRef, style: ReplyStyle, placement: Placement, key: &str) {
        let user = UserRef::new("42");
        assert_eq!(Placement::of(&chat, "m1", style), placement);
        assert_eq!(SessionKey::for_answer(&chat, &user, &placement, true).as_str(), key);
    }

    #[test]
    fn answers_go_where_the_platform_puts_them() {
        use ReplyStyle::{Quote, Thread};
        let quote = || Placement::Quote("m1".into());
        check(ChatRef::direct(Platform::Telegram, "42"), Quote, Placement::Plain, "telegram:dm:42");
        check(ChatRef::group(Platform::Telegram, "-1"), Quote, quote(), "telegram:group:-1:42");
        check(
            ChatRef::group(Platform::Discord, "C").in_thread("T"),
            Quote,
            quote(),
            "discord:group:C:thread:T",
        );
        check(ChatRef::direct(Platform::Slack, "D"), Thread, Placement::Plain, "slack:dm:D");
        check(
            ChatRef::group(Platform::Slack, "C"),
            Thread,
            Placement::Thread("m1".into()),
            "slack:group:C:thread:m1",
        );
    }

    #[test]
    fn following_the_bot_into_its_thread_keeps_the_session() {
        let user = UserRef::new("42");
        let post = ChatRef::group(Platform::Slack, "C");
        let first = Placement::of(&post, "17.5", ReplyStyle::Thread);
        let opened = SessionKey::for_answer(&post, &user, &first, true);
        // The next message is written in the thread named by the post, by anyone.
        let in_thread = post.clone().in_thread("17.5");
        for writer in [user, UserRef::new("7")] {
            let next = Placement::of(&in_thread, "18.0", ReplyStyle::Thread);
            assert_eq!(next, Placement::Plain);
            assert_eq!(SessionKey::for_answer(&in_thread, &writer, &next, true), opened);
        }
    }
}
