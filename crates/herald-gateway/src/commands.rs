//! The slash commands the gateway answers itself, without the model.

/// A slash command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `/new` or `/reset`: end the session and start a fresh one.
    New,
    /// `/help`: what the commands do.
    Help,
    /// `/status`: the session's id, title, size and model.
    Status,
    /// `/stop`: cancel the running turn.
    Stop,
    /// `/undo`: drop the last exchange.
    Undo,
    /// `/retry`: answer the last message again.
    Retry,
    /// `/title NAME`: name the session.
    Title(String),
    /// `/whoami`: the platform user id and whether it is allowed.
    Whoami,
    /// `/compress`: continue the conversation in a new session from a summary, now.
    Compress,
}

impl Command {
    /// The command in `text`, if it is one of ours; other `/words` are ordinary messages.
    pub fn parse(text: &str) -> Option<Command> {
        let text = text.trim();
        let rest = text.strip_prefix('/')?;
        let (name, args) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        let args = args.trim();
        Some(match name.to_ascii_lowercase().as_str() {
            "new" | "reset" => Command::New,
            "help" | "start" => Command::Help,
            "status" => Command::Status,
            "stop" => Command::Stop,
            "undo" => Command::Undo,
            "retry" => Command::Retry,
            "title" => Command::Title(args.to_owned()),
            "whoami" => Command::Whoami,
            "compress" => Command::Compress,
            _ => return None,
        })
    }

    /// Whether the command must wait for a running turn to end (it changes the session).
    pub fn waits_for_turn(&self) -> bool {
        matches!(
            self,
            Command::New | Command::Undo | Command::Retry | Command::Title(_) | Command::Compress
        )
    }
}

/// What `/help` answers.
pub const HELP: &str = "Commands:\n\
/new: start a fresh conversation (alias /reset)\n\
/status: this conversation's id, title, size and model\n\
/stop: stop the answer being written\n\
/undo: forget your last message and its answer\n\
/retry: answer your last message again\n\
/title NAME: give this conversation a name\n\
/compress: summarize this long conversation and go on from the summary\n\
/whoami: your user id and whether you may talk to me\n\
/help: this list";

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, expected: Option<Command>) {
        assert_eq!(Command::parse(text), expected, "{text:?}");
    }

    #[test]
    fn commands_parse_and_other_text_does_not() {
        check("/new", Some(Command::New));
        check("/reset", Some(Command::New));
        check(" /STATUS ", Some(Command::Status));
        check("/title  Trip to Hue ", Some(Command::Title("Trip to Hue".into())));
        check("/title", Some(Command::Title(String::new())));
        check("/start", Some(Command::Help));
        check("/compress", Some(Command::Compress));
        check("/unknown thing", None);
        check("hello /new", None);
        check("", None);
        check("/", None);
    }

    #[test]
    fn every_listed_command_is_parsed_and_in_the_help() {
        for listed in herald_core::SLASH_COMMANDS {
            let typed = format!("/{} x", listed.name);
            assert!(Command::parse(&typed).is_some(), "{typed}");
            assert!(HELP.contains(&format!("/{}", listed.name)), "{}", listed.name);
        }
    }
}
