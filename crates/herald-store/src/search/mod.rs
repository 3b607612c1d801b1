//! Full-text search over messages: the BM25-ranked search with snippets and filters, over a
//! sanitizer (`query.rs`) that makes any typed text a valid FTS5 query.

use herald_core::{Platform, Role};
use serde::Serialize;

use crate::error::StoreError;
use crate::open::Lite;
use crate::snippet::Marks;

mod prefix;
mod query;
mod rank;

pub use query::sanitize_query;
pub(crate) use query::{Item, Op, items, join};
use query::{literal_condition, render_fts};

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

/// How many of the newest matches are ranked: BM25 over every match of a common word in a big
/// store is slow, and in a chat history the best hits are almost always among the recent ones.
pub(crate) const RANK_WINDOW: i64 = 2000;

/// The word index's columns that hold the text of a role's messages.
fn role_columns(role: Role) -> &'static str {
    match role {
        Role::System => "system_text",
        Role::User => "user_text",
        Role::Assistant => "assistant_text",
        Role::Tool => "tool_text tool_name",
    }
}

/// Starts every token of the word index's filter columns, and is taken out of typed text, so
/// that typed words never match a filter (see the migration `search_filters`).
const FILTER_MARK: char = '\u{E000}';

/// The filters other than the role as FTS5 terms of their columns, if any is set.
fn narrowing(query: &SearchQuery) -> Option<String> {
    let mut terms = Vec::new();
    if let Some(source) = query.source {
        terms.push(format!("source : \"{FILTER_MARK}{}\"", source.as_str()));
    }
    if let Some(user) = &query.user_id {
        terms.push(format!("author : \"{FILTER_MARK}u{}\"", hex(user)));
    }
    if let Some(session) = &query.session_id {
        terms.push(format!("session : \"{FILTER_MARK}s{}\"", hex(session)));
    }
    (!terms.is_empty()).then(|| terms.join(" AND "))
}

/// What SQLite's `hex()` makes of the text: its UTF-8 bytes in hex.
fn hex(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02X}")).collect()
}

/// Literal substring search, newest first, for words the trigram index cannot find (shorter
/// than three characters). `{condition}` is built from `instr` tests bound from ?9 on.
const LITERAL_SEARCH: &str = "
    SELECT m.id AS message_id, s.id AS session_id, s.source, s.title, m.role, m.created_at,
           m.content AS snippet, 0.0 AS rank
    FROM messages m
    JOIN sessions s ON s.no = m.session_no
    WHERE m.cjk AND ({condition})
      AND (?2 IS NULL OR s.source = ?2) AND (?3 IS NULL OR m.role = ?3)
      AND (?4 IS NULL OR s.user_id = ?4) AND (?5 IS NULL OR s.id = ?5)
      -- ?1, ?7 and ?8 belong to the index search; named here so both take the same binds
      AND ?1 IS NOT NULL AND ?7 IS NOT NULL AND ?8 IS NOT NULL
    ORDER BY m.id DESC LIMIT ?6";

impl Lite {
    /// Searches messages, best match first. Never fails on what a person typed: text with
    /// nothing searchable in it gives no hits.
    ///
    /// Text in scripts written without spaces (Chinese, Japanese, Korean) is looked up in the
    /// trigram index as well, or, for words under three characters, literally.
    pub async fn search(&self, query: &SearchQuery) -> Result<Vec<SearchHit>, StoreError> {
        let items = items(&query.text);
        let Some(fts) = render_fts(&items) else { return Ok(Vec::new()) };
        // Whatever was committed is searchable: catch the deferred index up first.
        self.index_pending().await?;
        let words = self.expand_prefixes(&items).await?;
        let marks = Marks::new(items.iter().filter_map(|item| match item {
            Item::Phrase { text, prefix } => Some((text.as_str(), *prefix)),
            Item::Op(_) => None,
        }));
        let words = words.as_deref().unwrap_or(&fts);
        let lone = match items.as_slice() {
            [Item::Phrase { text, prefix: false }] => rank::lone_phrase(text),
            _ => None,
        };
        let mut hits = self.word_search(words, lone.as_deref(), query, &marks).await?;
        if query.text.chars().any(is_cjk) {
            let short = items
                .iter()
                .any(|i| matches!(i, Item::Phrase { text, .. } if text.chars().count() < 3));
            let more = if short {
                let (condition, words) = literal_condition(&items);
                let sql = LITERAL_SEARCH.replace("{condition}", &condition);
                let mut found = self.run_search(sql, &fts, &words, query).await?;
                for hit in &mut found {
                    hit.snippet = literal_snippet(&hit.snippet, &words, query);
                }
                found
            } else {
                self.trigram_search(&fts, query).await?
            };
            for hit in more {
                if !hits.iter().any(|h| h.message_id == hit.message_id) {
                    hits.push(hit);
                }
            }
            hits.truncate(query.limit as usize);
        }
        Ok(hits)
    }

    /// BM25-ranked hits of the word index among the newest [`RANK_WINDOW`] matches. The
    /// filters are part of the match (see the migration `search_filters`): a role picks the
    /// text column, the others are tokens of their own columns. A query that is one phrase of
    /// several words (`lone_phrase`: its words), unfiltered, may be ranked here (`rank.rs`).
    async fn word_search(
        &self,
        fts: &str,
        lone_phrase: Option<&[String]>,
        query: &SearchQuery,
        marks: &Marks,
    ) -> Result<Vec<SearchHit>, StoreError> {
        let narrowing = narrowing(query);
        if let (Some(phrase), None, None) = (lone_phrase, query.role, &narrowing)
            && let Some(ranked) = self.rank_lone_phrase(fts, phrase, query.limit).await?
        {
            return self.word_hits(ranked, query, marks).await;
        }
        let text = match query.role {
            Some(role) => format!("{{{}}} : ({fts})", role_columns(role)),
            None => fts.to_owned(),
        };
        let ranked: Vec<(i64, f64)> = match narrowing {
            // One walk over the matches, newest first, scoring each; the inner LIMIT keeps it
            // a walk that stops (a subquery with a LIMIT is not flattened into the ORDER BY).
            None => sqlx::query_as(
                "SELECT id, rank FROM (
                     SELECT rowid AS id, bm25(messages_fts) AS rank FROM messages_fts
                     WHERE messages_fts MATCH ?1 ORDER BY rowid DESC LIMIT ?2)
                 ORDER BY rank, id DESC LIMIT ?3",
            )
            .bind(&text)
            .bind(RANK_WINDOW)
            .bind(i64::from(query.limit)),
            // The window is found with the filters, and scored without them: bm25 counts the
            // documents of every phrase it is given, and a filter's token may be in much of
            // the store.
            Some(narrowing) => sqlx::query_as(
                "WITH newest AS MATERIALIZED (
                     SELECT rowid AS id FROM messages_fts WHERE messages_fts MATCH ?2
                     ORDER BY rowid DESC LIMIT ?3)
                 SELECT rowid AS id, bm25(messages_fts) AS rank FROM messages_fts
                 WHERE messages_fts MATCH ?1 AND rowid >= (SELECT min(id) FROM newest)
                   AND +rowid IN newest
                 ORDER BY rank, rowid DESC LIMIT ?4",
            )
            .bind(&text)
            .bind(format!("{text} AND {narrowing}"))
            .bind(RANK_WINDOW)
            .bind(i64::from(query.limit)),
        }
        .fetch_all(&self.inner.pool)
        .await?;
        self.word_hits(ranked, query, marks).await
    }

    /// The details of ranked word-index hits, in rank order, with snippets made from their
    /// text (see `snippet.rs`): a lookup by id, without evaluating the query again.
    async fn word_hits(
        &self,
        ranked: Vec<(i64, f64)>,
        query: &SearchQuery,
        marks: &Marks,
    ) -> Result<Vec<SearchHit>, StoreError> {
        if ranked.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<i64> = ranked.iter().map(|r| r.0).collect();
        let found = sqlx::query_as::<_, SearchHit>(
            "SELECT m.id AS message_id, s.id AS session_id, s.source, s.title, m.role, m.created_at,
                    m.content AS snippet, 0.0 AS rank
             FROM messages m CROSS JOIN sessions s ON s.no = m.session_no
             WHERE m.id IN (SELECT value FROM json_each(?1))",
        )
        .bind(serde_json::to_string(&ids)?)
        .fetch_all(&self.inner.pool)
        .await?;
        let mut hits = in_rank_order(found, ranked);
        for hit in &mut hits {
            hit.snippet = marks.snippet(&hit.snippet, &query.mark_open, &query.mark_close);
        }
        Ok(hits)
    }

    /// BM25-ranked hits of the trigram index among the newest [`RANK_WINDOW`] matches; it
    /// holds few messages, so its filters are plain joins.
    async fn trigram_search(
        &self,
        fts: &str,
        query: &SearchQuery,
    ) -> Result<Vec<SearchHit>, StoreError> {
        let ranked: Vec<(i64, f64)> = sqlx::query_as(
            "SELECT id, rank FROM (
                 SELECT messages_cjk.rowid AS id, bm25(messages_cjk) AS rank FROM messages_cjk
                 JOIN messages m ON m.id = messages_cjk.rowid
                 JOIN sessions s ON s.no = m.session_no
                 WHERE messages_cjk MATCH ?1
                   AND (?2 IS NULL OR s.source = ?2) AND (?3 IS NULL OR m.role = ?3)
                   AND (?4 IS NULL OR s.user_id = ?4) AND (?5 IS NULL OR s.id = ?5)
                 ORDER BY messages_cjk.rowid DESC LIMIT ?6)
             ORDER BY rank, id DESC LIMIT ?7",
        )
        .bind(fts)
        .bind(query.source.map(Platform::as_str))
        .bind(query.role.map(Role::as_str))
        .bind(query.user_id.as_deref())
        .bind(query.session_id.as_deref())
        .bind(RANK_WINDOW)
        .bind(i64::from(query.limit))
        .fetch_all(&self.inner.pool)
        .await?;
        self.trigram_hits(fts, ranked, query).await
    }

    /// The details and snippets of ranked trigram-index hits, in rank order.
    ///
    /// They are read by walking the match once over the hits' range of ids: FTS5 would
    /// evaluate the whole query again for every value of `rowid IN (...)`. The `+` keeps the
    /// list a plain filter on that walk, checked before any snippet is made, and the LIMIT
    /// ends the walk at the last hit (FTS5 would look on for a next match past the range).
    async fn trigram_hits(
        &self,
        fts: &str,
        ranked: Vec<(i64, f64)>,
        query: &SearchQuery,
    ) -> Result<Vec<SearchHit>, StoreError> {
        let ids: Vec<i64> = ranked.iter().map(|r| r.0).collect();
        let (Some(&low), Some(&high)) = (ids.iter().min(), ids.iter().max()) else {
            return Ok(Vec::new());
        };
        let found = sqlx::query_as::<_, SearchHit>(
            "SELECT m.id AS message_id, s.id AS session_id, s.source, s.title, m.role, m.created_at,
                    snippet(messages_cjk, -1, ?2, ?3, '…', 16) AS snippet, 0.0 AS rank
             FROM messages_cjk
             CROSS JOIN messages m ON m.id = messages_cjk.rowid
             CROSS JOIN sessions s ON s.no = m.session_no
             WHERE messages_cjk MATCH ?1 AND messages_cjk.rowid BETWEEN ?4 AND ?5
               AND +messages_cjk.rowid IN (SELECT value FROM json_each(?6))
             LIMIT ?7",
        )
        .bind(fts.to_owned())
        .bind(query.mark_open.clone())
        .bind(query.mark_close.clone())
        .bind(low)
        .bind(high)
        .bind(serde_json::to_string(&ids)?)
        .bind(ids.len() as i64)
        .fetch_all(&self.inner.pool)
        .await?;
        Ok(in_rank_order(found, ranked))
    }

    /// The literal fallback: runs [`LITERAL_SEARCH`] with its substring words bound from ?9.
    async fn run_search(
        &self,
        sql: String,
        fts: &str,
        words: &[String],
        query: &SearchQuery,
    ) -> Result<Vec<SearchHit>, StoreError> {
        let mut q = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(fts.to_owned())
            .bind(query.source.map(Platform::as_str))
            .bind(query.role.map(Role::as_str))
            .bind(query.user_id.clone())
            .bind(query.session_id.clone())
            .bind(i64::from(query.limit))
            .bind(query.mark_open.clone())
            .bind(query.mark_close.clone());
        for word in words {
            q = q.bind(word.clone());
        }
        Ok(q.fetch_all(&self.inner.pool).await?)
    }
}

/// Characters of scripts written without spaces between words: U+2E80..U+9FFF (radicals,
/// kana, ideographs), Hangul syllables and compatibility ideographs. Stored per message as
/// `messages.cjk`, which decides what the trigram index holds.
pub(crate) fn is_cjk(c: char) -> bool {
    matches!(c, '\u{2E80}'..='\u{9FFF}' | '\u{AC00}'..='\u{D7AF}' | '\u{F900}'..='\u{FAFF}')
}

/// The hits of `found` in the order of `ranked`, each with its rank.
fn in_rank_order(mut found: Vec<SearchHit>, ranked: Vec<(i64, f64)>) -> Vec<SearchHit> {
    let mut hits = Vec::with_capacity(ranked.len());
    for (id, rank) in ranked {
        if let Some(at) = found.iter().position(|h| h.message_id == id) {
            let mut hit = found.swap_remove(at);
            hit.rank = rank;
            hits.push(hit);
        }
    }
    hits
}

/// A snippet around the first literal hit, hits marked.
pub(crate) fn literal_snippet(content: &str, words: &[String], query: &SearchQuery) -> String {
    let first = words.iter().filter_map(|w| content.find(w.as_str())).min().unwrap_or(0);
    let start = content[..first].char_indices().rev().nth(15).map_or(0, |(i, _)| i);
    let end = content[first..].char_indices().nth(48).map_or(content.len(), |(i, _)| first + i);
    let mut snippet = content[start..end].to_owned();
    for word in words.iter().filter(|w| !w.is_empty()) {
        snippet = snippet
            .replace(word.as_str(), &format!("{}{word}{}", query.mark_open, query.mark_close));
    }
    let before = if start > 0 { "…" } else { "" };
    let after = if end < content.len() { "…" } else { "" };
    format!("{before}{snippet}{after}")
}
