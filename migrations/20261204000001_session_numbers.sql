-- Messages name their session by a number instead of the session's 36-character id.
--
-- Why: a batch of the group commit appends to many sessions at once, and each append writes the
-- leaf of the history index (session, id) that holds its session's newest entries. Keyed by the
-- UUID text an entry took about 45 bytes, so a session with a hundred messages had a leaf of its
-- own, and a batch of 128 chats wrote 128 index pages (60% of its WAL frames). Keyed by a number an
-- entry takes about 12, sessions created together share leaves, and the same batch writes about 40.
--
-- The dedupe records of inbound messages lose their session id: nothing ever read it, and its
-- foreign key made every session delete scan the whole table. Their time index goes too (nothing
-- prunes by it); each record was written three times over (table, time index, foreign key).
--
-- Everything runs inside the migration's transaction with foreign keys on, so nothing is dropped by
-- a cascade: `sessions` keeps its rows and gains a column; only `messages` and the dedupe records
-- are rebuilt, after what refers to them by name has been set aside. The search index stays valid:
-- the view it reads returns the same values for every message.

-- Every session gets a number, unique in the file (existing ones their rowid); the store gives a
-- new session the next number.
ALTER TABLE sessions ADD COLUMN no INTEGER;
UPDATE sessions SET no = rowid;
CREATE UNIQUE INDEX sessions_by_no ON sessions (no);

-- A session inserted without one (by a herald from before this migration, still running when a
-- newer one upgraded the file) is numbered at once, so its messages can be stored once the old
-- process is replaced.
CREATE TRIGGER sessions_numbered AFTER INSERT ON sessions WHEN new.no IS NULL BEGIN
    UPDATE sessions SET no = (SELECT coalesce(max(no), 0) + 1 FROM sessions)
    WHERE rowid = new.rowid;
END;

-- Set aside what names the old messages table: the search view, the session triggers that read
-- it, and the outbox (a child of messages, which would lose its rows when messages is dropped).
DROP TRIGGER sessions_fts_delete;
DROP TRIGGER sessions_fts_update_old;
DROP TRIGGER sessions_fts_update_new;
DROP VIEW messages_search;
CREATE TEMP TABLE outbox_kept AS SELECT * FROM outbox;
DROP TABLE outbox;

CREATE TABLE messages_new (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    session_no          INTEGER NOT NULL REFERENCES sessions (no) ON DELETE CASCADE,
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

-- A message whose session is missing (none can be: foreign keys were always on) stops the
-- migration on NOT NULL rather than being left behind.
INSERT INTO messages_new (id, session_no, role, content, tool_calls, tool_call_id, tool_name,
                          platform_message_id, token_count, created_at, cjk)
SELECT m.id, s.no, m.role, m.content, m.tool_calls, m.tool_call_id, m.tool_name,
       m.platform_message_id, m.token_count, m.created_at, m.cjk
FROM messages m
LEFT JOIN sessions s ON s.id = m.session_id
ORDER BY m.id;

-- Ids are never reused (the search cursor tells indexed messages from new ones by id), so the
-- new table goes on from where the old one's sequence was, not from its largest surviving id
-- (nor from 1 when every message was deleted).
INSERT INTO sqlite_sequence (name, seq)
SELECT 'messages_new', 0
WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'messages_new');
UPDATE sqlite_sequence
SET seq = max(seq, coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'messages'), 0))
WHERE name = 'messages_new';

DROP TABLE messages;
ALTER TABLE messages_new RENAME TO messages;
CREATE INDEX messages_by_session ON messages (session_no, id);

CREATE TABLE outbox (
    message_id  INTEGER PRIMARY KEY REFERENCES messages (id) ON DELETE CASCADE,
    session_id  TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    platform    TEXT NOT NULL,
    chat_id     TEXT NOT NULL,
    thread_id   TEXT,
    chat_kind   TEXT NOT NULL,
    reply_to    TEXT,
    text        TEXT NOT NULL,
    created_at  INTEGER NOT NULL
) STRICT;
INSERT INTO outbox SELECT * FROM temp.outbox_kept;
DROP TABLE temp.outbox_kept;

-- The view the word index reads, as before, by session number; the values it returns are the
-- ones already indexed.
CREATE VIEW messages_search AS
SELECT m.id,
       m.session_no,
       s.id AS session_id,
       CASE m.role WHEN 'system' THEN m.content END AS system_text,
       CASE m.role WHEN 'user' THEN m.content END AS user_text,
       CASE m.role WHEN 'assistant' THEN m.content END AS assistant_text,
       CASE m.role WHEN 'tool' THEN m.content END AS tool_text,
       coalesce(m.tool_name, '') AS tool_name,
       char(57344) || s.source AS source,
       coalesce(char(57344) || 'u' || hex(s.user_id), '') AS author,
       char(57344) || 's' || hex(s.id) AS session
FROM messages m
JOIN sessions s ON s.no = m.session_no;

-- The triggers of the old table went with it; the same ones, on the new table.
CREATE TRIGGER messages_cjk_delete AFTER DELETE ON messages
WHEN old.id <= (SELECT upto FROM search_cursor WHERE name = 'messages') AND old.cjk BEGIN
    INSERT INTO messages_cjk (messages_cjk, rowid, content) VALUES ('delete', old.id, old.content);
END;

CREATE TRIGGER messages_cjk_update_old AFTER UPDATE OF content ON messages
WHEN old.id <= (SELECT upto FROM search_cursor WHERE name = 'messages') AND old.cjk BEGIN
    INSERT INTO messages_cjk (messages_cjk, rowid, content) VALUES ('delete', old.id, old.content);
END;

CREATE TRIGGER messages_cjk_update_new AFTER UPDATE OF content ON messages
WHEN new.id <= (SELECT upto FROM search_cursor WHERE name = 'messages') AND new.cjk BEGIN
    INSERT INTO messages_cjk (rowid, content) VALUES (new.id, new.content);
END;

CREATE TRIGGER messages_fts_delete BEFORE DELETE ON messages
WHEN old.id <= (SELECT upto FROM search_cursor WHERE name = 'messages') BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, system_text, user_text, assistant_text,
                              tool_text, tool_name, source, author, session)
    SELECT 'delete', id, system_text, user_text, assistant_text, tool_text, tool_name, source,
           author, session
    FROM messages_search WHERE id = old.id;
END;

CREATE TRIGGER messages_fts_update_old BEFORE UPDATE OF content, tool_name, role, session_no
ON messages
WHEN old.id <= (SELECT upto FROM search_cursor WHERE name = 'messages') BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, system_text, user_text, assistant_text,
                              tool_text, tool_name, source, author, session)
    SELECT 'delete', id, system_text, user_text, assistant_text, tool_text, tool_name, source,
           author, session
    FROM messages_search WHERE id = old.id;
END;

CREATE TRIGGER messages_fts_update_new AFTER UPDATE OF content, tool_name, role, session_no
ON messages
WHEN new.id <= (SELECT upto FROM search_cursor WHERE name = 'messages') BEGIN
    INSERT INTO messages_fts (rowid, system_text, user_text, assistant_text, tool_text,
                              tool_name, source, author, session)
    SELECT id, system_text, user_text, assistant_text, tool_text, tool_name, source, author,
           session
    FROM messages_search WHERE id = new.id;
END;

-- Before the row goes, while its messages can still be read through the view.
CREATE TRIGGER sessions_fts_delete BEFORE DELETE ON sessions BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, system_text, user_text, assistant_text,
                              tool_text, tool_name, source, author, session)
    SELECT 'delete', id, system_text, user_text, assistant_text, tool_text, tool_name, source,
           author, session
    FROM messages_search
    WHERE session_no = old.no
      AND id <= (SELECT upto FROM search_cursor WHERE name = 'messages');
END;

CREATE TRIGGER sessions_fts_update_old BEFORE UPDATE OF source, user_id ON sessions BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, system_text, user_text, assistant_text,
                              tool_text, tool_name, source, author, session)
    SELECT 'delete', id, system_text, user_text, assistant_text, tool_text, tool_name, source,
           author, session
    FROM messages_search
    WHERE session_no = old.no
      AND id <= (SELECT upto FROM search_cursor WHERE name = 'messages');
END;

CREATE TRIGGER sessions_fts_update_new AFTER UPDATE OF source, user_id ON sessions BEGIN
    INSERT INTO messages_fts (rowid, system_text, user_text, assistant_text, tool_text,
                              tool_name, source, author, session)
    SELECT id, system_text, user_text, assistant_text, tool_text, tool_name, source, author,
           session
    FROM messages_search
    WHERE session_no = new.no
      AND id <= (SELECT upto FROM search_cursor WHERE name = 'messages');
END;

-- Dedupe records: the platform's id of each inbound message answered, and when it came.
CREATE TABLE processed_inbound_new (
    platform    TEXT NOT NULL,
    message_id  TEXT NOT NULL,
    received_at INTEGER NOT NULL,
    PRIMARY KEY (platform, message_id)
) STRICT, WITHOUT ROWID;
INSERT INTO processed_inbound_new (platform, message_id, received_at)
SELECT platform, message_id, received_at FROM processed_inbound;
DROP TABLE processed_inbound;
ALTER TABLE processed_inbound_new RENAME TO processed_inbound;
