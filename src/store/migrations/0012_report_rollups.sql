-- Schema version 12: report rollups (issue 18).
--
-- `report` added up every fact of its window, so an all-time report grew
-- with everything ever recorded. These rollups hold the same sums per
-- quarter hour (level 0) and per UTC day (level 1), one row per grouping
-- and key, so a report reads a row per key and bucket instead.
--
-- They are a cache of the ledger, never a second truth: the writer's
-- sweep fills them from the ledger a few buckets at a time, up to
-- `report_rollup_state.until`. Any change to a fact or run before that
-- mark moves the mark back (the triggers below), so the buckets from
-- there on are rebuilt from the ledger before a report uses them; a
-- report reads rollups only below the mark and the ledger for the rest.
--
--   level  0: `bucket` is the start of a quarter hour (Unix seconds), so
--             days of every time zone (all offsets are whole quarter
--             hours) are unions of buckets; 1: the start of a UTC day,
--             the sum of that day's level-0 rows.
--   dim    0: the whole store (key ''); 1: model; 2: provider; 3: the
--             root session's sender; 4: its cron job; 5: calls the
--             provider billed itself, key model || x'1f' || provider
--   key    the grouping's value, '' where it is unknown
--   sessions
--          dims 0, 3, 4: sessions that started in the bucket (a
--          subagent counts under its root's sender and cron job);
--          dims 1, 2: sessions whose first fact with this model or
--          provider ended in the bucket
--   estimate_usd
--          dim 5: the price table's estimate of those calls
CREATE TABLE report_rollups (
    level               INTEGER NOT NULL,
    bucket              INTEGER NOT NULL,
    dim                 INTEGER NOT NULL,
    key                 TEXT NOT NULL,
    cost_usd            REAL NOT NULL,
    input_tokens        INTEGER NOT NULL,
    output_tokens       INTEGER NOT NULL,
    cache_read_tokens   INTEGER NOT NULL,
    cache_write_tokens  INTEGER NOT NULL,
    reasoning_tokens    INTEGER NOT NULL,
    llm_calls           INTEGER NOT NULL,
    estimated_llm_calls INTEGER NOT NULL,
    unpriced_llm_calls  INTEGER NOT NULL,
    aux_llm_calls       INTEGER NOT NULL,
    aux_cost_usd        REAL NOT NULL,
    api_errors          INTEGER NOT NULL,
    tool_calls          INTEGER NOT NULL,
    tool_failures       INTEGER NOT NULL,
    tool_nonzero_exits  INTEGER NOT NULL,
    sessions            INTEGER NOT NULL,
    estimate_usd        REAL NOT NULL,
    PRIMARY KEY (level, bucket, dim, key)
) WITHOUT ROWID;

-- The rollups hold every bucket before `until` (Unix seconds, a quarter
-- hour's start); 0 until the sweep first runs.
CREATE TABLE report_rollup_state (
    id    INTEGER PRIMARY KEY CHECK (id = 0),
    until INTEGER NOT NULL
);
INSERT INTO report_rollup_state (id, until) VALUES (0, 0);

-- A session's calls, for the rollups' first-use counts and a session's
-- totals in `report` (Hermes's request ids usually start with the session
-- id, but nothing promises it).
CREATE INDEX llm_calls_session ON llm_calls (session_id, ended_at);
-- What the provider billed is summed in the rollups (dim 5) now.
DROP INDEX llm_calls_provider_billed;
-- Sessions by what they cost: `report`'s most expensive sessions of a
-- long window without reading every run.
CREATE INDEX runs_cost ON runs (cost_usd);

-- Moving the mark back. A fact counts in the bucket it ended in; a run's
-- start, model, provider, sender, cron job or root change what its facts
-- (and its subagents' facts, which start after it) count under.
CREATE TRIGGER rollup_llm_calls_in AFTER INSERT ON llm_calls BEGIN
    UPDATE report_rollup_state SET until = CAST(new.ended_at / 900 AS INTEGER) * 900
     WHERE until > new.ended_at;
END;
CREATE TRIGGER rollup_llm_calls_change AFTER UPDATE ON llm_calls BEGIN
    UPDATE report_rollup_state SET until = CAST(MIN(old.ended_at, new.ended_at) / 900 AS INTEGER) * 900
     WHERE until > MIN(old.ended_at, new.ended_at);
END;
CREATE TRIGGER rollup_llm_calls_out AFTER DELETE ON llm_calls BEGIN
    UPDATE report_rollup_state SET until = CAST(old.ended_at / 900 AS INTEGER) * 900
     WHERE until > old.ended_at;
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
CREATE TRIGGER rollup_tools_in AFTER INSERT ON tool_calls WHEN new.ended_at IS NOT NULL BEGIN
    UPDATE report_rollup_state SET until = CAST(new.ended_at / 900 AS INTEGER) * 900
     WHERE until > new.ended_at;
END;
CREATE TRIGGER rollup_tools_change AFTER UPDATE ON tool_calls
  WHEN new.ended_at IS NOT NULL OR old.ended_at IS NOT NULL BEGIN
    UPDATE report_rollup_state
       SET until = CAST(MIN(COALESCE(old.ended_at, new.ended_at), COALESCE(new.ended_at, old.ended_at)) / 900 AS INTEGER) * 900
     WHERE until > MIN(COALESCE(old.ended_at, new.ended_at), COALESCE(new.ended_at, old.ended_at));
END;
CREATE TRIGGER rollup_tools_out AFTER DELETE ON tool_calls WHEN old.ended_at IS NOT NULL BEGIN
    UPDATE report_rollup_state SET until = CAST(old.ended_at / 900 AS INTEGER) * 900
     WHERE until > old.ended_at;
END;
CREATE TRIGGER rollup_runs_in AFTER INSERT ON runs BEGIN
    UPDATE report_rollup_state SET until = CAST(new.started_at / 900 AS INTEGER) * 900
     WHERE until > new.started_at;
END;
CREATE TRIGGER rollup_runs_change
  AFTER UPDATE OF started_at, model, provider, sender_id, cron_job_id, root_session_id ON runs
  WHEN old.started_at IS NOT new.started_at OR old.model IS NOT new.model OR old.provider IS NOT new.provider
    OR old.sender_id IS NOT new.sender_id OR old.cron_job_id IS NOT new.cron_job_id
    OR old.root_session_id IS NOT new.root_session_id BEGIN
    UPDATE report_rollup_state SET until = CAST(MIN(old.started_at, new.started_at) / 900 AS INTEGER) * 900
     WHERE until > MIN(old.started_at, new.started_at);
END;
CREATE TRIGGER rollup_runs_out AFTER DELETE ON runs BEGIN
    UPDATE report_rollup_state SET until = CAST(old.started_at / 900 AS INTEGER) * 900
     WHERE until > old.started_at;
END;
