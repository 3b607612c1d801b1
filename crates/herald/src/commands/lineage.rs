//! `herald sessions show ID --lineage`: the chain of sessions that context compression made
//! continue one another, oldest first, one line each.

use std::io::Write;

use herald_store::{Session, Store};

use crate::output::{self, Table, local_time, one_line, truncate};

/// Prints the chain of the session `reference` names, marking that session.
pub(super) async fn run(
    store: &Store,
    reference: &str,
    json: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let asked = store.resolve_session(reference).await?;
    let chain = store.chain(&asked.id).await?;
    if json {
        output::write_json(out, &chain)?;
        return Ok(());
    }
    let short = output::short_ids(store, chain.iter().map(|s| s.id.as_str())).await?;
    let count = chain.len();
    let s = if count == 1 { "" } else { "s" };
    writeln!(out, "chain of {count} session{s}, oldest first (* the one asked for)")?;
    let mut table = Table::new(&["", "ID", "TITLE", "STARTED", "MESSAGES", "ENDED"]);
    for (i, session) in chain.iter().enumerate() {
        let mark = if session.id == asked.id { "*" } else { "" };
        table.row(vec![
            mark.to_owned(),
            short.get(&session.id).cloned().unwrap_or_else(|| session.id.clone()),
            session.title.as_deref().map_or("-".to_owned(), |t| truncate(&one_line(t), 40)),
            local_time(session.started_at),
            session.message_count.to_string(),
            ended(session, i + 1 == count),
        ]);
    }
    table.write(out)?;
    Ok(())
}

/// How a session of the chain ended; the newest is `current`, where the conversation goes on.
fn ended(s: &Session, newest: bool) -> String {
    let reason = match (&s.end_reason, s.ended_at) {
        (Some(reason), _) => one_line(reason),
        (None, Some(_)) => "ended".to_owned(),
        (None, None) => "open".to_owned(),
    };
    match (newest, s.ended_at) {
        (true, None) => "current".to_owned(),
        (true, Some(_)) => format!("{reason}, current"),
        (false, _) => reason,
    }
}
