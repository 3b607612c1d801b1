-- How many pieces of a reply split for its platform were taken already: a later try, after a
-- failure part way or a restart, starts at the next piece instead of resending the reply whole.
ALTER TABLE outbox ADD COLUMN pieces BIGINT NOT NULL DEFAULT 0;
