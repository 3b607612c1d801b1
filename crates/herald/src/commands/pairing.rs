//! `herald pairing list | approve | revoke`: the operator's side of pairing codes.

use std::io::Write;
use std::process::ExitCode;

use herald_store::Store;

use crate::cli::PairingCommand;
use crate::output::local_time as time;

/// Runs a pairing command.
pub async fn run(
    store: &Store,
    command: PairingCommand,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    match command {
        PairingCommand::List { json } => list(store, json, out).await,
        PairingCommand::Approve { platform, code } => {
            match store.approve_pairing(platform, &code).await? {
                Ok(user) => {
                    let name =
                        user.display_name.as_deref().map(|n| format!(" ({n})")).unwrap_or_default();
                    writeln!(out, "approved {platform} user {}{name}", user.user_id)?;
                    Ok(ExitCode::SUCCESS)
                }
                Err(refused) => anyhow::bail!("{refused}"),
            }
        }
        PairingCommand::Revoke { platform, user_id } => {
            if store.revoke_user(platform, &user_id).await? {
                writeln!(out, "revoked {platform} user {user_id}")?;
                Ok(ExitCode::SUCCESS)
            } else {
                anyhow::bail!(
                    "{platform} user {user_id} was not approved by pairing; users in \
                     allowed_users are removed from the config file instead"
                )
            }
        }
    }
}

async fn list(store: &Store, json: bool, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let pending = store.pairing_requests().await?;
    let approved = store.approved_users().await?;
    if json {
        let value = serde_json::json!({ "pending": pending, "approved": approved });
        writeln!(out, "{}", serde_json::to_string_pretty(&value)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(out, "pending codes:")?;
    if pending.is_empty() {
        writeln!(out, "  (none)")?;
    }
    let now = chrono::Utc::now().timestamp_millis();
    for p in &pending {
        let name = p.display_name.as_deref().unwrap_or("-");
        writeln!(
            out,
            "  {:<9} {}  user {} ({name})  asked {}, expires {}",
            p.platform.as_str(),
            p.code,
            p.user_id,
            ago(now, p.created_at),
            time(p.expires_at)
        )?;
    }
    writeln!(out, "approved users:")?;
    if approved.is_empty() {
        writeln!(out, "  (none)")?;
    }
    for a in &approved {
        let name = a.display_name.as_deref().unwrap_or("-");
        writeln!(
            out,
            "  {:<9} {} ({name})  since {}",
            a.platform.as_str(),
            a.user_id,
            time(a.approved_at)
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// How long ago `then` was, in whole minutes.
fn ago(now: i64, then: i64) -> String {
    match now.saturating_sub(then) / 60_000 {
        0 => "just now".to_owned(),
        minutes => format!("{minutes} min ago"),
    }
}
