-- The viewer's index at a year's store (issue 18): its totals (every
-- session the filter selects, not only the page) summed the whole `runs`
-- table on each request, 250 ms warm and a minute cold at a million
-- sessions; sorting by cost or duration sorted all of it.
--
-- `run_hours` keeps those totals per UTC hour a run started in: for the
-- whole store (dim 0, value '') and per value of each filter the index
-- offers (dim 1 platform, 2 cron job, 3 sender, 4 model; a run without one
-- has no row there). One row per value, not per combination, so a gateway
-- with many senders does not make a row per session. Triggers keep it
-- exact in the transaction that changes a run, each with one statement:
-- signed sums for the run's rows. The index reads whole hours here and
-- only the edges of a window that does not start or end on an hour (zones
-- such as +5:45) from `runs`; a filter of two values reads the hours of
-- the rarer one and sums those hours' runs. The list shows input tokens
-- with cache reads and writes, so the table keeps that sum. A row whose
-- runs all moved or went stays, at zero.
--
-- It can run again on a store that has it (as the migrations since 13
-- can): it starts from nothing of its own.
DROP TRIGGER IF EXISTS run_hours_in;
DROP TRIGGER IF EXISTS run_hours_out;
DROP TRIGGER IF EXISTS run_hours_sums;
DROP TRIGGER IF EXISTS run_hours_moved;
DROP INDEX IF EXISTS runs_duration;
DROP TABLE IF EXISTS run_hours;
CREATE TABLE run_hours (
    dim           INTEGER NOT NULL,
    value         TEXT NOT NULL,
    hour          INTEGER NOT NULL,
    sessions      INTEGER NOT NULL,
    llm_calls     INTEGER NOT NULL,
    input_tokens  INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    cost_usd      REAL NOT NULL,
    api_errors    INTEGER NOT NULL,
    PRIMARY KEY (dim, value, hour)
) WITHOUT ROWID;

INSERT INTO run_hours
SELECT 0, '', CAST(started_at / 3600 AS INTEGER) * 3600, COUNT(*), SUM(llm_calls),
       SUM(input_tokens + cache_read_tokens + cache_write_tokens), SUM(output_tokens), SUM(cost_usd), SUM(api_errors)
  FROM runs
 GROUP BY 2, 3;

INSERT INTO run_hours
SELECT 1, platform, CAST(started_at / 3600 AS INTEGER) * 3600, COUNT(*), SUM(llm_calls),
       SUM(input_tokens + cache_read_tokens + cache_write_tokens), SUM(output_tokens), SUM(cost_usd), SUM(api_errors)
  FROM runs
 WHERE platform IS NOT NULL AND platform != ''
 GROUP BY 2, 3;

INSERT INTO run_hours
SELECT 2, cron_job_id, CAST(started_at / 3600 AS INTEGER) * 3600, COUNT(*), SUM(llm_calls),
       SUM(input_tokens + cache_read_tokens + cache_write_tokens), SUM(output_tokens), SUM(cost_usd), SUM(api_errors)
  FROM runs
 WHERE cron_job_id IS NOT NULL AND cron_job_id != ''
 GROUP BY 2, 3;

INSERT INTO run_hours
SELECT 3, sender_id, CAST(started_at / 3600 AS INTEGER) * 3600, COUNT(*), SUM(llm_calls),
       SUM(input_tokens + cache_read_tokens + cache_write_tokens), SUM(output_tokens), SUM(cost_usd), SUM(api_errors)
  FROM runs
 WHERE sender_id IS NOT NULL AND sender_id != ''
 GROUP BY 2, 3;

INSERT INTO run_hours
SELECT 4, model, CAST(started_at / 3600 AS INTEGER) * 3600, COUNT(*), SUM(llm_calls),
       SUM(input_tokens + cache_read_tokens + cache_write_tokens), SUM(output_tokens), SUM(cost_usd), SUM(api_errors)
  FROM runs
 WHERE model IS NOT NULL AND model != ''
 GROUP BY 2, 3;

CREATE TRIGGER run_hours_in AFTER INSERT ON runs BEGIN
    INSERT INTO run_hours
    SELECT * FROM (VALUES
        (0, '', CAST(new.started_at / 3600 AS INTEGER) * 3600, 1, new.llm_calls, (new.input_tokens + new.cache_read_tokens + new.cache_write_tokens), new.output_tokens, new.cost_usd, new.api_errors),
        (1, COALESCE(new.platform, ''), CAST(new.started_at / 3600 AS INTEGER) * 3600, 1, new.llm_calls, (new.input_tokens + new.cache_read_tokens + new.cache_write_tokens), new.output_tokens, new.cost_usd, new.api_errors),
        (2, COALESCE(new.cron_job_id, ''), CAST(new.started_at / 3600 AS INTEGER) * 3600, 1, new.llm_calls, (new.input_tokens + new.cache_read_tokens + new.cache_write_tokens), new.output_tokens, new.cost_usd, new.api_errors),
        (3, COALESCE(new.sender_id, ''), CAST(new.started_at / 3600 AS INTEGER) * 3600, 1, new.llm_calls, (new.input_tokens + new.cache_read_tokens + new.cache_write_tokens), new.output_tokens, new.cost_usd, new.api_errors),
        (4, COALESCE(new.model, ''), CAST(new.started_at / 3600 AS INTEGER) * 3600, 1, new.llm_calls, (new.input_tokens + new.cache_read_tokens + new.cache_write_tokens), new.output_tokens, new.cost_usd, new.api_errors))
     WHERE column1 = 0 OR column2 != ''
    ON CONFLICT DO UPDATE SET sessions = sessions + excluded.sessions, llm_calls = llm_calls + excluded.llm_calls,
        input_tokens = input_tokens + excluded.input_tokens, output_tokens = output_tokens + excluded.output_tokens,
        cost_usd = cost_usd + excluded.cost_usd, api_errors = api_errors + excluded.api_errors;
END;

CREATE TRIGGER run_hours_out AFTER DELETE ON runs BEGIN
    INSERT INTO run_hours
    SELECT * FROM (VALUES
        (0, '', CAST(old.started_at / 3600 AS INTEGER) * 3600, -1, -old.llm_calls, -(old.input_tokens + old.cache_read_tokens + old.cache_write_tokens), -old.output_tokens, -old.cost_usd, -old.api_errors),
        (1, COALESCE(old.platform, ''), CAST(old.started_at / 3600 AS INTEGER) * 3600, -1, -old.llm_calls, -(old.input_tokens + old.cache_read_tokens + old.cache_write_tokens), -old.output_tokens, -old.cost_usd, -old.api_errors),
        (2, COALESCE(old.cron_job_id, ''), CAST(old.started_at / 3600 AS INTEGER) * 3600, -1, -old.llm_calls, -(old.input_tokens + old.cache_read_tokens + old.cache_write_tokens), -old.output_tokens, -old.cost_usd, -old.api_errors),
        (3, COALESCE(old.sender_id, ''), CAST(old.started_at / 3600 AS INTEGER) * 3600, -1, -old.llm_calls, -(old.input_tokens + old.cache_read_tokens + old.cache_write_tokens), -old.output_tokens, -old.cost_usd, -old.api_errors),
        (4, COALESCE(old.model, ''), CAST(old.started_at / 3600 AS INTEGER) * 3600, -1, -old.llm_calls, -(old.input_tokens + old.cache_read_tokens + old.cache_write_tokens), -old.output_tokens, -old.cost_usd, -old.api_errors))
     WHERE column1 = 0 OR column2 != ''
    ON CONFLICT DO UPDATE SET sessions = sessions + excluded.sessions, llm_calls = llm_calls + excluded.llm_calls,
        input_tokens = input_tokens + excluded.input_tokens, output_tokens = output_tokens + excluded.output_tokens,
        cost_usd = cost_usd + excluded.cost_usd, api_errors = api_errors + excluded.api_errors;
END;

-- The common change: a run's sums grow with a call, its hour and values
-- stay.
CREATE TRIGGER run_hours_sums
  AFTER UPDATE OF llm_calls, input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, cost_usd,
                  api_errors ON runs
  WHEN CAST(old.started_at / 3600 AS INTEGER) = CAST(new.started_at / 3600 AS INTEGER)
   AND old.platform IS new.platform AND old.cron_job_id IS new.cron_job_id
   AND old.sender_id IS new.sender_id AND old.model IS new.model BEGIN
    INSERT INTO run_hours
    SELECT * FROM (VALUES
        (0, '', CAST(new.started_at / 3600 AS INTEGER) * 3600, 0,
         new.llm_calls - old.llm_calls, (new.input_tokens + new.cache_read_tokens + new.cache_write_tokens) - (old.input_tokens + old.cache_read_tokens + old.cache_write_tokens), new.output_tokens - old.output_tokens, new.cost_usd - old.cost_usd, new.api_errors - old.api_errors),
        (1, COALESCE(new.platform, ''), CAST(new.started_at / 3600 AS INTEGER) * 3600, 0,
         new.llm_calls - old.llm_calls, (new.input_tokens + new.cache_read_tokens + new.cache_write_tokens) - (old.input_tokens + old.cache_read_tokens + old.cache_write_tokens), new.output_tokens - old.output_tokens, new.cost_usd - old.cost_usd, new.api_errors - old.api_errors),
        (2, COALESCE(new.cron_job_id, ''), CAST(new.started_at / 3600 AS INTEGER) * 3600, 0,
         new.llm_calls - old.llm_calls, (new.input_tokens + new.cache_read_tokens + new.cache_write_tokens) - (old.input_tokens + old.cache_read_tokens + old.cache_write_tokens), new.output_tokens - old.output_tokens, new.cost_usd - old.cost_usd, new.api_errors - old.api_errors),
        (3, COALESCE(new.sender_id, ''), CAST(new.started_at / 3600 AS INTEGER) * 3600, 0,
         new.llm_calls - old.llm_calls, (new.input_tokens + new.cache_read_tokens + new.cache_write_tokens) - (old.input_tokens + old.cache_read_tokens + old.cache_write_tokens), new.output_tokens - old.output_tokens, new.cost_usd - old.cost_usd, new.api_errors - old.api_errors),
        (4, COALESCE(new.model, ''), CAST(new.started_at / 3600 AS INTEGER) * 3600, 0,
         new.llm_calls - old.llm_calls, (new.input_tokens + new.cache_read_tokens + new.cache_write_tokens) - (old.input_tokens + old.cache_read_tokens + old.cache_write_tokens), new.output_tokens - old.output_tokens, new.cost_usd - old.cost_usd, new.api_errors - old.api_errors))
     WHERE column1 = 0 OR column2 != ''
    ON CONFLICT DO UPDATE SET llm_calls = llm_calls + excluded.llm_calls,
        input_tokens = input_tokens + excluded.input_tokens, output_tokens = output_tokens + excluded.output_tokens,
        cost_usd = cost_usd + excluded.cost_usd, api_errors = api_errors + excluded.api_errors;
END;

-- A run whose start or filter values change (a later event names its
-- platform or model, or an earlier one moves its start) moves to its new
-- rows.
CREATE TRIGGER run_hours_moved
  AFTER UPDATE OF started_at, platform, cron_job_id, sender_id, model ON runs
  WHEN CAST(old.started_at / 3600 AS INTEGER) != CAST(new.started_at / 3600 AS INTEGER)
    OR old.platform IS NOT new.platform OR old.cron_job_id IS NOT new.cron_job_id
    OR old.sender_id IS NOT new.sender_id OR old.model IS NOT new.model BEGIN
    INSERT INTO run_hours
    SELECT * FROM (VALUES
        (0, '', CAST(old.started_at / 3600 AS INTEGER) * 3600, -1, -old.llm_calls, -(old.input_tokens + old.cache_read_tokens + old.cache_write_tokens), -old.output_tokens, -old.cost_usd, -old.api_errors),
        (1, COALESCE(old.platform, ''), CAST(old.started_at / 3600 AS INTEGER) * 3600, -1, -old.llm_calls, -(old.input_tokens + old.cache_read_tokens + old.cache_write_tokens), -old.output_tokens, -old.cost_usd, -old.api_errors),
        (2, COALESCE(old.cron_job_id, ''), CAST(old.started_at / 3600 AS INTEGER) * 3600, -1, -old.llm_calls, -(old.input_tokens + old.cache_read_tokens + old.cache_write_tokens), -old.output_tokens, -old.cost_usd, -old.api_errors),
        (3, COALESCE(old.sender_id, ''), CAST(old.started_at / 3600 AS INTEGER) * 3600, -1, -old.llm_calls, -(old.input_tokens + old.cache_read_tokens + old.cache_write_tokens), -old.output_tokens, -old.cost_usd, -old.api_errors),
        (4, COALESCE(old.model, ''), CAST(old.started_at / 3600 AS INTEGER) * 3600, -1, -old.llm_calls, -(old.input_tokens + old.cache_read_tokens + old.cache_write_tokens), -old.output_tokens, -old.cost_usd, -old.api_errors),
        (0, '', CAST(new.started_at / 3600 AS INTEGER) * 3600, 1, new.llm_calls, (new.input_tokens + new.cache_read_tokens + new.cache_write_tokens), new.output_tokens, new.cost_usd, new.api_errors),
        (1, COALESCE(new.platform, ''), CAST(new.started_at / 3600 AS INTEGER) * 3600, 1, new.llm_calls, (new.input_tokens + new.cache_read_tokens + new.cache_write_tokens), new.output_tokens, new.cost_usd, new.api_errors),
        (2, COALESCE(new.cron_job_id, ''), CAST(new.started_at / 3600 AS INTEGER) * 3600, 1, new.llm_calls, (new.input_tokens + new.cache_read_tokens + new.cache_write_tokens), new.output_tokens, new.cost_usd, new.api_errors),
        (3, COALESCE(new.sender_id, ''), CAST(new.started_at / 3600 AS INTEGER) * 3600, 1, new.llm_calls, (new.input_tokens + new.cache_read_tokens + new.cache_write_tokens), new.output_tokens, new.cost_usd, new.api_errors),
        (4, COALESCE(new.model, ''), CAST(new.started_at / 3600 AS INTEGER) * 3600, 1, new.llm_calls, (new.input_tokens + new.cache_read_tokens + new.cache_write_tokens), new.output_tokens, new.cost_usd, new.api_errors))
     WHERE column1 = 0 OR column2 != ''
    ON CONFLICT DO UPDATE SET sessions = sessions + excluded.sessions, llm_calls = llm_calls + excluded.llm_calls,
        input_tokens = input_tokens + excluded.input_tokens, output_tokens = output_tokens + excluded.output_tokens,
        cost_usd = cost_usd + excluded.cost_usd, api_errors = api_errors + excluded.api_errors;
END;

-- Sorting the index by cost walks this index; sessions of equal cost (all
-- the unpriced ones) follow each other newest first without a sort.
DROP INDEX runs_cost;
CREATE INDEX runs_cost ON runs (cost_usd, started_at);

-- Sorting by duration walks the settled runs' durations (a settled run's
-- duration no longer changes, so this costs the hook path nothing while a
-- run goes on) and adds the running ones (`runs_running`).
CREATE INDEX runs_duration ON runs (COALESCE(ended_at, last_event_at) - started_at, started_at)
 WHERE status != 'running';
