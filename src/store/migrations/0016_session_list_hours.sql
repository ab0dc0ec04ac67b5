-- The viewer's index at a year's store (issue 18): its totals (every
-- session the filter selects, not only the page) summed the whole `runs`
-- table on each request, 250 ms warm and a minute cold at a million
-- sessions; sorting by cost or duration sorted all of it.
--
-- `run_hours` keeps those totals per UTC hour a run started in and per
-- value of the filters the index offers (platform, cron job, sender,
-- model; '' where the run has none), kept exact by triggers in the same
-- transaction that changes a run: the index reads whole hours here and
-- only the edges of a window that does not start or end on an hour (zones
-- such as +5:45) from `runs`. The list shows input tokens with cache reads
-- and writes, so the table keeps that sum.
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
    hour          INTEGER NOT NULL,
    platform      TEXT NOT NULL,
    cron_job_id   TEXT NOT NULL,
    sender_id     TEXT NOT NULL,
    model         TEXT NOT NULL,
    sessions      INTEGER NOT NULL,
    llm_calls     INTEGER NOT NULL,
    input_tokens  INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    cost_usd      REAL NOT NULL,
    api_errors    INTEGER NOT NULL,
    PRIMARY KEY (hour, platform, cron_job_id, sender_id, model)
) WITHOUT ROWID;

INSERT INTO run_hours
SELECT CAST(started_at / 3600 AS INTEGER) * 3600, COALESCE(platform, ''), COALESCE(cron_job_id, ''),
       COALESCE(sender_id, ''), COALESCE(model, ''), COUNT(*), SUM(llm_calls),
       SUM(input_tokens + cache_read_tokens + cache_write_tokens), SUM(output_tokens), SUM(cost_usd),
       SUM(api_errors)
  FROM runs
 GROUP BY 1, 2, 3, 4, 5;

CREATE TRIGGER run_hours_in AFTER INSERT ON runs BEGIN
    INSERT INTO run_hours VALUES (
        CAST(new.started_at / 3600 AS INTEGER) * 3600, COALESCE(new.platform, ''), COALESCE(new.cron_job_id, ''),
        COALESCE(new.sender_id, ''), COALESCE(new.model, ''), 1, new.llm_calls,
        new.input_tokens + new.cache_read_tokens + new.cache_write_tokens, new.output_tokens, new.cost_usd,
        new.api_errors)
    ON CONFLICT DO UPDATE SET sessions = sessions + 1, llm_calls = llm_calls + excluded.llm_calls,
        input_tokens = input_tokens + excluded.input_tokens, output_tokens = output_tokens + excluded.output_tokens,
        cost_usd = cost_usd + excluded.cost_usd, api_errors = api_errors + excluded.api_errors;
END;

-- (A row left at zero sessions stays: no read counts it.)
CREATE TRIGGER run_hours_out AFTER DELETE ON runs BEGIN
    UPDATE run_hours SET sessions = sessions - 1, llm_calls = llm_calls - old.llm_calls,
        input_tokens = input_tokens - (old.input_tokens + old.cache_read_tokens + old.cache_write_tokens),
        output_tokens = output_tokens - old.output_tokens, cost_usd = cost_usd - old.cost_usd,
        api_errors = api_errors - old.api_errors
     WHERE hour = CAST(old.started_at / 3600 AS INTEGER) * 3600 AND platform = COALESCE(old.platform, '')
       AND cron_job_id = COALESCE(old.cron_job_id, '') AND sender_id = COALESCE(old.sender_id, '')
       AND model = COALESCE(old.model, '');
END;

-- The common change: a run's sums grow with a call, its key stays. One
-- update of one row.
CREATE TRIGGER run_hours_sums
  AFTER UPDATE OF llm_calls, input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, cost_usd,
                  api_errors ON runs
  WHEN CAST(old.started_at / 3600 AS INTEGER) = CAST(new.started_at / 3600 AS INTEGER)
   AND old.platform IS new.platform AND old.cron_job_id IS new.cron_job_id
   AND old.sender_id IS new.sender_id AND old.model IS new.model BEGIN
    UPDATE run_hours SET llm_calls = llm_calls + new.llm_calls - old.llm_calls,
        input_tokens = input_tokens + (new.input_tokens + new.cache_read_tokens + new.cache_write_tokens)
                                    - (old.input_tokens + old.cache_read_tokens + old.cache_write_tokens),
        output_tokens = output_tokens + new.output_tokens - old.output_tokens,
        cost_usd = cost_usd + new.cost_usd - old.cost_usd, api_errors = api_errors + new.api_errors - old.api_errors
     WHERE hour = CAST(new.started_at / 3600 AS INTEGER) * 3600 AND platform = COALESCE(new.platform, '')
       AND cron_job_id = COALESCE(new.cron_job_id, '') AND sender_id = COALESCE(new.sender_id, '')
       AND model = COALESCE(new.model, '');
END;

-- A run whose start or filter values change (a later event names its
-- platform or model, or an earlier one moves its start) moves to its new
-- row.
CREATE TRIGGER run_hours_moved
  AFTER UPDATE OF started_at, platform, cron_job_id, sender_id, model ON runs
  WHEN CAST(old.started_at / 3600 AS INTEGER) != CAST(new.started_at / 3600 AS INTEGER)
    OR old.platform IS NOT new.platform OR old.cron_job_id IS NOT new.cron_job_id
    OR old.sender_id IS NOT new.sender_id OR old.model IS NOT new.model BEGIN
    INSERT INTO run_hours
    SELECT * FROM (VALUES
        (CAST(old.started_at / 3600 AS INTEGER) * 3600, COALESCE(old.platform, ''), COALESCE(old.cron_job_id, ''),
         COALESCE(old.sender_id, ''), COALESCE(old.model, ''), -1, -old.llm_calls,
         -(old.input_tokens + old.cache_read_tokens + old.cache_write_tokens), -old.output_tokens, -old.cost_usd,
         -old.api_errors),
        (CAST(new.started_at / 3600 AS INTEGER) * 3600, COALESCE(new.platform, ''), COALESCE(new.cron_job_id, ''),
         COALESCE(new.sender_id, ''), COALESCE(new.model, ''), 1, new.llm_calls,
         new.input_tokens + new.cache_read_tokens + new.cache_write_tokens, new.output_tokens, new.cost_usd,
         new.api_errors))
     WHERE true
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
