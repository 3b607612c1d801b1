//! `herald sessions export`: JSON lines or a markdown transcript of a session, its chain or
//! all of them, to stdout or to a file written whole (a temporary file renamed into place)
//! with mode 0600.

use std::fs::Permissions;
use std::io::{BufWriter, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::Context;
use herald_core::Role;
use herald_store::{Session, SessionFilter, Store, StoredMessage};
use serde::Serialize;

use super::show::tool_calls;
use crate::cli::{ExportArgs, ExportFormat};
use crate::output::{clean, local_time};

/// A session as one JSON object: its fields, `system_prompt` and `messages`.
#[derive(Debug, Serialize)]
pub(super) struct Record<'a> {
    #[serde(flatten)]
    session: &'a Session,
    system_prompt: Option<String>,
    messages: Vec<StoredMessage>,
}

/// Reads what a session's [`Record`] needs.
pub(super) async fn record<'a>(store: &Store, session: &'a Session) -> anyhow::Result<Record<'a>> {
    Ok(Record {
        session,
        system_prompt: store.system_prompt(&session.id).await?,
        messages: store.history(&session.id).await?,
    })
}

/// Exports one session, its chain, or all of them (oldest first).
pub(super) async fn run(
    store: &Store,
    args: &ExportArgs,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let sessions = match &args.id {
        Some(reference) if args.chain => {
            let session = store.resolve_session(reference).await?;
            store.chain(&session.id).await?
        }
        Some(reference) => vec![store.resolve_session(reference).await?],
        None => {
            let mut all = store.list_sessions(&SessionFilter::default()).await?;
            all.reverse();
            all
        }
    };
    let Some(path) = &args.output else {
        return write_all(store, &sessions, args, out).await;
    };
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    // In the target's directory, so the rename is atomic; removed on drop if anything fails.
    let mut file = tempfile::Builder::new()
        .prefix(".herald-export-")
        .permissions(Permissions::from_mode(0o600))
        .tempfile_in(dir)
        .with_context(|| {
            format!("could not create a file in {}; check it exists and is writable", dir.display())
        })?;
    {
        let mut writer = BufWriter::new(file.as_file_mut());
        write_all(store, &sessions, args, &mut writer).await?;
        writer.flush().with_context(|| format!("could not write {}", path.display()))?;
    }
    file.as_file().sync_all().with_context(|| format!("could not write {}", path.display()))?;
    file.persist(path).with_context(|| format!("could not write {}", path.display()))?;
    let s = if sessions.len() == 1 { "" } else { "s" };
    writeln!(out, "exported {} session{s} to {}", sessions.len(), path.display())?;
    Ok(())
}

async fn write_all(
    store: &Store,
    sessions: &[Session],
    args: &ExportArgs,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    for (i, session) in sessions.iter().enumerate() {
        match args.format {
            ExportFormat::Jsonl => {
                serde_json::to_writer(&mut *out, &record(store, session).await?)?;
                writeln!(out)?;
            }
            ExportFormat::Markdown => {
                if i > 0 {
                    writeln!(out, "\n---\n")?;
                }
                let previous =
                    i.checked_sub(1).and_then(|p| sessions.get(p)).filter(|_| args.chain);
                let prompt = store.system_prompt(&session.id).await?;
                let history = store.history(&session.id).await?;
                markdown(session, previous, prompt.as_deref(), &history, out)?;
            }
        }
    }
    Ok(())
}

/// One session as markdown; in a chain, `previous` is the session it continues.
fn markdown(
    s: &Session,
    previous: Option<&Session>,
    prompt: Option<&str>,
    history: &[StoredMessage],
    out: &mut dyn Write,
) -> std::io::Result<()> {
    match previous {
        Some(previous) => writeln!(out, "# {} (continues {})\n", name(s), name(previous))?,
        None => writeln!(out, "# {}\n", name(s))?,
    }
    writeln!(out, "- id: `{}`", s.id)?;
    writeln!(out, "- source: {}", s.source)?;
    for (name, value) in [("chat", &s.chat_id), ("user", &s.user_id), ("model", &s.model)] {
        if let Some(value) = value {
            writeln!(out, "- {name}: {}", clean(value))?;
        }
    }
    if let Some(parent) = &s.parent_session_id {
        writeln!(out, "- continues: `{parent}`")?;
    }
    writeln!(out, "- started: {}", local_time(s.started_at))?;
    match s.ended_at {
        Some(at) => writeln!(out, "- ended: {}", local_time(at))?,
        None => writeln!(out, "- ended: no (open)")?,
    }
    writeln!(out, "- messages: {}", s.message_count)?;
    match (prompt, previous) {
        // A chain's sessions share one stored prompt: it is written once.
        (Some(_), Some(p)) if p.system_prompt_hash == s.system_prompt_hash => {
            writeln!(out, "\n## System prompt\n\nThe same as the previous session's.")?
        }
        (Some(prompt), _) => writeln!(out, "\n## System prompt\n\n{}", fenced(prompt))?,
        (None, _) => {}
    }
    for m in history {
        let time = local_time(m.created_at);
        match (m.role, &m.tool_name) {
            (Role::Tool, Some(tool)) => writeln!(out, "\n## tool · {tool} · {time}\n")?,
            (role, _) => writeln!(out, "\n## {role} · {time}\n")?,
        }
        let mut blocks = Vec::new();
        if m.role == Role::Tool {
            blocks.push(fenced(&m.content));
        } else if !m.content.trim().is_empty() {
            blocks.push(clean(&m.content).trim_end().to_owned());
        }
        let calls = m.tool_calls.as_ref().map(tool_calls).unwrap_or_default();
        blocks.extend(calls.iter().map(|call| format!("→ {}", code_span(call))));
        writeln!(out, "{}", blocks.join("\n\n"))?;
    }
    Ok(())
}

/// A session's title on one line, or `Session ID`.
fn name(s: &Session) -> String {
    match &s.title {
        Some(title) => clean(title).replace('\n', " "),
        None => format!("Session {}", s.id),
    }
}

/// A fenced block longer than any backtick run inside, so the text cannot close it.
fn fenced(text: &str) -> String {
    let fence = "`".repeat(longest_backtick_run(text).max(2) + 1);
    format!("{fence}text\n{}\n{fence}", clean(text).trim_end())
}

/// Inline code that survives backticks inside.
fn code_span(text: &str) -> String {
    let ticks = "`".repeat(longest_backtick_run(text) + 1);
    // CommonMark drops one space at each end, which keeps edge backticks apart from ours.
    let pad = if text.starts_with('`') || text.ends_with('`') { " " } else { "" };
    format!("{ticks}{pad}{text}{pad}{ticks}")
}

fn longest_backtick_run(text: &str) -> usize {
    text.split(|c| c != '`').map(str::len).max().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences_outlast_backticks() {
        assert_eq!(fenced("plain"), "```text\nplain\n```");
        assert_eq!(fenced("has ```code```"), "````text\nhas ```code```\n````");
        assert_eq!(code_span("a `b`"), "`` a `b` ``");
        assert_eq!(code_span("f {}"), "`f {}`");
    }
}
