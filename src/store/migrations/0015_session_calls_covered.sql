-- A session's calls with what `report` sums of them (issue 18): the
-- per-session sums of `report --json` (store/by_session.rs) read each
-- call's cost, tokens and kind from this index alone, instead of seeking
-- the call's row by its request id. Hermes's request ids scatter a
-- session's calls across the table, so over a long-lived store that was
-- one random page read per call: the better part of a week's report at a
-- million sessions. The index grows by about 21 bytes a call (2 to 3
-- bytes per hook call). Its leading columns are unchanged, so every
-- statement that used it still does; calls that ended at the same instant
-- now follow each other by cost rather than by request id, the same order
-- for every reader of the index.
DROP INDEX llm_calls_session;
CREATE INDEX llm_calls_session ON llm_calls (
    session_id, ended_at,
    cost_usd, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens,
    estimated, cost_source, aux_task
);
