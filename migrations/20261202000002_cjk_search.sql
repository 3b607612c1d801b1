-- Text without spaces between words (Chinese, Japanese, Korean) is one long token to the word
-- index, so its words cannot be found inside it. A trigram index beside the word index makes
-- any substring of three or more characters searchable. Only messages that contain such text
-- are indexed here, so the common case pays nothing. The GLOB class must match is_cjk() in
-- crates/herald-store/src/search.rs: U+2E80..U+9FFF (radicals, kana, ideographs),
-- U+AC00..U+D7AF (Hangul), U+F900..U+FAFF (compatibility ideographs).

CREATE VIRTUAL TABLE messages_cjk USING fts5 (
    content,
    content = 'messages',
    content_rowid = 'id',
    tokenize = 'trigram'
);

INSERT INTO messages_cjk (rowid, content)
SELECT id, content FROM messages WHERE content GLOB '*[⺀-鿿가-힯豈-﫿]*';

CREATE TRIGGER messages_cjk_insert AFTER INSERT ON messages
WHEN new.content GLOB '*[⺀-鿿가-힯豈-﫿]*' BEGIN
    INSERT INTO messages_cjk (rowid, content) VALUES (new.id, new.content);
END;

-- An external-content index must be told exactly what it indexed, so removal is gated the
-- same way as insertion.
CREATE TRIGGER messages_cjk_delete AFTER DELETE ON messages
WHEN old.content GLOB '*[⺀-鿿가-힯豈-﫿]*' BEGIN
    INSERT INTO messages_cjk (messages_cjk, rowid, content) VALUES ('delete', old.id, old.content);
END;

CREATE TRIGGER messages_cjk_update_old AFTER UPDATE OF content ON messages
WHEN old.content GLOB '*[⺀-鿿가-힯豈-﫿]*' BEGIN
    INSERT INTO messages_cjk (messages_cjk, rowid, content) VALUES ('delete', old.id, old.content);
END;

CREATE TRIGGER messages_cjk_update_new AFTER UPDATE OF content ON messages
WHEN new.content GLOB '*[⺀-鿿가-힯豈-﫿]*' BEGIN
    INSERT INTO messages_cjk (rowid, content) VALUES (new.id, new.content);
END;
