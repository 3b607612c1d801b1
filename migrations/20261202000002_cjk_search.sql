-- Text without spaces between words (Chinese, Japanese, Korean) is one long token to the word
-- index, so its words cannot be found inside it. A trigram index beside the word index makes
-- any substring of three or more characters searchable. Only messages that contain such text
-- are indexed here, so the common case pays nothing. Like the word index it is filled by the
-- store's deferred indexing (see search_cursor); the triggers maintain rows already indexed.
-- Which messages: those with messages.cjk = 1, set by the store from is_cjk() in
-- crates/herald-store/src/search.rs (U+2E80..U+9FFF radicals, kana and ideographs,
-- U+AC00..U+D7AF Hangul, U+F900..U+FAFF compatibility ideographs). Whoever changes a message's
-- content sets cjk with it.

CREATE VIRTUAL TABLE messages_cjk USING fts5 (
    content,
    content = 'messages',
    content_rowid = 'id',
    tokenize = 'trigram'
);

-- An external-content index must be told exactly what it indexed, so removal is gated the
-- same way as insertion: indexed already, and flagged.
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
