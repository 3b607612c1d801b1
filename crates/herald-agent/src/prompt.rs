//! System prompt assembly: done once when a session is created, then stored with it.

use chrono::NaiveDate;
use herald_core::Platform;

/// What goes into a new session's system prompt.
#[derive(Debug, Clone)]
pub struct PromptContext<'a> {
    /// The persona from the config.
    pub persona: &'a str,
    /// Where the conversation happens.
    pub platform: Platform,
    /// dm, group, channel, thread, or terminal.
    pub chat_kind: &'a str,
    /// The day the session starts.
    pub date: NaiveDate,
}

/// The system prompt for a new session. The result is stored and reused verbatim for every
/// later turn, so it holds nothing that changes within a session (no clock time), which keeps
/// provider-side prompt caches hitting.
pub fn assemble_system_prompt(context: &PromptContext<'_>) -> String {
    let place = match context.platform {
        Platform::Cli => "a terminal (herald chat); plain text and Markdown both display fine",
        Platform::Telegram => "Telegram; keep Markdown simple, long code goes in fenced blocks",
        Platform::Discord => "Discord; Markdown works, messages are short",
        Platform::Slack => "Slack; keep formatting simple",
    };
    format!(
        "{persona}\n\n\
         You are talking through {place}. Chat kind: {kind}.\n\
         The conversation started on {date}. Use the current_time tool when you need the time.\n\
         You can search this person's earlier conversations with the session_search tool when \
         they refer to something said before.",
        persona = context.persona.trim(),
        kind = context.chat_kind,
        date = context.date.format("%A, %Y-%m-%d"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_names_persona_platform_kind_and_date() {
        let date = NaiveDate::from_ymd_opt(2026, 12, 2).unwrap();
        let context = PromptContext {
            persona: "You are Herald.",
            platform: Platform::Telegram,
            chat_kind: "dm",
            date,
        };
        let prompt = assemble_system_prompt(&context);
        assert!(prompt.starts_with("You are Herald.\n"));
        assert!(prompt.contains("Telegram") && prompt.contains("Chat kind: dm"));
        assert!(prompt.contains("Wednesday, 2026-12-02"));
        assert_eq!(prompt, assemble_system_prompt(&context), "assembly is deterministic");
    }
}
