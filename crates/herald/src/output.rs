//! Text for people: aligned tables, local times, sizes, short session ids, and untrusted text
//! (chat messages) made safe and short enough to print on a terminal.

use std::collections::HashMap;
use std::io::{self, Write};

use chrono::{Local, TimeZone};

/// Marks a search hit's start inside a snippet; a private-use character no chat contains,
/// swapped for bold or `**` only after the snippet is cleaned of control characters.
pub const MARK_OPEN: &str = "\u{E000}";
/// Marks a search hit's end inside a snippet.
pub const MARK_CLOSE: &str = "\u{E001}";

/// Columns of text, left-aligned, two spaces apart.
#[derive(Debug)]
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers.
    pub fn new(headers: &[&str]) -> Table {
        Table { rows: vec![headers.iter().map(|h| (*h).to_owned()).collect()] }
    }

    /// Adds a row; cells should already be one line each.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Writes the header and rows, padding every column but the last.
    pub fn write(&self, out: &mut dyn Write) -> io::Result<()> {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|c| self.rows.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max())
            .map(Option::unwrap_or_default)
            .collect();
        for row in &self.rows {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                if c + 1 < row.len() {
                    let pad = widths[c].saturating_sub(cell.chars().count());
                    line.push_str(&format!("{cell}{}  ", " ".repeat(pad)));
                } else {
                    line.push_str(cell);
                }
            }
            writeln!(out, "{}", line.trim_end())?;
        }
        Ok(())
    }
}

/// A Unix-milliseconds time as local `YYYY-MM-DD HH:MM`.
pub fn local_time(ms: i64) -> String {
    local(ms, "%Y-%m-%d %H:%M")
}

/// A Unix-milliseconds time as local `HH:MM`.
pub fn local_clock(ms: i64) -> String {
    local(ms, "%H:%M")
}

/// A Unix-milliseconds time as a local date, `YYYY-MM-DD`.
pub fn local_date(ms: i64) -> String {
    local(ms, "%Y-%m-%d")
}

fn local(ms: i64, format: &str) -> String {
    match Local.timestamp_millis_opt(ms).single() {
        Some(time) => time.format(format).to_string(),
        None => ms.to_string(),
    }
}

/// Bytes as `812 B`, `4.0 KiB`, `1.2 MiB`.
pub fn size(bytes: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < units.len() {
        value /= 1024.0;
        unit += 1;
    }
    match unit {
        0 => format!("{bytes} B"),
        _ => format!("{value:.1} {}", units[unit]),
    }
}

/// Text with terminal control characters (escape sequences a chat message might carry)
/// replaced by `�`; newlines and tabs are kept.
pub fn clean(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() && c != '\n' && c != '\t' { '\u{FFFD}' } else { c })
        .collect()
}

/// Clean text on one line: every run of whitespace becomes one space.
pub fn one_line(text: &str) -> String {
    clean(text).split_whitespace().collect::<Vec<_>>().join(" ")
}

/// At most `max` characters, ending in `…` when cut.
pub fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// A snippet marked with [`MARK_OPEN`]/[`MARK_CLOSE`], on one line, hits in ANSI bold for a
/// terminal or `**hit**` otherwise.
pub fn highlight(snippet: &str, bold: bool) -> String {
    let (open, close) = if bold { ("\x1b[1m", "\x1b[0m") } else { ("**", "**") };
    one_line(snippet).replace(MARK_OPEN, open).replace(MARK_CLOSE, close)
}

/// Short forms of session ids for a person to read and type back: the shortest prefix no
/// other session shares, with `…` when cut.
pub async fn short_ids<'a>(
    store: &herald_store::Store,
    ids: impl IntoIterator<Item = &'a str>,
) -> Result<HashMap<String, String>, herald_store::StoreError> {
    let mut ids: Vec<&str> = ids.into_iter().collect();
    ids.sort_unstable();
    ids.dedup();
    let short = store.short_ids(&ids).await?;
    Ok(ids
        .into_iter()
        .zip(short)
        .map(|(id, short)| {
            let shown = if short.len() < id.len() { format!("{short}…") } else { short };
            (id.to_owned(), shown)
        })
        .collect())
}

/// Pretty JSON and a newline.
pub fn write_json(out: &mut dyn Write, value: &impl serde::Serialize) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, value)?;
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align() {
        let mut table = Table::new(&["ID", "TITLE", "N"]);
        table.row(vec!["a".into(), "long title".into(), "1".into()]);
        let mut out = Vec::new();
        table.write(&mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "ID  TITLE       N\na   long title  1\n");
    }

    #[test]
    fn untrusted_text_is_tamed() {
        assert_eq!(one_line("a\x1b[31m red\n\tb"), "a\u{FFFD}[31m red b");
        assert_eq!(truncate("héllo world", 5), "héll…");
        assert_eq!(truncate("short", 5), "short");
        let snippet = format!("fix the {MARK_OPEN}TODO{MARK_CLOSE}\nnow");
        assert_eq!(highlight(&snippet, false), "fix the **TODO** now");
        assert_eq!(highlight(&snippet, true), "fix the \x1b[1mTODO\x1b[0m now");
        assert_eq!(size(812), "812 B");
        assert_eq!(size(1536), "1.5 KiB");
    }
}
