//! The slash commands every platform offers, for adapters that register them with the
//! platform (Discord's application commands). The gateway parses and answers them.

/// One slash command as a platform lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlashCommand {
    /// The name, without the slash.
    pub name: &'static str,
    /// What it does, in one line (Discord allows 100 characters).
    pub description: &'static str,
    /// The name of its one text argument, if it takes one.
    pub argument: Option<&'static str>,
    /// Whether the answer concerns only the person who asked (shown to them alone where the
    /// platform can).
    pub private: bool,
    /// Whether its answer comes as an ordinary reply later rather than as the command's answer.
    pub answered_by_a_turn: bool,
}

const fn command(name: &'static str, description: &'static str) -> SlashCommand {
    SlashCommand { name, description, argument: None, private: false, answered_by_a_turn: false }
}

/// Every slash command, in the order `/help` lists them.
pub const SLASH_COMMANDS: [SlashCommand; 9] = [
    command("new", "start a fresh conversation (alias /reset)"),
    SlashCommand {
        private: true,
        ..command("status", "this conversation's id, title, size and model")
    },
    command("stop", "stop the answer being written"),
    command("undo", "forget your last message and its answer"),
    SlashCommand { answered_by_a_turn: true, ..command("retry", "answer your last message again") },
    SlashCommand { argument: Some("name"), ..command("title", "give this conversation a name") },
    command("compress", "summarize this long conversation and go on from the summary"),
    SlashCommand {
        private: true,
        ..command("whoami", "your user id and whether you may talk to me")
    },
    SlashCommand { private: true, ..command("help", "this list") },
];
