-- Version 2: a failed attempt is keyed by its place among its request's
-- attempts (`attempt`, 0-based), not by Hermes's `retry_count` alone.
-- Hermes 0.22 runs auto-recovery cycles after its retries: each re-enters
-- the retry loop with `retry_count` from 0 and the same `api_request_id`,
-- and each of those attempts went to the provider. `UNIQUE (api_request_id,
-- retry_count, ended_at)` keeps a call recorded twice (the same fired
-- event) one row; `attempt` is the span's place (`outbox.n`, `metric_log.n`).
-- Rows of version 1 keep their retry_count as their attempt.
CREATE TABLE llm_call_errors_v2 (
    id             INTEGER PRIMARY KEY,
    api_request_id TEXT NOT NULL,
    session_id     TEXT NOT NULL,
    turn_id        TEXT,
    attempt        INTEGER NOT NULL,
    retry_count    INTEGER NOT NULL,
    max_retries    INTEGER,
    status_code    INTEGER,
    retryable      INTEGER,
    reason         TEXT,
    error_type     TEXT,
    error_message  TEXT,
    model          TEXT,
    provider       TEXT,
    base_url       TEXT,
    started_at     REAL NOT NULL,
    ended_at       REAL NOT NULL,
    UNIQUE (api_request_id, attempt),
    UNIQUE (api_request_id, retry_count, ended_at)
);
INSERT INTO llm_call_errors_v2 (id, api_request_id, session_id, turn_id, attempt, retry_count, max_retries,
        status_code, retryable, reason, error_type, error_message, model, provider, base_url, started_at, ended_at)
    SELECT id, api_request_id, session_id, turn_id, retry_count, retry_count, max_retries, status_code,
           retryable, reason, error_type, error_message, model, provider, base_url, started_at, ended_at
      FROM llm_call_errors;
DROP TABLE llm_call_errors;
ALTER TABLE llm_call_errors_v2 RENAME TO llm_call_errors;
CREATE INDEX llm_call_errors_ended ON llm_call_errors (ended_at);
CREATE INDEX llm_call_errors_turn ON llm_call_errors (turn_id);
CREATE INDEX llm_call_errors_session ON llm_call_errors (session_id, ended_at);
CREATE TRIGGER metric_log_llm_error AFTER INSERT ON llm_call_errors BEGIN
    INSERT INTO metric_log (kind, session_id, key, n) VALUES (2, new.session_id, new.api_request_id, new.attempt);
END;
CREATE TRIGGER rollup_errors_in AFTER INSERT ON llm_call_errors BEGIN
    UPDATE report_rollup_state SET until = CAST(new.ended_at / 900 AS INTEGER) * 900
     WHERE until > new.ended_at;
END;
CREATE TRIGGER rollup_errors_change AFTER UPDATE ON llm_call_errors BEGIN
    UPDATE report_rollup_state SET until = CAST(MIN(old.ended_at, new.ended_at) / 900 AS INTEGER) * 900
     WHERE until > MIN(old.ended_at, new.ended_at);
END;
CREATE TRIGGER rollup_errors_out AFTER DELETE ON llm_call_errors BEGIN
    UPDATE report_rollup_state SET until = CAST(old.ended_at / 900 AS INTEGER) * 900
     WHERE until > old.ended_at;
END;

-- Also version 2: the first budget stop of a session (a tool call blocked
-- or an LLM call stopped by a budget, a cap or the runaway watch), its
-- text as the agent got it: the session span, `trace` and the viewer mark
-- the session stopped instead of showing it healthy.
ALTER TABLE runs ADD COLUMN budget_stop TEXT;
