-- Inbound messages that arrived while their session was running a turn (busy_input = "queue").
-- They are kept here, not in messages, until their turn starts: a message is appended to a
-- session's history only when the agent is about to answer it, so the history stays in the
-- order the model saw it. Their ids are recorded in processed_inbound at once (dedupe), and a
-- restart re-queues what is left here in arrival order.
CREATE TABLE inbound_queue (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    platform    TEXT NOT NULL,
    message_id  TEXT NOT NULL,
    session_key TEXT NOT NULL,
    chat_id     TEXT NOT NULL,
    thread_id   TEXT,
    chat_kind   TEXT NOT NULL,
    user_id     TEXT NOT NULL,
    user_name   TEXT,
    content     TEXT NOT NULL,
    received_at INTEGER NOT NULL,
    UNIQUE (platform, message_id)
) STRICT;
