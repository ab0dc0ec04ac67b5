-- The schema of a hermes-meter store, version 1 (`PRAGMA user_version`).
--
-- A store this build creates is marked with `PRAGMA application_id`
-- (`APPLICATION_ID` in lib.rs), so a file written by a pre-release
-- build, whose schema versions counted differently, is recognised and left
-- alone.
-- Later versions are new files in this directory, each run once, in order,
-- in its own transaction; this one is never edited once released.

-- The journal and the ledger.
-- Times are Unix seconds (REAL). Token counts are as Hermes reports them:
-- input_tokens excludes cache reads and writes; reasoning is part of output.
-- Every index is paid for on the hook path (each b-tree an event touches is
-- another page written per commit), so tables keyed by Hermes ids are
-- WITHOUT ROWID and only indexes a query on a hot path needs exist.
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;

-- Every hook event that was applied, append-only. event_key makes applying
-- the same event twice (a replayed file) a no-op.
CREATE TABLE journal (
    seq         INTEGER PRIMARY KEY,
    event_key   TEXT NOT NULL UNIQUE,
    hook        TEXT NOT NULL,
    session_id  TEXT NOT NULL,
    at          REAL NOT NULL,
    recorded_at REAL NOT NULL,
    pid         INTEGER,
    thread      TEXT,
    problems    INTEGER NOT NULL DEFAULT 0,
    payload     TEXT NOT NULL
);

-- Kwargs that had to be repaired, counted by hook, key and problem.
CREATE TABLE decode_problems (
    hook     TEXT NOT NULL,
    key      TEXT NOT NULL,
    what     TEXT NOT NULL,
    count    INTEGER NOT NULL,
    last_at  REAL NOT NULL,
    PRIMARY KEY (hook, key, what)
) WITHOUT ROWID;

-- One row per Hermes session, from its first event whichever it is.
CREATE TABLE runs (
    session_id          TEXT PRIMARY KEY,
    platform            TEXT,
    cron_job_id         TEXT,
    model               TEXT,
    provider            TEXT,
    base_url            TEXT,
    sender_id           TEXT,
    profile             TEXT,
    parent_session_id   TEXT,
    root_session_id     TEXT NOT NULL,
    started_at          REAL NOT NULL,
    ended_at            REAL,
    last_event_at       REAL NOT NULL,
    finalized_at        REAL,
    status              TEXT NOT NULL DEFAULT 'running',
    turns               INTEGER NOT NULL DEFAULT 0,
    input_tokens        INTEGER NOT NULL DEFAULT 0,
    output_tokens       INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens   INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens  INTEGER NOT NULL DEFAULT 0,
    reasoning_tokens    INTEGER NOT NULL DEFAULT 0,
    cost_usd            REAL NOT NULL DEFAULT 0,
    llm_calls           INTEGER NOT NULL DEFAULT 0,
    estimated_llm_calls INTEGER NOT NULL DEFAULT 0,
    unpriced_llm_calls  INTEGER NOT NULL DEFAULT 0,
    api_errors          INTEGER NOT NULL DEFAULT 0,
    tool_calls          INTEGER NOT NULL DEFAULT 0,
    tool_failures       INTEGER NOT NULL DEFAULT 0,
    -- Tool calls started (pre_tool_call, or a result without one), proxy
    -- rows aside: what a tool-call cap counts, kept for `cap_peaks`.
    started_tool_calls  INTEGER NOT NULL DEFAULT 0,
    -- A session's span goes out once per stretch of the
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
    span_n INTEGER NOT NULL DEFAULT 0,
    span_started_at REAL,
    span_base_input INTEGER NOT NULL DEFAULT 0,
    span_base_output INTEGER NOT NULL DEFAULT 0,
    span_base_cost REAL NOT NULL DEFAULT 0,
    close_reason TEXT
);
CREATE INDEX runs_root ON runs (root_session_id);
CREATE INDEX runs_started ON runs (started_at);
-- Open runs, for the idle sweep; only running rows are in it.
CREATE INDEX runs_running ON runs (last_event_at) WHERE status = 'running';
CREATE INDEX runs_settled ON runs (COALESCE(ended_at, last_event_at)) WHERE status != 'running';
CREATE INDEX runs_cost ON runs (cost_usd, started_at);
-- Sorting by duration walks the settled runs' durations (a settled run's
-- duration no longer changes, so this costs the hook path nothing while a
-- run goes on) and adds the running ones (`runs_running`).
CREATE INDEX runs_duration ON runs (COALESCE(ended_at, last_event_at) - started_at, started_at)
 WHERE status != 'running';

-- One row per turn (pre_llm_call to its end).
CREATE TABLE turns (
    turn_id       TEXT PRIMARY KEY,
    session_id    TEXT NOT NULL,
    task_id       TEXT,
    is_first_turn INTEGER,
    model         TEXT,
    started_at    REAL NOT NULL,
    ended_at      REAL,
    outcome       TEXT,
    span_n INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE INDEX turns_session ON turns (session_id);
-- The idle sweep runs every minute in every Hermes process; it must read
-- what is open, not every turn and request ever recorded: open
-- turns (a small partial index), and a session's API requests.
CREATE INDEX turns_open ON turns (session_id) WHERE outcome IS NULL;
CREATE INDEX turns_ended ON turns (ended_at) WHERE ended_at IS NOT NULL;

-- What pre_api_request said about each api_request_id (shared by retries):
-- the estimate for calls without usage, and when the latest attempt began.
CREATE TABLE api_requests (
    api_request_id      TEXT PRIMARY KEY,
    session_id          TEXT NOT NULL,
    turn_id             TEXT,
    approx_input_tokens INTEGER,
    message_count       INTEGER,
    tool_count          INTEGER,
    request_char_count  INTEGER,
    first_started_at    REAL,
    attempt_started_at  REAL NOT NULL,
    attempts            INTEGER NOT NULL DEFAULT 0,
    -- The attempt (0-based) of a request that hermes-meter closed itself,
    -- because its process exited or it went idle, and sent as a span then. A
    -- late success or error of that same attempt is still recorded in the
    -- ledger (it was spent), but its span is not sent again: a span goes out
    -- once.
    closed_attempt INTEGER,
    -- A call an llm_request middleware routed to another model than the
    -- agent's (a budget downgrade): the model it was sent to, from
    -- pre_api_request's request, kept here and then on the call, which is
    -- priced as that model. NULL for a call that went where the agent asked.
    routed_model TEXT
) WITHOUT ROWID;
CREATE INDEX api_requests_session ON api_requests (session_id);

-- One row per successful LLM API call.
CREATE TABLE llm_calls (
    api_request_id     TEXT PRIMARY KEY,
    session_id         TEXT NOT NULL,
    turn_id            TEXT,
    task_id            TEXT,
    model              TEXT,
    response_model     TEXT,
    provider           TEXT,
    base_url           TEXT,
    api_mode           TEXT,
    started_at         REAL NOT NULL,
    ended_at           REAL NOT NULL,
    latency_s          REAL,
    attempts           INTEGER NOT NULL DEFAULT 1,
    finish_reason      TEXT,
    input_tokens       INTEGER NOT NULL,
    output_tokens      INTEGER NOT NULL,
    cache_read_tokens  INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    reasoning_tokens   INTEGER NOT NULL,
    cost_usd           REAL NOT NULL,
    cost_source        TEXT NOT NULL,
    estimated          INTEGER NOT NULL DEFAULT 0,
    -- Auxiliary LLM calls (titles, compression, vision, ...; Hermes's
    -- post_auxiliary_call, or its own auxiliary accounting on 0.19.0) are LLM
    -- calls like the others, marked with their task; NULL for a turn's calls.
    aux_task TEXT,
    -- A cost the provider reported itself, and attempts
    -- hermes-meter closed.
    --   llm_calls.cost_usd     stays what the call is billed: the provider's
    --                          figure when its usage carried one (cost_source
    --                          'provider'), else the price table's.
    --   llm_calls.estimate_usd the price table's cost of the same usage, kept
    --                          beside a provider's figure so `report` can show
    --                          where the two disagree.
    estimate_usd REAL,
    -- When an LLM call's first token arrived (Unix seconds):
    -- Hermes main's first text delta of the successful attempt, else its first
    -- stream chunk (`first_delta_at`, `first_chunk_at` of post_api_request).
    -- NULL for a call that was not streamed or came from a Hermes that does
    -- not report it (0.19), so no time to first token is made up for it.
    first_token_at REAL,
    -- The model an llm_request middleware routed the call to (see
    -- api_requests.routed_model); the call is priced as it.
    routed_model TEXT
) WITHOUT ROWID;
CREATE INDEX llm_calls_ended ON llm_calls (ended_at);
CREATE INDEX llm_calls_session ON llm_calls (
    session_id, ended_at,
    cost_usd, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens,
    estimated, cost_source, aux_task
);
-- LLM calls whose usage is beyond what any provider bills in one call
-- (pricing::usage_beyond_bounds) are recorded at a cost of 0 with
-- cost_source 'held'. `report` and `status` count them; this index holds
-- only those rows, so counting them over a window reads them alone, not
-- every call of the window.
CREATE INDEX llm_calls_held ON llm_calls (ended_at) WHERE cost_source = 'held';
CREATE INDEX llm_calls_routed ON llm_calls (ended_at) WHERE routed_model IS NOT NULL;

-- One row per failed attempt of an LLM API call.
CREATE TABLE llm_call_errors (
    id             INTEGER PRIMARY KEY,
    api_request_id TEXT NOT NULL,
    session_id     TEXT NOT NULL,
    turn_id        TEXT,
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
    UNIQUE (api_request_id, retry_count)
);
CREATE INDEX llm_call_errors_ended ON llm_call_errors (ended_at);
-- on_session_finalize decides each still-open turn's outcome from its
-- failed attempts; without this index that read every error row ever
-- recorded, once per open turn. Errors are rare, so the index costs little.
CREATE INDEX llm_call_errors_turn ON llm_call_errors (turn_id);
-- A session span reads its session's last failed attempt; without this
-- index that scanned every error row once per session.
CREATE INDEX llm_call_errors_session ON llm_call_errors (session_id, ended_at);

-- One row per tool call; proxy = 1 for the delegate_task/subagent row a
-- subagent_stop records on the parent.
CREATE TABLE tool_calls (
    session_id     TEXT NOT NULL,
    tool_call_id   TEXT NOT NULL,
    tool_name      TEXT NOT NULL,
    turn_id        TEXT,
    task_id        TEXT,
    api_request_id TEXT,
    started_at     REAL NOT NULL,
    ended_at       REAL,
    latency_s      REAL,
    ok             INTEGER,
    status         TEXT,
    error_type     TEXT,
    exit_code      INTEGER,
    proxy          INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (session_id, tool_call_id)
) WITHOUT ROWID;
-- `report --since` and `export --since` read what ended in their window,
-- not every row ever recorded: each table they read has an index on when
-- its rows ended (llm_calls and llm_call_errors had one). Partial, so rows
-- still open (and subagent proxy rows, which no report counts) cost nothing.
CREATE INDEX tool_calls_ended ON tool_calls (ended_at) WHERE proxy = 0 AND ended_at IS NOT NULL;

-- Parent → child delegations.
CREATE TABLE subagent_edges (
    child_session_id   TEXT PRIMARY KEY,
    parent_session_id  TEXT NOT NULL,
    parent_turn_id     TEXT,
    parent_subagent_id TEXT,
    child_subagent_id  TEXT,
    role               TEXT,
    goal               TEXT,
    started_at         REAL NOT NULL,
    stopped_at         REAL,
    child_status       TEXT,
    duration_ms        INTEGER
) WITHOUT ROWID;
CREATE INDEX subagent_edges_parent ON subagent_edges (parent_session_id);

-- The span outbox, export counters and the export lease.
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

-- Metric state. Metrics are counted from the ledger,
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
-- A fold reads the oldest session rows of the metric log; without an
-- index it read every other row before them, which in a log that was not
-- folded for a while is most of it. One entry per session end.
CREATE INDEX metric_log_sessions ON metric_log (seq) WHERE kind = 5;

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

-- Captured content, per span.
-- Only written while content capture is on (OTEL_INSTRUMENTATION_GENAI_
-- CAPTURE_MESSAGE_CONTENT=true), already redacted and cut to size by the
-- decoder, in the shape the span attribute carries (JSON text).
--   kind: 'llm' (key = api_request_id) or 'tool' (key = tool_call_id; tool
--         call ids repeat across sessions, hence session_id in the key)
--   attr: the span attribute, e.g. gen_ai.input.messages
-- A retried request rewrites its input messages; the last attempt's win.
CREATE TABLE span_content (
    kind       TEXT NOT NULL,
    session_id TEXT NOT NULL,
    key        TEXT NOT NULL,
    attr       TEXT NOT NULL,
    value      TEXT NOT NULL,
    PRIMARY KEY (kind, session_id, key, attr)
) WITHOUT ROWID;

-- Budget state.
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
--   input_tokens, output_tokens: the calls' tokens, input (cache reads and
--     writes included) and output (reasoning included) apart, for budgets
--     in tokens (`tokens_counted` says which count); estimated_*: the part
--     whose usage was estimated. The same in budget_period, and a
--     reservation holds a call's expected tokens as it holds its cost.
CREATE TABLE budget_spend (
    scope         TEXT NOT NULL,
    id            TEXT NOT NULL,
    level         INTEGER NOT NULL,
    bucket        INTEGER NOT NULL,
    cost_usd      REAL NOT NULL DEFAULT 0,
    estimated_usd REAL NOT NULL DEFAULT 0,
    calls         INTEGER NOT NULL DEFAULT 0,
    input_tokens  INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    estimated_input_tokens  INTEGER NOT NULL DEFAULT 0,
    estimated_output_tokens INTEGER NOT NULL DEFAULT 0,
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
    input_tokens  INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    estimated_input_tokens  INTEGER NOT NULL DEFAULT 0,
    estimated_output_tokens INTEGER NOT NULL DEFAULT 0,
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
    input_tokens   INTEGER NOT NULL DEFAULT 0,
    output_tokens  INTEGER NOT NULL DEFAULT 0,
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
-- Each alert is also pushed to a person, from the store like spans, never
-- from a hook: to the webhook (HERMES_METER_ALERT_WEBHOOK, the push_*
-- columns) and as a message through Hermes itself
-- (HERMES_METER_ALERT_DELIVER, the hermes_* columns):
--   pushed_at, hermes_sent_at:   when the receiver accepted it; NULL until then
--   push_attempts, hermes_attempts: tries, the one in flight included
--   push_after, hermes_after:    when it may be tried (again): a process
--                  claims an alert by moving this past now before it sends,
--                  so two processes do not send it at once, and a failed
--                  send backs off here
--   push_error, hermes_error:    why the last try failed
CREATE TABLE alerts (
    kind         TEXT NOT NULL,
    key          TEXT NOT NULL,
    text         TEXT NOT NULL,
    count        INTEGER NOT NULL DEFAULT 1,
    first_at     REAL NOT NULL,
    last_at      REAL NOT NULL,
    delivered_at REAL,
    delivered_to TEXT,
    pushed_at       REAL,
    push_attempts   INTEGER NOT NULL DEFAULT 0,
    push_after      REAL NOT NULL DEFAULT 0,
    push_error      TEXT,
    hermes_sent_at  REAL,
    hermes_attempts INTEGER NOT NULL DEFAULT 0,
    hermes_after    REAL NOT NULL DEFAULT 0,
    hermes_error    TEXT,
    PRIMARY KEY (kind, key)
) WITHOUT ROWID;
CREATE INDEX alerts_pending ON alerts (first_at) WHERE delivered_at IS NULL;
CREATE INDEX alerts_to_push ON alerts (push_after) WHERE pushed_at IS NULL;
CREATE INDEX alerts_to_send ON alerts (hermes_after) WHERE hermes_sent_at IS NULL;

-- When each model (":free" suffix dropped) was first seen free and first
-- seen costing money, for the free-to-paid alert.
CREATE TABLE budget_models (
    model   TEXT PRIMARY KEY,
    free_at REAL,
    paid_at REAL
) WITHOUT ROWID;

-- Delta temporality for pushed metrics.
-- With OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE=delta a push sends
-- what each series gained since the last accepted delta push, by whichever
-- process held the lease then. This table holds each metric_series row as
-- that push saw it (export_state 'metrics.delta_at' says when); it is
-- replaced in the transaction that records the next accepted push, so a
-- new lease holder continues where the previous one stopped.
CREATE TABLE metric_delta_base (
    metric  TEXT NOT NULL,
    attrs   TEXT NOT NULL,
    value   REAL NOT NULL,
    count   INTEGER NOT NULL,
    buckets TEXT,
    PRIMARY KEY (metric, attrs)
) WITHOUT ROWID;

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
CREATE INDEX approvals_ended ON approvals (ended_at) WHERE ended_at IS NOT NULL;

-- Fleet budgets (src/fleet/): what the sync last pulled from the fleet
-- database and what it pushed, so hooks read the fleet without the network.
-- One row: this store's host id (random, made once), the last sync.
CREATE TABLE fleet_state (
    singleton       INTEGER PRIMARY KEY CHECK (singleton = 1),
    host_id         TEXT NOT NULL,
    synced_at       REAL,             -- the last sync that pushed and pulled
    tried_at        REAL,             -- the last attempt, failed or not
    error           TEXT,             -- the last attempt's error, NULL when it succeeded
    hosts           INTEGER NOT NULL DEFAULT 1,  -- live hosts at the last sync
    budgets_version INTEGER,          -- the fleet budget file's version written here
    view_version    INTEGER NOT NULL DEFAULT 0   -- bumped by every pull (quick verdicts start over)
);

-- Per budget period: the other hosts' spend at the last sync (USD, and
-- input and output tokens), this host's as the fleet had it then, and the
-- lease taken (NULL: no limit then), in USD and in the tokens the budget
-- file counts.
CREATE TABLE fleet_view (
    scope            TEXT NOT NULL,
    id               TEXT NOT NULL,
    win              TEXT NOT NULL,
    period           TEXT NOT NULL,
    others_cost_usd  REAL NOT NULL,
    others_estimated_usd REAL NOT NULL,
    others_reserved_usd  REAL NOT NULL,
    own_at_sync_usd  REAL NOT NULL,
    lease_usd        REAL,
    others_input_tokens           REAL NOT NULL DEFAULT 0,
    others_estimated_input_tokens REAL NOT NULL DEFAULT 0,
    others_reserved_input_tokens  REAL NOT NULL DEFAULT 0,
    others_output_tokens          REAL NOT NULL DEFAULT 0,
    others_estimated_output_tokens REAL NOT NULL DEFAULT 0,
    others_reserved_output_tokens REAL NOT NULL DEFAULT 0,
    own_at_sync_tokens REAL NOT NULL DEFAULT 0,
    lease_tokens       REAL,
    PRIMARY KEY (scope, id, win, period)
) WITHOUT ROWID;

-- The quarter-hour spend buckets as last pushed (absolute values): the
-- next push sends only the rows that changed since.
CREATE TABLE fleet_pushed (
    scope         TEXT NOT NULL,
    id            TEXT NOT NULL,
    bucket        INTEGER NOT NULL,
    cost_usd      REAL NOT NULL,
    calls         INTEGER NOT NULL,
    input_tokens  INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (scope, id, bucket)
) WITHOUT ROWID;

-- Row counts kept as rows change, and retention.
--
-- `status` reads these instead of COUNT(*) of every table (millions of
-- rows after a year of heavy use). They move in the transaction that
-- inserts or deletes the rows, so they are exact across processes: the
-- journal's, the ledger's and the metric log's inserts are added up by the
-- code that writes them and each changed counter written once before the
-- commit (row_counts.rs); the outbox's counters and the metric
-- log's deletes are kept by the triggers below (that module says why).
--   name: a table name, 'outbox.held' (held session spans), or what the retention sweep pruned
--         ('pruned.journal', 'pruned.outbox', 'pruned.content'), or the
--         events refused as older than the journal's horizon
--         ('refused.too_old')
CREATE TABLE store_counts (
    name TEXT PRIMARY KEY,
    n    INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- Report rollups.
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

-- The largest use of any session family (a root session and its
-- subagents) ever recorded: the cost of its calls and the tool calls it
-- started. It only grows (a peak); a session the budget gate has not
-- measured yet in a process used at most this much, which lets its first
-- gated call under per-session and per-run caps go ahead without waiting
-- (src/budget/quick.rs in the runtime). Kept by the triggers below, so
-- every path that changes a family's use keeps it, in every process.
CREATE TABLE cap_peaks (
    singleton  INTEGER PRIMARY KEY CHECK (singleton = 1),
    usd        REAL NOT NULL DEFAULT 0,
    tool_calls INTEGER NOT NULL DEFAULT 0
);
INSERT INTO cap_peaks (singleton) VALUES (1);
CREATE TRIGGER cap_peak_cost AFTER UPDATE OF cost_usd ON runs WHEN new.cost_usd > old.cost_usd BEGIN
    UPDATE cap_peaks SET usd = MAX(usd, (SELECT TOTAL(cost_usd) FROM runs WHERE root_session_id = new.root_session_id));
END;
CREATE TRIGGER cap_peak_tool_call AFTER INSERT ON tool_calls WHEN new.proxy = 0 BEGIN
    UPDATE runs SET started_tool_calls = started_tool_calls + 1 WHERE session_id = new.session_id;
END;
CREATE TRIGGER cap_peak_tool_calls AFTER UPDATE OF started_tool_calls ON runs BEGIN
    UPDATE cap_peaks SET tool_calls = MAX(tool_calls,
        (SELECT TOTAL(started_tool_calls) FROM runs WHERE root_session_id = new.root_session_id));
END;
-- A session joining a family (a subagent linked to its parent) adds its use.
CREATE TRIGGER cap_peak_family AFTER UPDATE OF root_session_id ON runs
WHEN old.root_session_id IS NOT new.root_session_id BEGIN
    UPDATE cap_peaks SET
        usd = MAX(usd, (SELECT TOTAL(cost_usd) FROM runs WHERE root_session_id = new.root_session_id)),
        tool_calls = MAX(tool_calls,
            (SELECT TOTAL(started_tool_calls) FROM runs WHERE root_session_id = new.root_session_id));
END;

-- Triggers on runs.
CREATE TRIGGER metric_log_run_ended AFTER UPDATE OF status ON runs
WHEN old.status = 'running' AND new.status != 'running' BEGIN
    INSERT INTO metric_log (kind, session_id, key) VALUES (5, new.session_id, new.session_id);
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

-- Triggers on turns.
CREATE TRIGGER metric_log_turn_inserted AFTER INSERT ON turns WHEN new.outcome IS NOT NULL BEGIN
    INSERT INTO metric_log (kind, session_id, key) VALUES (4, new.session_id, new.turn_id);
END;
CREATE TRIGGER metric_log_turn_ended AFTER UPDATE OF outcome ON turns
WHEN old.outcome IS NULL AND new.outcome IS NOT NULL BEGIN
    INSERT INTO metric_log (kind, session_id, key) VALUES (4, new.session_id, new.turn_id);
END;

-- Triggers on llm_calls.
CREATE TRIGGER metric_log_llm_call AFTER INSERT ON llm_calls BEGIN
    INSERT INTO metric_log (kind, session_id, key) VALUES (1, new.session_id, new.api_request_id);
END;
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

-- Triggers on llm_call_errors.
CREATE TRIGGER metric_log_llm_error AFTER INSERT ON llm_call_errors BEGIN
    INSERT INTO metric_log (kind, session_id, key, n) VALUES (2, new.session_id, new.api_request_id, new.retry_count);
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

-- Triggers on tool_calls.
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

-- Triggers on outbox.
-- No statement may delete outbox rows by a REPLACE conflict from here on:
-- delete triggers do not fire for those (recursive_triggers is off).
CREATE TRIGGER count_outbox_in AFTER INSERT ON outbox BEGIN
    UPDATE store_counts SET n = n + 1 WHERE name = 'outbox';
END;
CREATE TRIGGER count_outbox_out AFTER DELETE ON outbox BEGIN
    UPDATE store_counts SET n = n - 1 WHERE name = 'outbox';
END;
-- Held session spans (hold = 1), for `status`.
CREATE TRIGGER count_outbox_held_in AFTER INSERT ON outbox WHEN new.hold = 1 BEGIN
    UPDATE store_counts SET n = n + 1 WHERE name = 'outbox.held';
END;
CREATE TRIGGER count_outbox_held_out AFTER DELETE ON outbox WHEN old.hold = 1 BEGIN
    UPDATE store_counts SET n = n - 1 WHERE name = 'outbox.held';
END;
CREATE TRIGGER count_outbox_held_moved AFTER UPDATE OF hold ON outbox WHEN old.hold IS NOT new.hold BEGIN
    UPDATE store_counts SET n = n + (new.hold = 1) - (old.hold = 1) WHERE name = 'outbox.held';
END;

-- Triggers on metric_log.
CREATE TRIGGER count_metric_log_out AFTER DELETE ON metric_log BEGIN
    UPDATE store_counts SET n = n - 1 WHERE name = 'metric_log';
END;

-- What a new store starts with.

-- The start of every cumulative metric series and the stable
-- service.instance.id of this store.
INSERT INTO meta (key, value)
    VALUES ('metrics.start_time', CAST((julianday('now') - 2440587.5) * 86400.0 AS TEXT));
INSERT INTO meta (key, value) VALUES ('metrics.instance_id', lower(hex(randomblob(16))));
INSERT INTO store_counts (name, n) VALUES
    ('journal', 0), ('runs', 0), ('turns', 0), ('llm_calls', 0), ('llm_call_errors', 0),
    ('tool_calls', 0), ('subagent_edges', 0), ('outbox', 0), ('metric_log', 0), ('outbox.held', 0);
INSERT INTO report_rollup_state VALUES (0, 0);

-- OTLP logs, the third signal: what happened that is neither a span nor a number: budget verdicts,
-- alerts, approvals' decisions, failed LLM API attempts. The transaction
-- that records the fact also appends its record here (store first, like
-- spans); the log exporter sends records in `seq` order and deletes them
-- once the collector accepted them. A record names its session, turn and
-- span so the exporter stamps it with the trace context its span has.
--   event:    the event name (hermes.budget.verdict, hermes.alert, ...)
--   severity: the OTLP SeverityNumber (9 info, 13 warn, 17 error)
--   span_id:  the span it happened in (8 bytes), NULL for its turn's or
--             session's
--   attrs:    a JSON object of its attributes (strings, numbers, booleans)
--   content_key: a content event's: the api_request_id whose captured
--             content (`span_content`) it carries, read when it is sent
CREATE TABLE log_outbox (
    seq        INTEGER PRIMARY KEY,
    at         REAL NOT NULL,
    event      TEXT NOT NULL,
    severity   INTEGER NOT NULL,
    session_id TEXT,
    turn_id    TEXT,
    span_id    BLOB,
    body       TEXT NOT NULL,
    attrs      TEXT NOT NULL DEFAULT '{}',
    content_key TEXT
);
-- Content retention keeps a session's content while an event of it waits.
CREATE INDEX log_outbox_content ON log_outbox (session_id) WHERE content_key IS NOT NULL;
