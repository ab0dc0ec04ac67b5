-- Schema version 3: metric state. Metrics are counted from the ledger,
-- exactly once across every process sharing the store:
--
--   ledger row finishes --(trigger, same transaction)--> metric_log row
--   fold (any process, one IMMEDIATE transaction):
--       metric_log rows -> ledger facts -> increments of metric_series;
--       the folded log rows are deleted in that same transaction
--   export (the lease holder) / `serve --prometheus`: read metric_series
--
-- Because the log row is written in the transaction that finishes the
-- ledger row, and consumed in the transaction that adds it to the series,
-- nothing is counted twice or lost, whichever processes write or fold.
-- metric_series only ever grows, so a cumulative value never goes back when
-- the exporting process changes.

-- Ledger rows that finished and are not yet folded into metric_series.
--   kind: 1 llm call, 2 failed attempt, 3 tool call, 4 turn, 5 session
--   key:  api_request_id, tool_call_id, turn_id or session_id
--   n:    retry_count for failed attempts, -1 otherwise
CREATE TABLE metric_log (
    seq        INTEGER PRIMARY KEY,
    kind       INTEGER NOT NULL,
    session_id TEXT NOT NULL,
    key        TEXT NOT NULL,
    n          INTEGER NOT NULL DEFAULT -1
);

-- Cumulative state per series: one row per (metric, attribute set).
--   attrs:   the attribute set as canonical JSON, [[key, value], ...] sorted
--            by key, values keeping their type (string, integer, boolean)
--   value:   the counter's sum, or the histogram's sum
--   count:   measurements added (the histogram's count)
--   buckets: the histogram's bucket counts as a JSON array, else NULL
CREATE TABLE metric_series (
    metric     TEXT NOT NULL,
    attrs      TEXT NOT NULL,
    value      REAL NOT NULL DEFAULT 0,
    count      INTEGER NOT NULL DEFAULT 0,
    buckets    TEXT,
    min        REAL,
    max        REAL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (metric, attrs)
) WITHOUT ROWID;

-- Gauges set from outside the ledger (budget spend and limit): the latest
-- value of each series, replaced as a whole by whoever computes them.
CREATE TABLE metric_gauges (
    metric     TEXT NOT NULL,
    attrs      TEXT NOT NULL,
    value      REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (metric, attrs)
) WITHOUT ROWID;

-- Sessions already counted in hermes.sessions (a session leaves `running`
-- once per turn; it is counted once, when it has settled).
CREATE TABLE metric_sessions (
    session_id TEXT PRIMARY KEY
) WITHOUT ROWID;

CREATE TRIGGER metric_log_llm_call AFTER INSERT ON llm_calls BEGIN
    INSERT INTO metric_log (kind, session_id, key) VALUES (1, new.session_id, new.api_request_id);
END;

CREATE TRIGGER metric_log_llm_error AFTER INSERT ON llm_call_errors BEGIN
    INSERT INTO metric_log (kind, session_id, key, n) VALUES (2, new.session_id, new.api_request_id, new.retry_count);
END;

-- Tool calls finish by an UPDATE (post_tool_call after pre_tool_call; an
-- upsert's DO UPDATE fires UPDATE triggers) or are inserted finished
-- (post_tool_call without pre_tool_call, subagent proxy rows).
CREATE TRIGGER metric_log_tool_inserted AFTER INSERT ON tool_calls WHEN new.ended_at IS NOT NULL BEGIN
    INSERT INTO metric_log (kind, session_id, key) VALUES (3, new.session_id, new.tool_call_id);
END;

CREATE TRIGGER metric_log_tool_ended AFTER UPDATE OF ended_at ON tool_calls
WHEN old.ended_at IS NULL AND new.ended_at IS NOT NULL BEGIN
    INSERT INTO metric_log (kind, session_id, key) VALUES (3, new.session_id, new.tool_call_id);
END;

CREATE TRIGGER metric_log_turn_inserted AFTER INSERT ON turns WHEN new.outcome IS NOT NULL BEGIN
    INSERT INTO metric_log (kind, session_id, key) VALUES (4, new.session_id, new.turn_id);
END;

CREATE TRIGGER metric_log_turn_ended AFTER UPDATE OF outcome ON turns
WHEN old.outcome IS NULL AND new.outcome IS NOT NULL BEGIN
    INSERT INTO metric_log (kind, session_id, key) VALUES (4, new.session_id, new.turn_id);
END;

CREATE TRIGGER metric_log_run_ended AFTER UPDATE OF status ON runs
WHEN old.status = 'running' AND new.status != 'running' BEGIN
    INSERT INTO metric_log (kind, session_id, key) VALUES (5, new.session_id, new.session_id);
END;

-- A store that already has a ledger counts its history too.
INSERT INTO metric_log (kind, session_id, key) SELECT 1, session_id, api_request_id FROM llm_calls;
INSERT INTO metric_log (kind, session_id, key, n)
    SELECT 2, session_id, api_request_id, retry_count FROM llm_call_errors ORDER BY id;
INSERT INTO metric_log (kind, session_id, key) SELECT 3, session_id, tool_call_id FROM tool_calls WHERE ended_at IS NOT NULL;
INSERT INTO metric_log (kind, session_id, key) SELECT 4, session_id, turn_id FROM turns WHERE outcome IS NOT NULL;
INSERT INTO metric_log (kind, session_id, key) SELECT 5, session_id, session_id FROM runs WHERE status != 'running';

-- The start of every cumulative series (the first event the store knows of,
-- or now) and the stable service.instance.id of this store.
INSERT OR IGNORE INTO meta (key, value)
    SELECT 'metrics.start_time', CAST(COALESCE(MIN(started_at), (julianday('now') - 2440587.5) * 86400.0) AS TEXT) FROM runs;
INSERT OR IGNORE INTO meta (key, value) VALUES ('metrics.instance_id', lower(hex(randomblob(16))));
