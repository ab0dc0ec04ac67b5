-- Schema version 5: budget state.
-- Spend rollups, reservations of calls in flight, one-shot notices and
-- pauses, verdict counts, alerts.
--
-- Every table here is read by the gating hooks through its primary key or a
-- bounded range of it, so a verdict costs the same with a thousand or a
-- million llm_calls rows.

-- Settled spend by scope id and UTC bucket, written in the transaction that
-- records the LLM call. Every call is added to one bucket of each level
-- (0: 15 minutes, 1: one hour, 2: one UTC day), so any window in any time
-- zone (all offsets in use are multiples of 15 minutes) is the sum of at
-- most 3 + 23 + 31 + 23 + 3 rows (see budget::bucket_ranges).
--   scope: global, cron, sender, profile, model; id: '' for global
--   bucket: the bucket's start, Unix seconds
--   estimated_usd: the part of cost_usd whose usage was estimated
CREATE TABLE budget_spend (
    scope         TEXT NOT NULL,
    id            TEXT NOT NULL,
    level         INTEGER NOT NULL,
    bucket        INTEGER NOT NULL,
    cost_usd      REAL NOT NULL DEFAULT 0,
    estimated_usd REAL NOT NULL DEFAULT 0,
    calls         INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (scope, id, level, bucket)
) WITHOUT ROWID;

-- Settled spend per calendar period, for the time zones budgets are
-- configured in: the gating hooks read one row per budget instead of
-- summing buckets. A zone is registered (with its current periods filled
-- from budget_spend) in one transaction, and from then on every LLM call
-- adds its cost to the period it falls in, for every registered zone, in
-- the transaction that records it: the totals are exact across processes.
--   win: daily, weekly, monthly; period: the period's start, Unix seconds
CREATE TABLE budget_period (
    scope         TEXT NOT NULL,
    id            TEXT NOT NULL,
    zone          TEXT NOT NULL,
    win           TEXT NOT NULL,
    period        INTEGER NOT NULL,
    cost_usd      REAL NOT NULL DEFAULT 0,
    estimated_usd REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (scope, id, zone, win, period)
) WITHOUT ROWID;

-- The IANA zones budget_period is kept for.
CREATE TABLE budget_zones (
    zone          TEXT PRIMARY KEY,
    registered_at REAL NOT NULL
) WITHOUT ROWID;

-- The estimated cost of each LLM call in flight, per scope id it counts
-- toward: added at pre_api_request, removed at post_api_request or
-- api_request_error. Rows of dead processes stop counting after a TTL.
CREATE TABLE budget_reservations (
    scope          TEXT NOT NULL,
    id             TEXT NOT NULL,
    api_request_id TEXT NOT NULL,
    amount_usd     REAL NOT NULL,
    at             REAL NOT NULL,
    PRIMARY KEY (scope, id, api_request_id)
) WITHOUT ROWID;
CREATE INDEX budget_reservations_request ON budget_reservations (api_request_id);

-- Things done once per (scope, id, window, period) across every process:
-- kind 'pause' (a cron job paused). The first INSERT wins.
CREATE TABLE budget_once (
    kind       TEXT NOT NULL,
    scope      TEXT NOT NULL,
    id         TEXT NOT NULL,
    win        TEXT NOT NULL,
    period     TEXT NOT NULL,
    at         REAL NOT NULL,
    session_id TEXT,
    PRIMARY KEY (kind, scope, id, win, period)
) WITHOUT ROWID;

-- How many verdicts of each kind were given (soft, hard, blocked, paused).
CREATE TABLE budget_verdicts (
    verdict TEXT PRIMARY KEY,
    count   INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- One-shot alerts, shown once through a pre_llm_call context.
--   kind: free_to_paid, model_unavailable, budget_soft, budget_hard
--   key:  the model, or scope|id|window|period for budget alerts
--   count: occurrences (model_unavailable counts every 404)
--   delivered_at: when a pre_llm_call showed it; NULL while pending
CREATE TABLE alerts (
    kind         TEXT NOT NULL,
    key          TEXT NOT NULL,
    text         TEXT NOT NULL,
    count        INTEGER NOT NULL DEFAULT 1,
    first_at     REAL NOT NULL,
    last_at      REAL NOT NULL,
    delivered_at REAL,
    delivered_to TEXT,
    PRIMARY KEY (kind, key)
) WITHOUT ROWID;
CREATE INDEX alerts_pending ON alerts (first_at) WHERE delivered_at IS NULL;

-- When each model (":free" suffix dropped) was first seen free and first
-- seen costing money, for the free-to-paid alert.
CREATE TABLE budget_models (
    model   TEXT PRIMARY KEY,
    free_at REAL,
    paid_at REAL
) WITHOUT ROWID;

-- A store that already has a ledger: its spend, rolled up. Attribution is
-- the root session's cron job, sender and profile, and the call's model.
CREATE TEMP TABLE budget_backfill AS
    SELECT l.ended_at AS at, l.cost_usd AS cost, CASE WHEN l.estimated THEN l.cost_usd ELSE 0 END AS est,
           r.cron_job_id AS cron, NULLIF(r.sender_id, '') AS sender, COALESCE(r.profile, 'default') AS profile,
           NULLIF(l.model, '') AS model
    FROM llm_calls l
    LEFT JOIN runs s ON s.session_id = l.session_id
    LEFT JOIN runs r ON r.session_id = COALESCE(s.root_session_id, l.session_id);
CREATE TEMP TABLE budget_levels (level INTEGER, width INTEGER);
INSERT INTO budget_levels VALUES (0, 900), (1, 3600), (2, 86400);
INSERT INTO budget_spend (scope, id, level, bucket, cost_usd, estimated_usd, calls)
    SELECT scope, id, level, bucket, SUM(cost), SUM(est), COUNT(*) FROM (
        SELECT 'global' AS scope, '' AS id, level, (CAST(at AS INTEGER) / width) * width AS bucket, cost, est
            FROM budget_backfill, budget_levels
        UNION ALL SELECT 'cron', cron, level, (CAST(at AS INTEGER) / width) * width, cost, est
            FROM budget_backfill, budget_levels WHERE cron IS NOT NULL
        UNION ALL SELECT 'sender', sender, level, (CAST(at AS INTEGER) / width) * width, cost, est
            FROM budget_backfill, budget_levels WHERE sender IS NOT NULL
        UNION ALL SELECT 'profile', profile, level, (CAST(at AS INTEGER) / width) * width, cost, est
            FROM budget_backfill, budget_levels
        UNION ALL SELECT 'model', model, level, (CAST(at AS INTEGER) / width) * width, cost, est
            FROM budget_backfill, budget_levels WHERE model IS NOT NULL
    ) GROUP BY scope, id, level, bucket;
DROP TABLE budget_backfill;
DROP TABLE budget_levels;
