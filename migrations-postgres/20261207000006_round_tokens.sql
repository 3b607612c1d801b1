-- The rounds of group commit written lately, each with what its appends got. A round whose
-- connection broke before its answer came is written again with the same token: if the first
-- try was committed, the token's key refuses the second, and the first's outcome is read here
-- instead, so no message or reply is stored twice. `written_at` is the database's clock
-- (milliseconds), the one clock every replica shares, by which old tokens are pruned.
CREATE TABLE round_tokens (
    token text COLLATE "C" PRIMARY KEY,
    written_at bigint NOT NULL,
    result text NOT NULL
);
