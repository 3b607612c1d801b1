-- The word index learns what searches are narrowed by, so that narrowing is a lookup inside the
-- index instead of a join per match: a search for one user's messages among a million used to
-- walk every match of its words and look each one's session up.
--
-- * The text goes to one column per role (system_text, user_text, assistant_text, tool_text):
--   a role filter is a column filter, which costs nothing.
-- * source holds the session's platform; author and session hold the session's user id and
--   the session id as one token each ('u' or 's' and the hex of the id; none for a session
--   without a user), so that matching the token is matching the whole id exactly. Each of
--   these tokens starts with U+E000, a private-use character: the tokenizer keeps it in the
--   token (unicode61 counts private use as part of words) and the store takes it out of
--   whatever a person types, so typed words never match these columns and a search needs no
--   column filter unless it is narrowed by role.
--
-- The index reads its text through the view messages_search, and so do the triggers that keep
-- it current: values leave the index read through the view before a change (BEFORE triggers)
-- and enter it after. The session's columns come from sessions, so a session being deleted
-- takes its messages out of the index first, while the view still shows them.
--
-- The index is rebuilt by the deferred indexer: the cursor starts again at 0, and the first
-- search (or the background indexer) indexes every message again, in chunks.

DROP TRIGGER messages_fts_delete;
DROP TRIGGER messages_fts_update;
DROP TABLE messages_fts;
INSERT INTO messages_cjk (messages_cjk) VALUES ('delete-all');
UPDATE search_cursor SET upto = 0 WHERE name = 'messages';

CREATE VIEW messages_search AS
SELECT m.id,
       m.session_id,
       CASE m.role WHEN 'system' THEN m.content END AS system_text,
       CASE m.role WHEN 'user' THEN m.content END AS user_text,
       CASE m.role WHEN 'assistant' THEN m.content END AS assistant_text,
       CASE m.role WHEN 'tool' THEN m.content END AS tool_text,
       coalesce(m.tool_name, '') AS tool_name,
       char(57344) || s.source AS source,
       coalesce(char(57344) || 'u' || hex(s.user_id), '') AS author,
       char(57344) || 's' || hex(m.session_id) AS session
FROM messages m
JOIN sessions s ON s.id = m.session_id;

CREATE VIRTUAL TABLE messages_fts USING fts5 (
    system_text,
    user_text,
    assistant_text,
    tool_text,
    tool_name,
    source,
    author,
    session,
    content = 'messages_search',
    content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2'
);

-- Removal reads the indexed values through the view while the row is still there (BEFORE);
-- a message whose session is already gone (the cascade of a session delete) is not in the
-- view, and its session's trigger below took it out of the index already.
CREATE TRIGGER messages_fts_delete BEFORE DELETE ON messages
WHEN old.id <= (SELECT upto FROM search_cursor WHERE name = 'messages') BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, system_text, user_text, assistant_text,
                              tool_text, tool_name, source, author, session)
    SELECT 'delete', id, system_text, user_text, assistant_text, tool_text, tool_name, source,
           author, session
    FROM messages_search WHERE id = old.id;
END;

CREATE TRIGGER messages_fts_update_old BEFORE UPDATE OF content, tool_name, role, session_id
ON messages
WHEN old.id <= (SELECT upto FROM search_cursor WHERE name = 'messages') BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, system_text, user_text, assistant_text,
                              tool_text, tool_name, source, author, session)
    SELECT 'delete', id, system_text, user_text, assistant_text, tool_text, tool_name, source,
           author, session
    FROM messages_search WHERE id = old.id;
END;

CREATE TRIGGER messages_fts_update_new AFTER UPDATE OF content, tool_name, role, session_id
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
    WHERE session_id = old.id
      AND id <= (SELECT upto FROM search_cursor WHERE name = 'messages');
END;

CREATE TRIGGER sessions_fts_update_old BEFORE UPDATE OF source, user_id ON sessions BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, system_text, user_text, assistant_text,
                              tool_text, tool_name, source, author, session)
    SELECT 'delete', id, system_text, user_text, assistant_text, tool_text, tool_name, source,
           author, session
    FROM messages_search
    WHERE session_id = old.id
      AND id <= (SELECT upto FROM search_cursor WHERE name = 'messages');
END;

CREATE TRIGGER sessions_fts_update_new AFTER UPDATE OF source, user_id ON sessions BEGIN
    INSERT INTO messages_fts (rowid, system_text, user_text, assistant_text, tool_text,
                              tool_name, source, author, session)
    SELECT id, system_text, user_text, assistant_text, tool_text, tool_name, source, author,
           session
    FROM messages_search
    WHERE session_id = new.id
      AND id <= (SELECT upto FROM search_cursor WHERE name = 'messages');
END;
