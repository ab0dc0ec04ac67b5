-- Schema version 1: the journal and the ledger.
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
    tool_failures       INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX runs_root ON runs (root_session_id);
CREATE INDEX runs_started ON runs (started_at);
-- Open runs, for the idle sweep; only running rows are in it.
CREATE INDEX runs_running ON runs (last_event_at) WHERE status = 'running';

-- One row per turn (pre_llm_call to its end).
CREATE TABLE turns (
    turn_id       TEXT PRIMARY KEY,
    session_id    TEXT NOT NULL,
    task_id       TEXT,
    is_first_turn INTEGER,
    model         TEXT,
    started_at    REAL NOT NULL,
    ended_at      REAL,
    outcome       TEXT
) WITHOUT ROWID;
CREATE INDEX turns_session ON turns (session_id);

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
    attempts            INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

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
    estimated          INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE INDEX llm_calls_ended ON llm_calls (ended_at);

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
