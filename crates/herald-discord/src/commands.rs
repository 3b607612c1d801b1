//! herald's slash commands as Discord application commands, registered only when the set
//! changed: Discord rate-limits registration, and a daemon restarts often.

use herald_core::SLASH_COMMANDS;
use serenity::all::{Command, CommandOptionType, CreateCommand, CreateCommandOption, Http};
use sha2::{Digest, Sha256};

use crate::error::{Failure, classify};

/// The name the registered set's fingerprint is kept under.
pub(crate) const KEPT_AS: &str = "commands";

/// Every command, as Discord's API takes them.
pub(crate) fn definitions() -> Vec<CreateCommand> {
    SLASH_COMMANDS
        .iter()
        .map(|listed| {
            let command = CreateCommand::new(listed.name).description(listed.description);
            match listed.argument {
                Some(argument) => command.add_option(
                    CreateCommandOption::new(CommandOptionType::String, argument, argument)
                        .required(false),
                ),
                None => command,
            }
        })
        .collect()
}

/// A fingerprint of the set: it changes whenever what Discord would be sent does.
pub(crate) fn fingerprint(definitions: &[CreateCommand]) -> String {
    let json = serde_json::to_vec(definitions).unwrap_or_default();
    Sha256::digest(json).iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Registers the set unless `kept` says this very set is registered. The fingerprint to keep
/// when something was registered.
pub(crate) async fn register(
    http: &Http,
    kept: Option<&str>,
    token: &str,
) -> Result<Option<String>, Failure> {
    let definitions = definitions();
    let print = fingerprint(&definitions);
    if kept == Some(print.as_str()) {
        return Ok(None);
    }
    Command::set_global_commands(http, definitions).await.map_err(|e| classify(&e, token))?;
    Ok(Some(print))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_is_defined_and_the_fingerprint_is_stable() {
        let definitions = definitions();
        assert_eq!(definitions.len(), SLASH_COMMANDS.len());
        assert_eq!(fingerprint(&definitions), fingerprint(&super::definitions()));
        assert_eq!(fingerprint(&definitions).len(), 64);
        for listed in SLASH_COMMANDS {
            assert!(listed.description.chars().count() <= 100, "{}", listed.name);
        }
    }
}
