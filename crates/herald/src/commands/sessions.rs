//! `herald sessions list | rename | delete | prune | stats`, and the dispatch of the rest.

use std::io::{self, BufRead, IsTerminal, Write};

use anyhow::{Context, bail};
use herald_core::Platform;
use herald_store::{Session, SessionFilter, Store};

use super::{export, lineage, search, show};
use crate::cli::SessionsCommand;
use crate::output::{self, Table};

/// Runs one `sessions` subcommand against an open store.
pub(super) async fn run(
    store: &Store,
    command: SessionsCommand,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    match command {
        SessionsCommand::List { source, limit, json } => {
            list(store, source, limit, json, out).await
        }
        SessionsCommand::Show { id, json, lineage: false } => {
            show::run(store, &id, json, out).await
        }
        SessionsCommand::Show { id, json, lineage: true } => {
            lineage::run(store, &id, json, out).await
        }
        SessionsCommand::Search(args) => search::run(store, &args, out).await,
        SessionsCommand::Export(args) => export::run(store, &args, out).await,
        SessionsCommand::Rename { id, title } => {
            let session = store.resolve_session(&id).await?;
            store.rename_session(&session.id, &title).await?;
            match title.trim() {
                "" => writeln!(out, "cleared the title of session {}", session.id)?,
                title => writeln!(out, "renamed session {} to \"{title}\"", session.id)?,
            }
            Ok(())
        }
        SessionsCommand::Delete { id, yes } => delete(store, &id, yes, out).await,
        SessionsCommand::Prune { older_than, source } => {
            let pruned = store.prune_sessions(older_than, source).await?;
            writeln!(out, "pruned {pruned} ended session{}", plural(pruned))?;
            Ok(())
        }
        SessionsCommand::Stats { json } => stats(store, json, out).await,
    }
}

async fn list(
    store: &Store,
    source: Option<Platform>,
    limit: u32,
    json: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    // One more than asked for tells whether there are more to mention.
    let wanted = (limit > 0).then(|| limit.saturating_add(1));
    let mut sessions =
        store.list_sessions(&SessionFilter { source, user_id: None, limit: wanted }).await?;
    let more = limit > 0 && sessions.len() > limit as usize;
    sessions.truncate(if limit > 0 { limit as usize } else { sessions.len() });
    if json {
        output::write_json(out, &sessions)?;
        return Ok(());
    }
    if sessions.is_empty() {
        writeln!(out, "no sessions")?;
        return Ok(());
    }
    let short =
        output::short_ids(store, sessions.iter().flat_map(|s| s.parent_session_id.as_deref()))
            .await?;
    let mut table =
        Table::new(&["ID", "PARENT", "SOURCE", "TITLE", "MESSAGES", "STARTED", "ENDED"]);
    for s in &sessions {
        let parent = s.parent_session_id.as_ref().and_then(|p| short.get(p));
        table.row(vec![
            s.id.clone(),
            parent.map_or("-".to_owned(), String::clone),
            s.source.to_string(),
            s.title
                .as_deref()
                .map_or("-".to_owned(), |t| output::truncate(&output::one_line(t), 40)),
            s.message_count.to_string(),
            output::local_time(s.started_at),
            s.ended_at.map_or("open".to_owned(), output::local_time),
        ]);
    }
    table.write(out)?;
    if more {
        writeln!(out, "… more sessions: raise --limit, or --limit 0 for all")?;
    }
    Ok(())
}

async fn delete(
    store: &Store,
    reference: &str,
    yes: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let session = store.resolve_session(reference).await?;
    if !yes && io::stdin().is_terminal() && !confirm(&session)? {
        bail!("nothing deleted; answer y to delete, or pass -y");
    }
    let messages = store.delete_session(&session.id).await?;
    writeln!(out, "deleted session {} and its {messages} message{}", session.id, plural(messages))?;
    Ok(())
}

/// Asks on the terminal; only `y` or `yes` agrees.
fn confirm(session: &Session) -> anyhow::Result<bool> {
    let title = session.title.as_deref().map(|t| format!(" \"{}\"", output::one_line(t)));
    let mut stderr = io::stderr().lock();
    write!(
        stderr,
        "delete session {}{} with {} message{}? [y/N] ",
        session.id,
        title.unwrap_or_default(),
        session.message_count,
        plural(session.message_count)
    )?;
    stderr.flush()?;
    let mut answer = String::new();
    io::stdin().lock().read_line(&mut answer).context("could not read the answer")?;
    Ok(matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes"))
}

async fn stats(store: &Store, json: bool, out: &mut dyn Write) -> anyhow::Result<()> {
    let stats = store.stats().await?;
    if json {
        output::write_json(out, &stats)?;
        return Ok(());
    }
    let time = |t: Option<i64>| t.map_or("-".to_owned(), output::local_time);
    writeln!(out, "sessions  {} ({} open)", stats.sessions, stats.open_sessions)?;
    writeln!(out, "messages  {}", stats.messages)?;
    writeln!(out, "oldest    {}", time(stats.oldest_started_at))?;
    writeln!(out, "newest    {}", time(stats.newest_started_at))?;
    writeln!(out, "size      {} ({})", output::size(stats.size_bytes), store.location())?;
    if !stats.by_source.is_empty() {
        writeln!(out)?;
        let mut table = Table::new(&["SOURCE", "SESSIONS", "OPEN", "MESSAGES"]);
        for s in &stats.by_source {
            let cells = [s.sessions, s.open_sessions, s.messages].map(|n| n.to_string());
            table.row([vec![s.source.to_string()], cells.to_vec()].concat());
        }
        table.write(out)?;
    }
    Ok(())
}

fn plural(n: impl Into<i128>) -> &'static str {
    if n.into() == 1 { "" } else { "s" }
}
