-- Schema version 8: a session's span goes out once per stretch of the
-- session and is never sent again (semconv/docs/continuations.md).
--   runs.span_n           the session span being recorded now: 0 is the
--                         session's root span (its id hashes the session
--                         id), 1, 2, ... are continuations under it, opened
--                         when the session goes on after its span was sent
--                         (a resumed session in a new process, a turn after
--                         the grace period, a gateway conversation).
--   runs.span_started_at  when continuation span_n began (its first turn);
--                         NULL until it has one, and for the root span,
--                         which starts with the run.
--   runs.span_base_*      the run's totals when the previous session span
--                         was sent: a continuation reports what was added
--                         since (input includes cache reads and writes).
--   turns.span_n          the session span a turn hangs under.
--   runs.close_reason     why hermes-meter closed the run itself:
--                         'idle_timeout' (no event for the idle timeout) or
--                         'process_exit' (its process exited with it open,
--                         e.g. a background subagent cut off); NULL when
--                         Hermes closed it.
ALTER TABLE runs ADD COLUMN span_n INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN span_started_at REAL;
ALTER TABLE runs ADD COLUMN span_base_input INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN span_base_output INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN span_base_cost REAL NOT NULL DEFAULT 0;
ALTER TABLE turns ADD COLUMN span_n INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN close_reason TEXT;

-- Sessions whose span an earlier version already sent go on under it.
UPDATE runs SET span_n = 1,
       span_base_input = input_tokens + cache_read_tokens + cache_write_tokens,
       span_base_output = output_tokens, span_base_cost = cost_usd
 WHERE status != 'running'
   AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.kind = 1 AND o.session_id = runs.session_id);
-- Session rows in the outbox were keyed n = -1; they are root spans.
UPDATE OR REPLACE outbox SET n = 0 WHERE kind = 1;

-- A session span reads its session's last failed attempt; without this
-- index that scanned every error row once per session (issue 18).
CREATE INDEX llm_call_errors_session ON llm_call_errors (session_id, ended_at);

-- Approvals: a tool call waiting for a human (or Hermes's auxiliary model)
-- to approve its command (pre_approval_request .. post_approval_response).
--   key: the tool call id, else the turn id, else the pattern that asked.
--   choice: Hermes's answer (once, session, always, deny, timeout,
--           smart_approve, smart_deny); NULL while waiting.
CREATE TABLE approvals (
    session_id   TEXT NOT NULL,
    key          TEXT NOT NULL,
    turn_id      TEXT,
    tool_call_id TEXT,
    surface      TEXT,
    pattern_key  TEXT,
    started_at   REAL NOT NULL,
    ended_at     REAL,
    choice       TEXT,
    decided_by   TEXT,
    PRIMARY KEY (session_id, key)
) WITHOUT ROWID;

-- Auxiliary LLM calls (titles, compression, vision, ...; Hermes's
-- post_auxiliary_call, or its own auxiliary accounting on 0.19.0) are LLM
-- calls like the others, marked with their task; NULL for a turn's calls.
ALTER TABLE llm_calls ADD COLUMN aux_task TEXT;

-- The idle sweep runs every minute in every Hermes process; it must read
-- what is open, not every turn and request ever recorded (issue 18): open
-- turns (a small partial index), and a session's API requests.
CREATE INDEX turns_open ON turns (session_id) WHERE outcome IS NULL;
CREATE INDEX api_requests_session ON api_requests (session_id);
