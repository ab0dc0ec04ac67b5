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

-- Per budget period: the other hosts' spend at the last sync, this host's
-- as the fleet had it then, and the lease taken (NULL: no limit then).
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
    PRIMARY KEY (scope, id, bucket)
) WITHOUT ROWID;
