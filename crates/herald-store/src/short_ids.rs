//! Short ids for people: the shortest prefix of a session id that no other session shares,
//! so a table can show it and `resolve_session` can take it back.

use crate::error::StoreError;
use crate::open::Lite;

/// Fewest characters shown: a UUID v7's first 8 are the creation time in minutes or so.
const MIN_CHARS: usize = 8;

impl Lite {
    /// For each of `ids`, the shortest prefix (at least 8 characters, not ending in `-`) no
    /// other session's id starts with, in the order given; the whole id when it is that short.
    pub async fn short_ids(&self, ids: &[&str]) -> Result<Vec<String>, StoreError> {
        let mut conn = self.inner.pool.acquire().await?;
        let mut short = Vec::with_capacity(ids.len());
        for id in ids {
            // Ids sharing the longest prefix with this one sort right next to it.
            let (before, after): (Option<String>, Option<String>) = sqlx::query_as(
                "SELECT (SELECT max(id) FROM sessions WHERE id < ?1),
                        (SELECT min(id) FROM sessions WHERE id > ?1)",
            )
            .bind(id)
            .fetch_one(&mut *conn)
            .await?;
            short.push(short_id(id, before.as_deref(), after.as_deref()));
        }
        Ok(short)
    }
}

/// The short id of `id`, given the ids next to it in byte order (those sharing the longest
/// prefix with it).
pub(crate) fn short_id(id: &str, before: Option<&str>, after: Option<&str>) -> String {
    let shared = [before, after].iter().flatten().map(|other| common_chars(id, other)).max();
    prefix(id, shared.unwrap_or(0) + 1)
}

/// How many leading characters `a` and `b` share.
fn common_chars(a: &str, b: &str) -> usize {
    a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count()
}

/// The first `wanted` characters of `id` (at least [`MIN_CHARS`]), one more when that ends in
/// `-`.
fn prefix(id: &str, wanted: usize) -> String {
    let mut short: String = id.chars().take(wanted.max(MIN_CHARS)).collect();
    if short.ends_with('-') {
        short.extend(id.chars().nth(short.chars().count()));
    }
    short
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_whole_characters() {
        assert_eq!(prefix("0193ab12-3456-7abc", 3), "0193ab12");
        assert_eq!(prefix("0193ab12-3456-7abc", 9), "0193ab12-3");
        assert_eq!(prefix("0193ab12-3456-7abc", 11), "0193ab12-34");
        assert_eq!(prefix("short", 9), "short");
        assert_eq!(prefix("éééééééé-éé", 9), "éééééééé-é");
        assert_eq!(common_chars("0193ab", "0193cd"), 4);
    }
}
