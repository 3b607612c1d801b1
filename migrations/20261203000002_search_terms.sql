-- The words of the full-text index, one row per distinct term. A prefix query such as
-- `deploy*` is looked up here and searched as the words it stands for (`deploy OR deployed OR
-- deployment`): FTS5 answers a prefix without a prefix index by merging the whole doclist of
-- every matching word into memory, again for each statement that touches it, while an OR of
-- words is walked lazily, newest first, and stops at the ranking window. Reading this table
-- stores nothing; it reads the index.
CREATE VIRTUAL TABLE messages_terms USING fts5vocab (messages_fts, row);
