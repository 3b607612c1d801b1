//! Full-text search over messages: a sanitizer that makes any typed text a valid FTS5 query,
//! and the BM25-ranked search with snippets and filters.

use herald_core::{Platform, Role};
use serde::Serialize;

use crate::error::StoreError;
use crate::open::Store;

/// What to search for, and where.
#[derive(Debug, Clone)]
pub struct SearchQuery {
    /// What the person typed; any text is accepted.
    pub text: String,
    /// Only sessions from this source.
    pub source: Option<Platform>,
    /// Only messages with this role.
    pub role: Option<Role>,
    /// Only sessions of this platform user.
    pub user_id: Option<String>,
    /// Only this session.
    pub session_id: Option<String>,
    /// At most this many hits.
    pub limit: u32,
    /// Put before each hit in the snippet.
    pub mark_open: String,
    /// Put after each hit in the snippet.
    pub mark_close: String,
}

impl SearchQuery {
    /// A search for `text` everywhere, 20 hits, hits marked `**like this**`.
    pub fn new(text: impl Into<String>) -> Self {
        SearchQuery {
            text: text.into(),
            source: None,
            role: None,
            user_id: None,
            session_id: None,
            limit: 20,
            mark_open: "**".into(),
            mark_close: "**".into(),
        }
    }
}

/// One matching message, best first.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct SearchHit {
    /// The message.
    pub message_id: i64,
    /// Its session.
    pub session_id: String,
    /// The session's source.
    #[sqlx(try_from = "String")]
    pub source: Platform,
    /// The session's title.
    pub title: Option<String>,
    /// Who wrote the message.
    #[sqlx(try_from = "String")]
    pub role: Role,
    /// Unix milliseconds.
    pub created_at: i64,
    /// The text around the hit, hits marked.
    pub snippet: String,
    /// BM25 score: lower is better.
    pub rank: f64,
}

impl Store {
    /// Searches messages, best match first. Never fails on what a person typed: text with
    /// nothing searchable in it gives no hits.
    pub async fn search(&self, query: &SearchQuery) -> Result<Vec<SearchHit>, StoreError> {
        let Some(fts) = sanitize_query(&query.text) else { return Ok(Vec::new()) };
        Ok(sqlx::query_as(
            "SELECT m.id AS message_id, m.session_id, s.source, s.title, m.role, m.created_at,
                    snippet(messages_fts, -1, ?7, ?8, '…', 16) AS snippet,
                    bm25(messages_fts) AS rank
             FROM messages_fts
             JOIN messages m ON m.id = messages_fts.rowid
             JOIN sessions s ON s.id = m.session_id
             WHERE messages_fts MATCH ?1
               AND (?2 IS NULL OR s.source = ?2)
               AND (?3 IS NULL OR m.role = ?3)
               AND (?4 IS NULL OR s.user_id = ?4)
               AND (?5 IS NULL OR m.session_id = ?5)
             ORDER BY rank LIMIT ?6",
        )
        .bind(fts)
        .bind(query.source.map(Platform::as_str))
        .bind(query.role.map(Role::as_str))
        .bind(&query.user_id)
        .bind(&query.session_id)
        .bind(i64::from(query.limit))
        .bind(&query.mark_open)
        .bind(&query.mark_close)
        .fetch_all(&self.inner.pool)
        .await?)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    And,
    Or,
    Not,
}

#[derive(Debug, PartialEq, Eq)]
enum Item {
    Phrase { text: String, prefix: bool },
    Op(Op),
}

/// Turns what a person typed into an FTS5 query that cannot be a syntax error, or `None`
/// when nothing in it is searchable.
///
/// Every word becomes a quoted phrase, so `TODO:`, `chat-send` and `v2.1` are looked up as
/// the words they contain, in order; `"quoted text"` stays a phrase; a trailing `*` asks for a
/// prefix. `AND`, `OR` and `NOT` (upper case, as FTS5 spells them) keep their meaning between
/// two terms and are dropped at the ends; parentheses and other punctuation only separate.
pub fn sanitize_query(input: &str) -> Option<String> {
    let mut out = String::new();
    let mut pending: Option<Op> = None;
    for item in items(input) {
        match item {
            Item::Op(op) if !out.is_empty() => pending = Some(op),
            Item::Op(_) => {}
            Item::Phrase { text, prefix } => {
                if !out.is_empty() {
                    out.push_str(match pending.take().unwrap_or(Op::And) {
                        Op::And => " AND ",
                        Op::Or => " OR ",
                        Op::Not => " NOT ",
                    });
                }
                out.push('"');
                out.push_str(&text.replace('"', "\"\""));
                out.push('"');
                if prefix {
                    out.push('*');
                }
            }
        }
    }
    (!out.is_empty()).then_some(out)
}

/// Splits typed text into phrases and operators.
fn items(input: &str) -> Vec<Item> {
    let mut items = Vec::new();
    let mut chars = input.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() || c == '(' || c == ')' {
            chars.next();
        } else if c == '"' {
            chars.next();
            let text: String = chars.by_ref().take_while(|&c| c != '"').collect();
            let prefix = chars.next_if_eq(&'*').is_some();
            push_phrase(&mut items, text, prefix);
        } else {
            let mut word = String::new();
            while let Some(c) = chars.next_if(|&c| !(c.is_whitespace() || "\"()".contains(c))) {
                word.push(c);
            }
            match word.as_str() {
                "AND" => items.push(Item::Op(Op::And)),
                "OR" => items.push(Item::Op(Op::Or)),
                "NOT" => items.push(Item::Op(Op::Not)),
                _ => {
                    let prefix = word.ends_with('*');
                    let text = word.trim_end_matches('*').to_owned();
                    push_phrase(&mut items, text, prefix);
                }
            }
        }
    }
    items
}

/// Keeps a phrase only if the tokenizer will find a word in it: a phrase of punctuation or
/// emoji alone would match nothing and only confuse the operators around it.
fn push_phrase(items: &mut Vec<Item>, text: String, prefix: bool) {
    if text.chars().any(char::is_alphanumeric) {
        items.push(Item::Phrase { text, prefix });
    }
}

#[cfg(test)]
mod tests {
    use super::sanitize_query;

    #[track_caller]
    fn check(input: &str, expected: Option<&str>) {
        assert_eq!(sanitize_query(input).as_deref(), expected, "input: {input:?}");
    }

    #[test]
    fn words_become_phrases() {
        check("hello world", Some(r#""hello" AND "world""#));
        check("TODO: fix", Some(r#""TODO:" AND "fix""#));
        check("chat-send", Some(r#""chat-send""#));
        check("v2.1", Some(r#""v2.1""#));
        check(r#""exact phrase" here"#, Some(r#""exact phrase" AND "here""#));
        check("deploy*", Some(r#""deploy"*"#));
        check(r#""open quote"#, Some(r#""open quote""#));
    }

    #[test]
    fn operators_only_between_terms() {
        check("cats OR dogs", Some(r#""cats" OR "dogs""#));
        check("cats NOT dogs", Some(r#""cats" NOT "dogs""#));
        check("OR cats AND", Some(r#""cats""#));
        check("NOT", None);
        check("cats AND OR dogs", Some(r#""cats" OR "dogs""#));
        check("cats or dogs", Some(r#""cats" AND "or" AND "dogs""#));
    }

    #[test]
    fn nothing_searchable_is_none() {
        for input in ["", "   ", "😀", "((", "\"\"", "***", ": - .", "AND OR NOT"] {
            check(input, None);
        }
        check("(unbalanced", Some(r#""unbalanced""#));
        check("say \"hi\"\"", Some(r#""say" AND "hi""#));
    }
}
