-- Search on PostgreSQL: a word index kept by the database itself (nothing is ever pending),
-- and a trigram index for text written without spaces (Chinese, Japanese, Korean).
CREATE EXTENSION IF NOT EXISTS unaccent;
CREATE EXTENSION IF NOT EXISTS pg_trgm;

-- Words as SQLite's `unicode61 remove_diacritics 2` sees them: no stemming, no stop words,
-- case and accents folded (unaccent, then simple's lower case).
CREATE TEXT SEARCH CONFIGURATION herald (COPY = simple);
ALTER TEXT SEARCH CONFIGURATION herald
    ALTER MAPPING FOR asciiword, word, numword, asciihword, hword, numhword, hword_asciipart,
        hword_part, hword_numpart, email, file, float, host, int, sfloat, uint, url, url_path,
        version
    WITH unaccent, simple;

-- ASCII punctuation separates words, as in unicode61: without it the parser would keep
-- `chat-send`, `v2.1`, hosts and paths whole. Ranges by code point, so no locale decides.
-- The same function makes the words of queries (see pg/search.rs).
-- (A quoted body rather than RETURN: PostgreSQL before 14 has generated columns but not that.)
CREATE FUNCTION herald_words(t text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    AS $$ SELECT regexp_replace(t, '[\x01-\x2F\x3A-\x40\x5B-\x60\x7B-\x7F]+', ' ', 'g') $$;

-- A tsvector holds at most 1 MB: the text is indexed up to a length whose words cannot
-- reach it, so that no message is ever refused for its size.
ALTER TABLE messages
    ADD COLUMN search tsvector GENERATED ALWAYS AS (
        to_tsvector('herald'::regconfig, herald_words(left(content, 50000)))
        || to_tsvector('herald'::regconfig, herald_words(coalesce(tool_name, '')))
    ) STORED,
    -- the ranges of search::is_cjk
    ADD COLUMN cjk boolean GENERATED ALWAYS AS (
        content ~ '[\u2E80-\u9FFF\uAC00-\uD7AF\uF900-\uFAFF]'
    ) STORED;

CREATE INDEX messages_search ON messages USING gin (search);
-- Substring search for unspaced text: the trigrams for words of three characters or more,
-- newest first by id for shorter ones.
CREATE INDEX messages_cjk_trigrams ON messages USING gin (content gin_trgm_ops) WHERE cjk;
CREATE INDEX messages_cjk_by_id ON messages (id) WHERE cjk;
