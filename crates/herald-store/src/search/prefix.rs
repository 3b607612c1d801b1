//! Prefixes (`deploy*`) spelled out as the indexed words they start, so that FTS5 walks a few
//! words' lists newest first and stops, instead of merging every matching word's list whole.

use std::collections::HashMap;

use crate::error::StoreError;
use crate::open::Lite;

use super::query::{Item, fts_op, join, phrase};

impl Lite {
    /// The query for the word index with each prefix (`deploy*`) spelled out as the words of
    /// the index it stands for, or `None` when no prefix was spelled out. A prefix is left to
    /// FTS5 when it is short, not plain ASCII letters and digits (the index folds other text
    /// in ways only its tokenizer knows), matches no word, or matches too many.
    pub(super) async fn expand_prefixes(
        &self,
        items: &[Item],
    ) -> Result<Option<String>, StoreError> {
        let mut words: HashMap<&str, Vec<String>> = HashMap::new();
        for item in items {
            let Item::Phrase { text, prefix: true } = item else { continue };
            let Some((low, high)) = term_range(text) else { continue };
            if words.contains_key(text.as_str()) {
                continue;
            }
            let terms: Vec<String> = sqlx::query_scalar(
                "SELECT DISTINCT term FROM messages_terms
                 WHERE term >= ?1 AND term < ?2
                   AND col IN ('system_text', 'user_text', 'assistant_text', 'tool_text', 'tool_name')
                 LIMIT ?3",
            )
            .bind(low)
            .bind(high)
            .bind(EXPANDED_MAX as i64 + 1)
            .fetch_all(&self.inner.pool)
            .await?;
            if !terms.is_empty() && terms.len() <= EXPANDED_MAX {
                words.insert(text, terms);
            }
        }
        if words.is_empty() {
            return Ok(None);
        }
        let rendered = join(
            items,
            |text, prefix| match words.get(text).filter(|_| prefix) {
                Some(terms) => {
                    let terms: Vec<String> = terms.iter().map(|t| phrase(t, false)).collect();
                    format!("({})", terms.join(" OR "))
                }
                None => phrase(text, prefix),
            },
            fts_op,
        );
        Ok(Some(rendered))
    }
}

/// The shortest prefix spelled out as words: shorter ones match so many words that listing
/// them (which reads their doclists) costs more than FTS5's own merge.
const EXPANDED_MIN: usize = 3;
/// The most words one prefix is spelled out as; a prefix matching more is left to FTS5.
const EXPANDED_MAX: usize = 128;

/// The range of index terms that start with `prefix`, as the index spells them (ASCII folded
/// to lower case), when `prefix` can be spelled out at all.
fn term_range(prefix: &str) -> Option<(String, String)> {
    if prefix.len() < EXPANDED_MIN || !prefix.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return None;
    }
    let low = prefix.to_ascii_lowercase();
    let mut high = low.clone().into_bytes();
    // The last byte is an ASCII letter or digit, so one past it is ASCII too.
    *high.last_mut()? += 1;
    Some((low, String::from_utf8(high).ok()?))
}

#[cfg(test)]
mod tests {
    #[test]
    fn prefixes_spelled_out_are_plain_ascii_of_three_or_more() {
        let range = |p: &str| super::term_range(p);
        assert_eq!(range("Deploy"), Some(("deploy".into(), "deploz".into())));
        assert_eq!(range("v29"), Some(("v29".into(), "v2:".into())));
        assert_eq!(range("de"), None);
        assert_eq!(range("déploi"), None);
        assert_eq!(range("chat-send"), None);
    }
}
