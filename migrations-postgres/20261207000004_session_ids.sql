-- Session ids compare byte by byte wherever they are kept, as sessions.id does: a join between
-- two collations can use no index on either side (finding a session's last message scanned
-- every message).
ALTER TABLE messages ALTER COLUMN session_id TYPE TEXT COLLATE "C";
ALTER TABLE routes ALTER COLUMN session_id TYPE TEXT COLLATE "C";
ALTER TABLE outbox ALTER COLUMN session_id TYPE TEXT COLLATE "C";
ALTER TABLE sessions ALTER COLUMN parent_session_id TYPE TEXT COLLATE "C";
