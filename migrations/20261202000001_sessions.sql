-- herald's session store, first schema. Forward-only: later changes are new files.

-- Assembled system prompts, stored once per distinct text so that sessions sharing a
-- persona share one row and every later turn reuses the exact bytes.
CREATE TABLE system_prompts (
    hash       TEXT PRIMARY KEY NOT NULL,
    prompt     TEXT NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;

CREATE TABLE sessions (
    id                 TEXT PRIMARY KEY NOT NULL,
    source             TEXT NOT NULL,
    session_key        TEXT,
    chat_id            TEXT,
    thread_id          TEXT,
    user_id            TEXT,
    chat_type          TEXT,
    title              TEXT UNIQUE,
    model              TEXT,
    system_prompt_hash TEXT REFERENCES system_prompts (hash),
    -- lineage: a compressed session points at the one it continues; deleting the parent
    -- clears the pointer instead of leaving it dangling
    parent_session_id  TEXT REFERENCES sessions (id) ON DELETE SET NULL,
    started_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL,
    ended_at           INTEGER,
    end_reason         TEXT,
    message_count      INTEGER NOT NULL DEFAULT 0,
    tool_call_count    INTEGER NOT NULL DEFAULT 0,
    input_tokens       INTEGER NOT NULL DEFAULT 0,
    output_tokens      INTEGER NOT NULL DEFAULT 0
) STRICT;

CREATE INDEX sessions_by_source ON sessions (source, started_at);
CREATE INDEX sessions_by_started ON sessions (started_at);
CREATE INDEX sessions_by_user ON sessions (user_id);
CREATE INDEX sessions_by_parent ON sessions (parent_session_id);
CREATE INDEX sessions_by_key ON sessions (session_key);

-- id is the ordering key of a session's history. AUTOINCREMENT: an id is never reused, so
-- the search cursor below can tell indexed rows from new ones by id alone.
CREATE TABLE messages (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id          TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    role                TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
    content             TEXT NOT NULL DEFAULT '',
    tool_calls          TEXT,
    tool_call_id        TEXT,
    tool_name           TEXT,
    platform_message_id TEXT,
    token_count         INTEGER,
    created_at          INTEGER NOT NULL,
    -- 1 when the text holds Chinese, Japanese or Korean (see the trigram index)
    cjk                 INTEGER NOT NULL DEFAULT 0
) STRICT;

CREATE INDEX messages_by_session ON messages (session_id, id);

-- Full-text index over message text and tool names.
--
-- Indexing is deferred: a write commits the messages only, and the store indexes every message
-- above search_cursor.upto in larger batches shortly after (and always before a search runs), so
-- a busy gateway does not pay for tokenizing inside every turn's transaction. Rows at or below
-- the cursor are in the index; the triggers keep those current when they change or go.
CREATE VIRTUAL TABLE messages_fts USING fts5 (
    content,
    tool_name,
    content = 'messages',
    content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2'
);

CREATE TABLE search_cursor (
    name TEXT PRIMARY KEY NOT NULL,
    upto INTEGER NOT NULL
) STRICT;

INSERT INTO search_cursor (name, upto) VALUES ('messages', 0);

CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages
WHEN old.id <= (SELECT upto FROM search_cursor WHERE name = 'messages') BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content, tool_name)
    VALUES ('delete', old.id, old.content, coalesce(old.tool_name, ''));
END;

CREATE TRIGGER messages_fts_update AFTER UPDATE OF content, tool_name ON messages
WHEN old.id <= (SELECT upto FROM search_cursor WHERE name = 'messages') BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content, tool_name)
    VALUES ('delete', old.id, old.content, coalesce(old.tool_name, ''));
    INSERT INTO messages_fts (rowid, content, tool_name)
    VALUES (new.id, new.content, coalesce(new.tool_name, ''));
END;

-- Which session a chat currently talks to.
CREATE TABLE routes (
    session_key TEXT PRIMARY KEY NOT NULL,
    session_id  TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    updated_at  INTEGER NOT NULL
) STRICT;

CREATE INDEX routes_by_session ON routes (session_id);

-- Inbound platform message ids already stored: a redelivered message is answered once.
CREATE TABLE processed_inbound (
    platform    TEXT NOT NULL,
    message_id  TEXT NOT NULL,
    session_id  TEXT REFERENCES sessions (id) ON DELETE SET NULL,
    received_at INTEGER NOT NULL,
    PRIMARY KEY (platform, message_id)
) STRICT, WITHOUT ROWID;

CREATE INDEX processed_inbound_by_time ON processed_inbound (received_at);

-- Per-platform positions that must survive restarts (the Telegram update offset).
CREATE TABLE platform_cursors (
    platform   TEXT NOT NULL,
    name       TEXT NOT NULL,
    value      TEXT NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (platform, name)
) STRICT, WITHOUT ROWID;

-- One-time pairing codes asked for by unknown users in direct messages.
CREATE TABLE pairing_requests (
    platform     TEXT NOT NULL,
    code         TEXT NOT NULL,
    user_id      TEXT NOT NULL,
    display_name TEXT,
    chat_id      TEXT,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    PRIMARY KEY (platform, code)
) STRICT, WITHOUT ROWID;

CREATE INDEX pairing_requests_by_user ON pairing_requests (platform, user_id);

-- Users the operator approved, by pairing or by hand.
CREATE TABLE approved_users (
    platform     TEXT NOT NULL,
    user_id      TEXT NOT NULL,
    display_name TEXT,
    approved_at  INTEGER NOT NULL,
    PRIMARY KEY (platform, user_id)
) STRICT, WITHOUT ROWID;
