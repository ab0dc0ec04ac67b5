-- Schema version 2: the span outbox, export counters and the export lease.

-- One row per ledger row that finished and has a span to export. The hook
-- path adds rows in the transaction that finishes the ledger row; the
-- exporter deletes them once the collector accepted the batch.
--   kind: 1 run, 2 turn, 3 llm call, 4 failed attempt, 5 tool call,
--         6 attempt left open by a dead process
--   key:  session_id, turn_id, api_request_id or tool_call_id (tool call
--         ids repeat across sessions, hence session_id in the key)
--   n:    retry_count for failed attempts, -1 otherwise
--   hold: 1 when the span may still change (a session whose last turn
--         ended but which Hermes never finalizes); the exporter waits a
--         grace period after ready_at before sending it.
CREATE TABLE outbox (
    seq        INTEGER PRIMARY KEY,
    kind       INTEGER NOT NULL,
    session_id TEXT NOT NULL,
    key        TEXT NOT NULL,
    n          INTEGER NOT NULL DEFAULT -1,
    ready_at   REAL NOT NULL,
    hold       INTEGER NOT NULL DEFAULT 0,
    UNIQUE (kind, session_id, key, n)
);

-- Counters and last outcomes of the exporter (exported, dropped, ...).
CREATE TABLE export_state (
    key   TEXT PRIMARY KEY,
    value
) WITHOUT ROWID;

-- Who may export from this store: one holder at a time, until expires_at.
CREATE TABLE export_lease (
    name        TEXT PRIMARY KEY,
    holder      TEXT NOT NULL,
    pid         INTEGER,
    acquired_at REAL NOT NULL,
    expires_at  REAL NOT NULL
) WITHOUT ROWID;
