//! `herald sessions search`: full-text search with hits highlighted.

use std::io::{self, IsTerminal, Write};

use herald_store::{SearchQuery, Store};

use crate::cli::SearchArgs;
use crate::output::{self, MARK_CLOSE, MARK_OPEN};

/// Prints the best hits: a line per hit naming its session, then the snippet; or JSON
/// with hits marked `**like this**`.
pub(super) async fn run(
    store: &Store,
    args: &SearchArgs,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let query = SearchQuery {
        source: args.source,
        role: args.role,
        user_id: args.user.clone(),
        limit: args.limit,
        mark_open: MARK_OPEN.into(),
        mark_close: MARK_CLOSE.into(),
        ..SearchQuery::new(&args.query)
    };
    let mut hits = store.search(&query).await?;
    if args.json {
        for hit in &mut hits {
            hit.snippet = hit.snippet.replace(MARK_OPEN, "**").replace(MARK_CLOSE, "**");
        }
        output::write_json(out, &hits)?;
        return Ok(());
    }
    if hits.is_empty() {
        writeln!(out, "no messages match")?;
        return Ok(());
    }
    let bold = io::stdout().is_terminal();
    // The session's short id and title tell apart the sessions of one chain (`trip`,
    // `trip #2`), which share everything else.
    let short = output::short_ids(store, hits.iter().map(|h| h.session_id.as_str())).await?;
    for hit in &hits {
        let title =
            hit.title.as_deref().map_or("-".into(), |t| output::truncate(&output::one_line(t), 40));
        let time = output::local_time(hit.created_at);
        let session = short.get(&hit.session_id).unwrap_or(&hit.session_id);
        writeln!(out, "{session}  {}  {title}  {}  {time}", hit.source, hit.role)?;
        writeln!(out, "    {}", output::highlight(&hit.snippet, bold))?;
    }
    Ok(())
}
