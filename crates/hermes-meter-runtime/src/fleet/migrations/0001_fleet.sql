-- Fleet schema version 1: hosts, their spend and reservations, the budget file.
-- Every name starts with hermes_fleet_ : the database may be shared.

-- One row per host (one hermes-meter store); last_seen is its last sync.
CREATE TABLE hermes_fleet_hosts (
    host_id    text PRIMARY KEY,
    name       text NOT NULL,
    first_seen double precision NOT NULL,
    last_seen  double precision NOT NULL
);

-- Each host's spend per scope id and UTC quarter hour, as absolute totals
-- of its store's rollups: pushing a row again (a retry, a replayed spool)
-- writes the same value, and a stale push never lowers one (calls only grow).
-- Tokens: input with cache reads and writes, output with reasoning, each
-- with its estimated part (for token budgets).
CREATE TABLE hermes_fleet_spend (
    scope         text NOT NULL,
    id            text NOT NULL,
    bucket        bigint NOT NULL,
    host_id       text NOT NULL,
    cost_usd      double precision NOT NULL,
    estimated_usd double precision NOT NULL,
    calls         bigint NOT NULL,
    input_tokens  bigint NOT NULL DEFAULT 0,
    estimated_input_tokens  bigint NOT NULL DEFAULT 0,
    output_tokens bigint NOT NULL DEFAULT 0,
    estimated_output_tokens bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (scope, id, bucket, host_id)
);
CREATE INDEX hermes_fleet_spend_by_bucket ON hermes_fleet_spend (bucket);

-- Each host's open reservations per scope id, replaced at every sync.
CREATE TABLE hermes_fleet_reserved (
    host_id    text NOT NULL,
    scope      text NOT NULL,
    id         text NOT NULL,
    amount_usd double precision NOT NULL,
    at         double precision NOT NULL,
    input_tokens  double precision NOT NULL DEFAULT 0,
    output_tokens double precision NOT NULL DEFAULT 0,
    PRIMARY KEY (host_id, scope, id)
);

-- The fleet's budget file (budgets.toml), one row; version grows by one per edit.
CREATE TABLE hermes_fleet_budgets (
    singleton  smallint PRIMARY KEY CHECK (singleton = 1),
    text       text NOT NULL,
    version    bigint NOT NULL,
    updated_at double precision NOT NULL,
    updated_by text NOT NULL
);
