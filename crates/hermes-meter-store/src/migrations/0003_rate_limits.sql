-- Version 3: rate limits (`requests_per_minute`, `usd_per_hour`, ...).
--
-- rate_spend: what each scope id started, in 5-second (level 0, for
-- per-minute limits) and 1-minute (level 1, for per-hour limits) buckets:
-- requests, and the USD and tokens of their calls (the estimate a request
-- reserves when it starts, replaced by the call's use when it ends). A
-- bucket may lie ahead of now: a request that waits for its limit counts
-- from when it goes. Kept for two hours (the longest span, and slack).
CREATE TABLE rate_spend (
    scope         TEXT NOT NULL,
    id            TEXT NOT NULL,
    level         INTEGER NOT NULL,
    bucket        INTEGER NOT NULL,
    requests      INTEGER NOT NULL DEFAULT 0,
    usd           REAL NOT NULL DEFAULT 0,
    input_tokens  REAL NOT NULL DEFAULT 0,
    output_tokens REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (scope, id, level, bucket)
) WITHOUT ROWID;

-- rate_calls: where each open request was counted (one row per scope id),
-- so that its end replaces its estimate in the same buckets, a stop takes
-- it out and a wait moves it. Deleted when the request ends.
CREATE TABLE rate_calls (
    api_request_id TEXT NOT NULL,
    scope          TEXT NOT NULL,
    id             TEXT NOT NULL,
    at             REAL NOT NULL,
    usd            REAL NOT NULL,
    input_tokens   REAL NOT NULL,
    output_tokens  REAL NOT NULL,
    PRIMARY KEY (api_request_id, scope, id)
) WITHOUT ROWID;
CREATE INDEX rate_calls_at ON rate_calls (at);
