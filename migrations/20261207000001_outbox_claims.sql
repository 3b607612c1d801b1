-- Until when (Unix ms) a sender has claimed an outbox row; NULL or past: it may be claimed again.
-- A sender that stops mid-delivery leaves its claim to expire, and the reply is sent after all.
ALTER TABLE outbox ADD COLUMN claimed_until INTEGER;
