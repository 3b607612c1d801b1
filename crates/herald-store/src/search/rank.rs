//! BM25 for a query that is one phrase of several words, computed here from the phrase's
//! matches instead of by FTS5's `bm25()`.
//!
//! FTS5 scores a phrase by how many messages hold it, and counts them by walking every match
//! of the phrase once more before it scores the first hit. For a phrase with a common word in
//! it (`"restart the server"`: "the" is in two thirds of the messages) that walk steps through
//! the common word's whole list again and costs as much as the search. When the phrase has
//! few matches (fewer than [`MOST`], so all of them are in the ranking window), the search has
//! just walked all of them, so their number is known. The scores are then computed here, with
//! FTS5's formula and its own figures (row count, token totals, each message's size from the
//! index), and come out identical to the last bit on x86-64 (see the test
//! `a_lone_phrase_is_ranked_exactly_as_fts5_ranks_it`; where the C compiler fuses
//! multiply-adds, as on ARM, SQLite's own score may differ in its last bit). The phrase is
//! counted in the message's text and its tool's name (each in a column of the index) by the
//! tokenizer's rules, which are simple and exact for ASCII text; any other text, [`MOST`]
//! matches or more, or a count that disagrees with the index leaves the ranking to FTS5.

use crate::error::StoreError;
use crate::open::Lite;

/// FTS5's `bm25()` parameters (`fts5_aux.c`); every column weighs 1.
const K1: f64 = 1.2;
const B: f64 = 0.75;

/// The most matches ranked here; past it FTS5 ranks them, and the walk that found out was
/// wasted. A phrase this rare costs FTS5 a second walk much longer than reading its matches
/// here whenever the walk is long, and for a common phrase the wasted walk is short.
const MOST: i64 = 64;
// Fewer matches than the window are all of them, the number FTS5 would count.
const _: () = assert!(MOST <= super::RANK_WINDOW);

/// The record of the index's totals in `messages_fts_data` (`FTS5_AVERAGES_ROWID`).
const AVERAGES_ROWID: i64 = 1;

/// The longest word FTS5 keeps whole (`FTS5_MAX_TOKEN_SIZE`); longer ones are cut, in the
/// index and in queries alike.
const WORD_MAX: usize = 32_768;

/// The words of `text` when it is a phrase this module can rank: ASCII, two words or more (a
/// single word's matches are counted by FTS5 from its list alone, cheaply), none of them long
/// enough for FTS5 to cut (a message's word that long then cannot equal any of them either).
pub(super) fn lone_phrase(text: &str) -> Option<Vec<String>> {
    let words: Vec<String> = ascii_words(text).map(str::to_ascii_lowercase).collect();
    let whole = words.iter().all(|w| w.len() < WORD_MAX);
    (text.is_ascii() && whole && words.len() >= 2).then_some(words)
}

/// The words of ASCII text as the index's tokenizer (`unicode61`) splits it: runs of letters
/// and digits. It also folds them to lower case; callers compare without case.
fn ascii_words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty())
}

/// A match of the phrase, as read for scoring.
#[derive(sqlx::FromRow)]
struct Matched {
    id: i64,
    content: String,
    tool_name: Option<String>,
    /// The message's size in tokens per column, as FTS5 keeps it (`messages_fts_docsize`).
    sizes: Option<Vec<u8>>,
}

impl Lite {
    /// The matches of `fts`, one phrase of the words `phrase`, best first, at most `limit` of
    /// them; `None` when FTS5 has to rank them (see the module).
    pub(super) async fn rank_lone_phrase(
        &self,
        fts: &str,
        phrase: &[String],
        limit: u32,
    ) -> Result<Option<Vec<(i64, f64)>>, StoreError> {
        // One snapshot: the matches, their sizes and the totals must agree, as within FTS5.
        let mut tx = self.inner.pool.begin().await?;
        // Oldest first: FTS5 walks its lists forwards faster, and any [`MOST`] matches mean
        // FTS5 ranks them, whichever they are.
        let ids: Vec<i64> = sqlx::query_scalar(
            "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?1 ORDER BY rowid LIMIT ?2",
        )
        .bind(fts)
        .bind(MOST)
        .fetch_all(&mut *tx)
        .await?;
        if ids.len() as i64 >= MOST {
            return Ok(None);
        }
        if ids.is_empty() {
            return Ok(Some(Vec::new()));
        }
        let matched: Vec<Matched> = sqlx::query_as(
            "SELECT m.id, m.content, m.tool_name, d.sz AS sizes
             FROM messages m LEFT JOIN messages_fts_docsize d ON d.id = m.id
             WHERE m.id IN (SELECT value FROM json_each(?1))",
        )
        .bind(serde_json::to_string(&ids)?)
        .fetch_all(&mut *tx)
        .await?;
        let totals: Option<Vec<u8>> =
            sqlx::query_scalar("SELECT block FROM messages_fts_data WHERE id = ?1")
                .bind(AVERAGES_ROWID)
                .fetch_optional(&mut *tx)
                .await?;
        tx.commit().await?;

        let Some((rows, tokens)) = totals.as_deref().and_then(index_totals) else {
            return Ok(None);
        };
        if matched.len() != ids.len() {
            return Ok(None);
        }
        let scoring = Scoring::new(rows, tokens, ids.len() as i64);
        let mut ranked = Vec::with_capacity(matched.len());
        for m in &matched {
            let texts = [m.content.as_str(), m.tool_name.as_deref().unwrap_or("")];
            if !texts.iter().all(|t| t.is_ascii()) {
                return Ok(None);
            }
            let found: usize = texts.iter().map(|t| occurrences(t, phrase)).sum();
            let Some(size) = m.sizes.as_deref().and_then(|s| total(&varints(s))) else {
                return Ok(None);
            };
            // The index found the phrase here; text that says otherwise is not what was
            // indexed, and FTS5 knows best.
            if found == 0 {
                return Ok(None);
            }
            ranked.push((m.id, scoring.score(found as f64, size as f64)));
        }
        ranked.sort_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)));
        ranked.truncate(limit as usize);
        Ok(Some(ranked))
    }
}

/// The per-query figures of FTS5's `bm25()` for one phrase.
struct Scoring {
    idf: f64,
    average_size: f64,
}

impl Scoring {
    /// For an index of `rows` messages and `tokens` tokens, `hits` of which hold the phrase.
    fn new(rows: i64, tokens: i64, hits: i64) -> Scoring {
        // As `fts5Bm25GetData`, operation for operation: the result is compared bit for bit.
        let idf = (((rows - hits) as f64 + 0.5) / (hits as f64 + 0.5)).ln();
        Scoring {
            idf: if idf <= 0.0 { 1e-6 } else { idf },
            average_size: tokens as f64 / rows as f64,
        }
    }

    /// The score of a message of `size` tokens holding the phrase `found` times; lower is
    /// better, as FTS5's `bm25()`.
    fn score(&self, found: f64, size: f64) -> f64 {
        let score = 0.0
            + self.idf
                * ((found * (K1 + 1.0)) / (found + K1 * (1.0 - B + B * size / self.average_size)));
        -score
    }
}

/// How many times `phrase` (lower-case words) occurs in the ASCII `text`, overlapping
/// occurrences included (FTS5 counts every position a phrase starts at).
fn occurrences(text: &str, phrase: &[String]) -> usize {
    let words: Vec<&str> = ascii_words(text).collect();
    words
        .windows(phrase.len())
        .filter(|window| window.iter().zip(phrase).all(|(w, p)| w.eq_ignore_ascii_case(p)))
        .count()
}

/// The index's row count and token total, from its averages record: a varint of rows, then
/// one of tokens per column.
fn index_totals(record: &[u8]) -> Option<(i64, i64)> {
    let values = varints(record);
    let (&rows, columns) = values.split_first()?;
    let tokens = total(columns)?;
    (rows > 0).then_some((i64::try_from(rows).ok()?, i64::try_from(tokens).ok()?))
}

/// The sum of `values`, unless it overflows (only a damaged record could).
fn total(values: &[u64]) -> Option<u64> {
    values.iter().try_fold(0u64, |sum, &v| sum.checked_add(v))
}

/// SQLite's variable-length integers, one after another: seven bits a byte, high bit set while
/// more follow, the ninth byte whole.
fn varints(mut bytes: &[u8]) -> Vec<u64> {
    let mut values = Vec::new();
    while !bytes.is_empty() {
        let mut value = 0u64;
        let mut used = 0;
        for (i, &byte) in bytes.iter().enumerate().take(9) {
            used = i + 1;
            if i == 8 {
                value = (value << 8) | u64::from(byte);
                break;
            }
            value = (value << 7) | u64::from(byte & 0x7f);
            if byte < 0x80 {
                break;
            }
        }
        values.push(value);
        bytes = &bytes[used..];
    }
    values
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use herald_core::Platform;

    use super::*;
    use crate::{NewMessage, NewSession};

    const PHRASE: &str = "\"restart the server\"";

    /// FTS5's own ranking of the phrase's matches, best first.
    async fn fts5_ranking(store: &Lite) -> Vec<(i64, f64)> {
        sqlx::query_as(
            "SELECT rowid, bm25(messages_fts) AS rank FROM messages_fts
             WHERE messages_fts MATCH ?1 ORDER BY rank, rowid DESC",
        )
        .bind(PHRASE)
        .fetch_all(&store.inner.pool)
        .await
        .unwrap()
    }

    /// The same messages in the same order, with the same scores: to the last bit on x86-64,
    /// where SQLite is compiled without fused multiply-adds, and to within a few units of the
    /// last place where it is not (ARM).
    fn assert_same(ranked: &[(i64, f64)], expected: &[(i64, f64)]) {
        let ids = |r: &[(i64, f64)]| r.iter().map(|(id, _)| *id).collect::<Vec<_>>();
        assert_eq!(ids(ranked), ids(expected));
        for ((_, score), (_, fts5)) in ranked.iter().zip(expected) {
            if cfg!(target_arch = "x86_64") {
                assert_eq!(score.to_bits(), fts5.to_bits(), "{score} vs FTS5's {fts5}");
            } else {
                assert!(
                    (score - fts5).abs() <= 4.0 * f64::EPSILON * fts5.abs(),
                    "{score} vs {fts5}"
                );
            }
        }
    }

    #[tokio::test]
    async fn a_lone_phrase_is_ranked_exactly_as_fts5_ranks_it() {
        let (store, _dir) = crate::open::scratch_store().await;
        let session =
            store.create_session(&NewSession::new(Platform::Telegram, "p")).await.unwrap();
        let filler = "the quick brown fox jumps over the lazy dog. ";
        let mut messages = vec![
            NewMessage::user("restart the server"),
            NewMessage::user("Please RESTART the server, then restart the server again."),
            NewMessage::assistant(format!("{}restart the server", filler.repeat(12))),
            NewMessage::assistant("restart, the server: restart the server restart the server"),
            NewMessage::tool("c1", "restart_the_server", "done: the server was restarted"),
            NewMessage::tool("c2", "restart_the_server", "restart the server failed, retrying"),
            NewMessage::user("restart a server, or the server restart"),
        ];
        messages.extend((0..40).map(|i| NewMessage::user(filler.repeat(i % 7 + 1))));
        store.append_messages(&session.id, messages).await.unwrap();
        store.index_pending().await.unwrap();

        let expected = fts5_ranking(&store).await;
        assert_eq!(expected.len(), 6);
        let phrase = lone_phrase("restart the server").unwrap();
        let ranked = store.rank_lone_phrase(PHRASE, &phrase, 20).await.unwrap();
        let ranked = ranked.expect("ranked here");
        assert_same(&ranked, &expected);
        let three = store.rank_lone_phrase(PHRASE, &phrase, 3).await.unwrap().unwrap();
        assert_same(&three, &expected[..3]);

        // Text this module does not tokenize leaves the ranking to FTS5, and search gives
        // the same hits either way.
        store
            .append_messages(&session.id, vec![NewMessage::user("¡restart the server, señor!")])
            .await
            .unwrap();
        store.index_pending().await.unwrap();
        assert_eq!(store.rank_lone_phrase(PHRASE, &phrase, 20).await.unwrap(), None);
        let hits = store.search(&crate::SearchQuery::new(PHRASE)).await.unwrap();
        let hits: Vec<(i64, f64)> = hits.iter().map(|h| (h.message_id, h.rank)).collect();
        assert_eq!(hits, fts5_ranking(&store).await);
    }

    #[test]
    fn varints_read_as_sqlite_writes_them() {
        assert_eq!(varints(&[0x05, 0x7f, 0x81, 0x00]), vec![5, 127, 128]);
        assert_eq!(varints(&[0xff; 9]), vec![u64::MAX]);
        assert_eq!(varints(&[]), Vec::<u64>::new());
        assert_eq!(total(&varints(&[0xff; 18])), None, "a damaged record is not summed");
    }

    #[test]
    fn a_phrase_is_counted_wherever_it_starts() {
        let phrase = |t: &str| lone_phrase(t).unwrap();
        assert_eq!(
            occurrences("Restart the server; restart_the-SERVER.", &phrase("restart the server")),
            2
        );
        assert_eq!(occurrences("ha ha ha", &phrase("ha ha")), 2);
        assert_eq!(occurrences("restart a server", &phrase("restart the server")), 0);
        assert_eq!(lone_phrase("restart"), None);
        assert_eq!(lone_phrase("café au lait"), None);
        assert_eq!(lone_phrase(&format!("{} word", "a".repeat(WORD_MAX))), None);
    }
}
