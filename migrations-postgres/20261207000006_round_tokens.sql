-- The rounds of group commit written lately, each with what its appends got. A round whose
-- connection broke before its answer came is written again with the same token: if the first
-- try was committed, the token's key refuses the second, and the first's outcome is read here
-- instead, so no message or reply is stored twice. Tokens start with the time they were drawn
-- (milliseconds, shifted left 20 bits), so old ones are pruned by range.
CREATE TABLE round_tokens (
    token bigint PRIMARY KEY,
    result text NOT NULL
);
