-- The words of the full-text index, one row per distinct term. A prefix query such as
-- `deploy*` is looked up here and searched as the words it stands for (`deploy OR deployed OR
-- deployment`): FTS5 answers a prefix without a prefix index by merging the whole doclist of
-- every matching word into memory, again for each statement that touches it, while an OR of
-- words is walked lazily, newest first, and stops at the ranking window. Reading this table
-- stores nothing; it reads the index. One row per term and column, so that prefixes can be
-- spelled out from the columns that hold text only (the index is rebuilt with more columns by
-- the next migration; this table follows it by name).
CREATE VIRTUAL TABLE messages_terms USING fts5vocab (messages_fts, col);
