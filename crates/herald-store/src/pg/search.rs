//! Search on PostgreSQL: the same queries, filters and snippets as on SQLite, over the word
//! index and the trigram index of the migration `search`.
//!
//! Typed text goes through the same sanitizer (`search/query.rs`). Each phrase is made a
//! `tsquery` by PostgreSQL with the index's own rules (`herald_words`, the `herald`
//! configuration); the phrases are joined here with the typed operators, and the whole is
//! bound as one value: nothing typed is ever parsed as query syntax.

use herald_core::{Platform, Role};

use super::Pg;
use crate::error::StoreError;
use crate::search::{Item, Op, RANK_WINDOW, SearchHit, SearchQuery, is_cjk, items, join};
use crate::snippet::Marks;

/// A `tsquery` that matches nothing, for a phrase in which the index finds no word: its one
/// lexeme both required and excluded.
const NOTHING: &str = "'\u{E000}' & !'\u{E000}'";

impl Pg {
    /// Searches messages, best match first, as [`crate::Store::search`] does on SQLite: word
    /// hits ranked, then, for text in scripts written without spaces, substring hits.
    pub(crate) async fn search(&self, query: &SearchQuery) -> Result<Vec<SearchHit>, StoreError> {
        let items = items(&query.text);
        if !items.iter().any(|i| matches!(i, Item::Phrase { .. })) {
            return Ok(Vec::new());
        }
        // Every message committed before the search is searchable.
        self.index_pending().await?;
        let tsquery = self.tsquery(&items).await?;
        let mut hits = self.word_search(&tsquery, &items, query).await?;
        if query.text.chars().any(is_cjk) {
            for hit in self.substring_search(&items, query).await? {
                if !hits.iter().any(|h| h.message_id == hit.message_id) {
                    hits.push(hit);
                }
            }
            hits.truncate(query.limit as usize);
        }
        Ok(hits)
    }

    /// The typed query as the text of a `tsquery`: each phrase's words as PostgreSQL makes
    /// them (`'chat' <-> 'send'`), a prefix's last word with `:*`, joined by the operators.
    async fn tsquery(&self, items: &[Item]) -> Result<String, StoreError> {
        let texts: Vec<&str> = items
            .iter()
            .filter_map(|i| match i {
                Item::Phrase { text, .. } => Some(text.as_str()),
                Item::Op(_) => None,
            })
            .collect();
        let phrases: Vec<String> = sqlx::query_scalar(
            "SELECT coalesce(phraseto_tsquery('herald', herald_words(p.t))::text, '')
             FROM unnest($1::text[]) WITH ORDINALITY AS p(t, n) ORDER BY p.n",
        )
        .bind(&texts)
        .fetch_all(&self.inner.pool)
        .await?;
        let mut phrases = phrases.into_iter();
        let rendered = join(
            items,
            |_, prefix| {
                let phrase = phrases.next().unwrap_or_default();
                // A phrase's words are a chain of quoted lexemes: the last one takes the `:*`.
                match (phrase.is_empty(), prefix && phrase.ends_with('\'')) {
                    (true, _) => format!("({NOTHING})"),
                    (false, true) => format!("({phrase}:*)"),
                    (false, false) => format!("({phrase})"),
                }
            },
            |op| match op {
                Op::And => " & ",
                Op::Or => " | ",
                Op::Not => " & !",
            },
        );
        Ok(rendered)
    }

    /// Hits of the word index among the newest [`RANK_WINDOW`] matches, ranked by cover
    /// density over the message's length (lower is better, as BM25 on SQLite), newest first
    /// among equals; snippets made from the text as on SQLite (`snippet.rs`).
    async fn word_search(
        &self,
        tsquery: &str,
        items: &[Item],
        query: &SearchQuery,
    ) -> Result<Vec<SearchHit>, StoreError> {
        let mut hits: Vec<SearchHit> = sqlx::query_as(
            "SELECT message_id, session_id, source, title, role, created_at, snippet,
                    (-ts_rank_cd(search, $1::tsquery, 1))::float8 AS rank
             FROM (SELECT m.id AS message_id, s.id AS session_id, s.source, s.title, m.role,
                          m.created_at, m.content AS snippet, m.search
                   FROM messages m JOIN sessions s ON s.id = m.session_id
                   WHERE m.search @@ $1::tsquery
                     AND ($2::text IS NULL OR s.source = $2) AND ($3::text IS NULL OR m.role = $3)
                     AND ($4::text IS NULL OR s.user_id = $4) AND ($5::text IS NULL OR s.id = $5)
                   ORDER BY m.id DESC LIMIT $6) newest
             ORDER BY rank, message_id DESC LIMIT $7",
        )
        .bind(tsquery)
        .bind(query.source.map(Platform::as_str))
        .bind(query.role.map(Role::as_str))
        .bind(query.user_id.as_deref())
        .bind(query.session_id.as_deref())
        .bind(RANK_WINDOW)
        .bind(i64::from(query.limit))
        .fetch_all(&self.inner.pool)
        .await?;
        let marks = Marks::new(items.iter().filter_map(|item| match item {
            Item::Phrase { text, prefix } => Some((text.as_str(), *prefix)),
            Item::Op(_) => None,
        }));
        for hit in &mut hits {
            hit.snippet = marks.snippet(&hit.snippet, &query.mark_open, &query.mark_close);
        }
        Ok(hits)
    }

    /// Messages with unspaced text holding the phrases as substrings, in the query's boolean
    /// shape, newest first: the trigram index finds phrases of three characters or more, and
    /// the messages with such text are few enough to read for shorter ones.
    async fn substring_search(
        &self,
        items: &[Item],
        query: &SearchQuery,
    ) -> Result<Vec<SearchHit>, StoreError> {
        let mut words = Vec::new();
        let condition = join(
            items,
            |text, _| {
                words.push(text.to_owned());
                format!("m.content ILIKE ($6::text[])[{}]", words.len())
            },
            |op| match op {
                Op::And => " AND ",
                Op::Or => " OR ",
                Op::Not => " AND NOT ",
            },
        );
        // The condition only points into the bound array of patterns, however many words.
        let sql = format!(
            "SELECT m.id AS message_id, s.id AS session_id, s.source, s.title, m.role,
                    m.created_at, m.content AS snippet, 0.0::float8 AS rank
             FROM messages m JOIN sessions s ON s.id = m.session_id
             WHERE m.cjk AND ({condition})
               AND ($1::text IS NULL OR s.source = $1) AND ($2::text IS NULL OR m.role = $2)
               AND ($3::text IS NULL OR s.user_id = $3) AND ($4::text IS NULL OR s.id = $4)
             ORDER BY m.id DESC LIMIT $5"
        );
        let patterns: Vec<String> = words.iter().map(|w| format!("%{}%", escape_like(w))).collect();
        let mut hits = sqlx::query_as::<_, SearchHit>(sqlx::AssertSqlSafe(sql))
            .bind(query.source.map(Platform::as_str))
            .bind(query.role.map(Role::as_str))
            .bind(query.user_id.as_deref())
            .bind(query.session_id.as_deref())
            .bind(i64::from(query.limit))
            .bind(&patterns)
            .fetch_all(&self.inner.pool)
            .await?;
        for hit in &mut hits {
            hit.snippet = crate::search::literal_snippet(&hit.snippet, &words, query);
        }
        Ok(hits)
    }
}

/// `text` matched literally by LIKE: its wildcards and the escape character escaped.
fn escape_like(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '\\' | '%' | '_') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    //! The store's search cases on PostgreSQL, over rows inserted directly (the cases through
    //! the whole store are in tests/it/search.rs, on both backends).
    #![allow(clippy::unwrap_used)]

    use proptest::prelude::*;

    use super::*;
    use crate::scratch::{Kind, Scratch};

    /// A message to seed: role, text, tool name.
    type Row<'a> = (&'a str, &'a str, Option<&'a str>);

    async fn seed(pg: &Pg, session: &str, source: &str, user: &str, rows: &[Row<'_>]) {
        sqlx::query(
            "INSERT INTO sessions (id, source, user_id, started_at, updated_at)
             VALUES ($1, $2, $3, 0, 0)",
        )
        .bind(session)
        .bind(source)
        .bind(user)
        .execute(&pg.inner.pool)
        .await
        .unwrap();
        for (i, (role, content, tool)) in rows.iter().enumerate() {
            sqlx::query(
                "INSERT INTO messages (session_id, role, content, tool_name, created_at)
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(session)
            .bind(role)
            .bind(content)
            .bind(tool)
            .bind(i as i64)
            .execute(&pg.inner.pool)
            .await
            .unwrap();
        }
    }

    /// The corpus of tests/it/search.rs.
    async fn corpus() -> Pg {
        let scratch = Scratch::new(Kind::Postgres).await;
        let pg =
            Pg::open(scratch.options.postgres.as_ref().unwrap(), &scratch.options).await.unwrap();
        let user = |text| ("user", text, None);
        let alice = [
            "TODO: fix the chat-send retry before v2.1 ships",
            "the deploy script failed on the staging box",
            "deployment notes: run migrations first",
            "my cat knocked the router off the shelf (again)",
            "聊天记录，记忆断裂问题复现了",
            "emoji 🎉 party at the café",
            "下周一起测试通信协议",
        ];
        seed(&pg, "alice-s", "telegram", "alice", &alice.map(user)).await;
        let bob = [
            user("router router router firmware upgrade"),
            ("assistant", "the router firmware is at v2.1 now", None),
            ("tool", "2026-12-02T10:00:00Z", Some("current_time")),
        ];
        seed(&pg, "bob-s", "slack", "bob", &bob).await;
        pg
    }

    async fn search(pg: &Pg, text: &str) -> Vec<SearchHit> {
        pg.search(&SearchQuery::new(text)).await.unwrap_or_else(|e| panic!("{text:?}: {e}"))
    }

    #[tokio::test]
    async fn typed_text_is_searched_as_on_sqlite() {
        let pg = corpus().await;
        let table: &[(&str, usize)] = &[
            ("TODO: fix", 1),
            ("chat-send", 1),
            ("v2.1", 2),
            ("\"chat-send retry\"", 1),
            ("(router", 3),
            ("router OR deploy", 4),
            ("router AND", 3),
            ("NOT router", 3),
            ("router NOT firmware", 1),
            ("AND OR NOT", 0),
            ("\"unbalanced quote", 0),
            ("deploy*", 1 + 1),
            ("dep*", 2),
            ("\"the deploy\"*", 1),
            ("router NOT zzqx*", 3),
            ("🎉 party", 1),
            ("cafe", 1),
            ("CAFÉ", 1),
            ("content:router", 0),
            ("current_time", 1),
            ("NEAR(router firmware)", 0),
            ("'single quotes'", 0),
            ("-- DROP TABLE messages;", 0),
            ("\\", 0),
            ("记忆断裂", 1),
            ("通信", 1),
            ("复现", 1),
            ("记忆断裂 OR 通信", 2),
            ("记忆断裂 OR router", 4),
            ("通信 router", 0),
            ("记忆断裂问题 NOT 通信", 1),
            ("協議", 0),
            ("100%", 0),
            ("记忆_断裂", 0),
        ];
        let mut wrong = Vec::new();
        for (input, expected) in table {
            let hits = search(&pg, input).await.len();
            if hits != *expected {
                wrong.push(format!("{input:?}: {hits} hits, expected {expected}"));
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
        assert!(search(&pg, "记忆断裂").await[0].snippet.contains("**记忆断裂**"));
        assert!(search(&pg, "通信").await[0].snippet.contains("**通信**"));

        let router = search(&pg, "router").await;
        assert!(router[0].snippet.starts_with("**router** **router**"), "{router:?}");
        assert!(router[0].rank <= router[1].rank && router[1].rank <= router[2].rank);
        let deploy = search(&pg, "deploy*").await;
        assert!(deploy.iter().any(|h| h.snippet.contains("**deployment**")), "{deploy:?}");
    }

    #[tokio::test]
    async fn filters_narrow_the_hits() {
        let pg = corpus().await;
        let hits = |f: fn(&mut SearchQuery)| {
            let mut q = SearchQuery::new("v2.1");
            f(&mut q);
            let pg = pg.clone();
            async move { pg.search(&q).await.unwrap() }
        };
        let telegram = hits(|q| q.source = Some(Platform::Telegram)).await;
        assert_eq!(telegram.len(), 1);
        assert_eq!(telegram[0].source, Platform::Telegram);
        assert_eq!(hits(|q| q.role = Some(Role::Assistant)).await.len(), 1);
        assert_eq!(hits(|q| q.user_id = Some("bob".into())).await.len(), 1);
        assert!(hits(|q| q.user_id = Some("bo".into())).await.is_empty());
        assert_eq!(hits(|q| q.session_id = Some("bob-s".into())).await.len(), 1);
        assert!(hits(|q| q.role = Some(Role::Tool)).await.is_empty());
        assert_eq!(hits(|q| q.limit = 1).await.len(), 1);
        let tool = hits(|q| {
            q.text = "current_time".into();
            q.role = Some(Role::Tool);
            q.source = Some(Platform::Slack);
        });
        assert_eq!(tool.await.len(), 1);
        for typed in ["slack", "telegram", "bob", "\u{E000}slack", "assistant"] {
            assert!(search(&pg, typed).await.is_empty(), "{typed:?}");
        }
        assert_eq!(pg.unindexed().await.unwrap(), 0);
    }

    #[test]
    fn arbitrary_text_never_errors() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let pg = runtime.block_on(corpus());
        // The sanitizer's own cases, then what proptest makes up.
        let cases = [
            "hello world",
            "TODO: fix",
            "chat-send",
            "v2.1",
            "\"exact phrase\" here",
            "deploy*",
            "\"open quote",
            "cats OR dogs",
            "cats NOT dogs",
            "OR cats AND",
            "NOT",
            "cats AND OR dogs",
            "",
            "   ",
            "😀",
            "((",
            "\"\"",
            "***",
            ": - .",
            "AND OR NOT",
            "(unbalanced",
            "say \"hi\"\"",
            "'''",
            "a:* & !b",
            "\0",
            "\u{E000}",
            "½",
            "%_\\",
        ];
        let long =
            ["x ".repeat(3000), "记忆 OR ".repeat(1000), "(\"a".repeat(1000), "é*".repeat(2000)];
        for text in cases.into_iter().chain(long.iter().map(String::as_str)) {
            let result = runtime.block_on(pg.search(&SearchQuery::new(text)));
            assert!(result.is_ok(), "{:?}: {result:?}", text.get(..40).unwrap_or(text));
        }
        let config = ProptestConfig { cases: 256, ..ProptestConfig::default() };
        let mut runner = proptest::test_runner::TestRunner::new(config);
        let inputs =
            (any::<String>(), "[ a-zA-Z0-9\"():*^.-]{0,40}", "[记忆断裂通信 %_\\\\*]{0,8}");
        runner
            .run(&inputs, |(text, typed, cjk)| {
                for input in [text, typed, cjk] {
                    let result = runtime.block_on(pg.search(&SearchQuery::new(input.as_str())));
                    prop_assert!(result.is_ok(), "{:?}: {:?}", input, result);
                }
                Ok(())
            })
            .unwrap();
    }
}
