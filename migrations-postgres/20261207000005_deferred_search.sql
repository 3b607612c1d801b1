-- Search indexing leaves the write path, as on SQLite: a message commits with `search` NULL and
-- is indexed in batches right after, when the database is quiet, and always before a search.
-- Its words and their GIN entries were most of the cost of writing a message.
ALTER TABLE messages ALTER COLUMN search DROP EXPRESSION;

-- A message's words, as the generated column made them.
CREATE FUNCTION herald_search(content text, tool_name text) RETURNS tsvector
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT to_tsvector('herald'::regconfig, herald_words(left(content, 50000)))
                 || to_tsvector('herald'::regconfig, herald_words(coalesce(tool_name, ''))) $$;

-- The messages waiting for their words, oldest first.
CREATE INDEX messages_unindexed ON messages (id) WHERE search IS NULL;
