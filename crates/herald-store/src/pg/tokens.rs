//! Round tokens: what keeps a round of group commit (`group.rs`) from being written twice.
//! Each round records a token with its outcomes in the statement that writes it. A try after a
//! broken connection that finds its token taken knows an earlier try committed, and reads that
//! try's outcomes instead of writing again. Tokens are kept ten minutes by the database's
//! clock, the one every replica shares.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use tracing::debug;

use super::round::{Batch, Outcomes, outcomes};
use crate::time::now_ms;

/// How long a round's token and outcomes are kept: far beyond any try of the round.
const TOKENS_KEPT: Duration = Duration::from_secs(600);
/// How often a store prunes the tokens past [`TOKENS_KEPT`].
const PRUNE_EVERY: Duration = Duration::from_secs(60);

/// Forgets the rounds recorded more than `$1` milliseconds ago, by the database's clock.
const PRUNE_SQL: &str = "DELETE FROM round_tokens
     WHERE written_at < (extract(epoch FROM clock_timestamp()) * 1000)::bigint - $1";

/// What names one round across its tries: a UUID (version 7, 74 random bits).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Token(pub(super) String);

impl Token {
    pub(crate) fn new() -> Token {
        Token(uuid::Uuid::now_v7().to_string())
    }
}

/// When a store last pruned the tokens (milliseconds).
#[derive(Debug, Default)]
pub(super) struct Pruning {
    at: AtomicI64,
}

impl Pruning {
    /// Every [`PRUNE_EVERY`], forgets the rounds recorded more than [`TOKENS_KEPT`] ago, on
    /// the side: no round waits for it.
    pub(super) fn when_due(&self, pool: &sqlx::PgPool) {
        let now = now_ms();
        let before = self.at.load(Ordering::Relaxed);
        let due = now >= before + PRUNE_EVERY.as_millis() as i64;
        if !due
            || self.at.compare_exchange(before, now, Ordering::AcqRel, Ordering::Relaxed).is_err()
        {
            return;
        }
        let pool = pool.clone();
        tokio::spawn(async move {
            let kept = TOKENS_KEPT.as_millis() as i64;
            if let Err(e) = sqlx::query(PRUNE_SQL).bind(kept).execute(&pool).await {
                debug!(error = %e, "could not prune the recorded rounds; the next prune will");
            }
        });
    }
}

/// Whether a round was refused because its token is recorded: an earlier try of it committed.
pub(super) fn token_taken(e: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = e else { return false };
    super::write::is_unique_violation(e) && db.constraint() == Some("round_tokens_pkey")
}

/// The outcomes an earlier try of the round `token` recorded.
pub(super) async fn recorded(
    pool: &sqlx::PgPool,
    batch: &Batch<'_>,
    token: &Token,
) -> Result<Outcomes, sqlx::Error> {
    let result: String = sqlx::query_scalar("SELECT result FROM round_tokens WHERE token = $1")
        .bind(&token.0)
        .fetch_one(pool)
        .await?;
    let rows: Vec<(bool, bool, Vec<i64>)> =
        serde_json::from_str(&result).map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
    outcomes(batch, rows, token)
}

#[cfg(test)]
mod tests {
    use herald_core::{ChatKind, ChatRef, Platform};

    use super::{PRUNE_SQL, Token, recorded};
    use crate::messages::{Append, Appended, Delivery, NewMessage, TokenUsage};
    use crate::pg::round::{Batch, write_once};
    use crate::scratch::{Kind, Scratch};
    use crate::sessions::NewSession;
    use crate::store::Store;

    #[tokio::test]
    async fn a_round_tried_again_after_its_answer_was_lost_is_written_once() {
        let scratch = Scratch::new(Kind::Postgres).await;
        let store = Store::open(scratch.options.clone()).await.unwrap();
        let pg = store.postgres().expect("a PostgreSQL store");
        let session =
            store.create_session(&NewSession::new(Platform::Telegram, "p")).await.unwrap();
        let chat = ChatRef {
            platform: Platform::Telegram,
            id: "42".into(),
            kind: ChatKind::Direct,
            thread: None,
        };
        let append = Append {
            session_id: session.id.clone(),
            messages: vec![NewMessage::assistant("答えは四十二 🙂")],
            dedupe: None,
            usage: TokenUsage::default(),
            outbox: Some(Delivery { chat, reply_to: None, text: "答えは四十二 🙂".into() }),
        };
        let token = Token::new();
        let batch = Batch::of_appends(vec![&append]);
        // The first try commits, but its answer never reaches herald (the connection broke).
        let first = write_once(&pg.inner.pool, &batch, &token).await.unwrap().appended;
        let Ok(Appended::Stored(ids)) = &first[0] else { panic!("{first:?}") };
        let again = pg.round_tries(&batch, &token, 1).await.unwrap().appended;
        let Ok(Appended::Stored(again_ids)) = &again[0] else { panic!("{again:?}") };
        assert_eq!(again_ids, ids, "the retry reports what the first try stored");
        assert_eq!(store.history(&session.id).await.unwrap().len(), 1, "stored twice");
        assert_eq!(store.undelivered().await.unwrap().len(), 1, "two replies to send");
        let read = recorded(&pg.inner.pool, &batch, &token).await.unwrap().appended;
        assert!(matches!(&read[0], Ok(Appended::Stored(read_ids)) if read_ids == ids));

        // Pruning goes by the database's clock: a round recorded now stays, an old one goes.
        let pool = &pg.inner.pool;
        sqlx::query("UPDATE round_tokens SET written_at = written_at - 3600000 WHERE token = $1")
            .bind(&token.0)
            .execute(pool)
            .await
            .unwrap();
        write_once(pool, &batch, &Token::new()).await.unwrap();
        sqlx::query(PRUNE_SQL).bind(600_000i64).execute(pool).await.unwrap();
        let left: Vec<String> =
            sqlx::query_scalar("SELECT token FROM round_tokens").fetch_all(pool).await.unwrap();
        assert_eq!(left.len(), 1);
        assert_ne!(left[0], token.0);
        store.close().await;
    }
}
