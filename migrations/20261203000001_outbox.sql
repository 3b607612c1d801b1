-- Replies stored with their turn but not yet accepted by their platform. A row is written in
-- the turn's own transaction and removed once the platform took the reply (or refused it for
-- good); a restart sends what is left, so a crash between storing and sending loses no reply.
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
