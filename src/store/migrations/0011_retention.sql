-- Schema version 11: row counts kept as rows change, and retention (issue 18).
--
-- `status` printed COUNT(*) of every table, which reads the whole table:
-- at a year of heavy use that is millions of rows per command. These
-- counters move in the transaction that inserts or deletes the row
-- (triggers), so they are exact across processes and cost one small
-- update per row written.
--   name: a table name, 'outbox.held' (held session spans), or what the retention sweep pruned
--         ('pruned.journal', 'pruned.outbox', 'pruned.content'), or the
--         events refused as older than the journal's horizon
--         ('refused.too_old')
CREATE TABLE store_counts (
    name TEXT PRIMARY KEY,
    n    INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

INSERT INTO store_counts (name, n) SELECT 'journal', COUNT(*) FROM journal;
INSERT INTO store_counts (name, n) SELECT 'runs', COUNT(*) FROM runs;
INSERT INTO store_counts (name, n) SELECT 'turns', COUNT(*) FROM turns;
INSERT INTO store_counts (name, n) SELECT 'llm_calls', COUNT(*) FROM llm_calls;
INSERT INTO store_counts (name, n) SELECT 'llm_call_errors', COUNT(*) FROM llm_call_errors;
INSERT INTO store_counts (name, n) SELECT 'tool_calls', COUNT(*) FROM tool_calls;
INSERT INTO store_counts (name, n) SELECT 'subagent_edges', COUNT(*) FROM subagent_edges;
INSERT INTO store_counts (name, n) SELECT 'outbox', COUNT(*) FROM outbox;
INSERT INTO store_counts (name, n) SELECT 'metric_log', COUNT(*) FROM metric_log;
INSERT INTO store_counts (name, n) SELECT 'outbox.held', COUNT(*) FROM outbox WHERE hold = 1;

CREATE TRIGGER count_journal_in AFTER INSERT ON journal BEGIN
    UPDATE store_counts SET n = n + 1 WHERE name = 'journal';
END;
CREATE TRIGGER count_journal_out AFTER DELETE ON journal BEGIN
    UPDATE store_counts SET n = n - 1 WHERE name = 'journal';
END;
CREATE TRIGGER count_runs_in AFTER INSERT ON runs BEGIN
    UPDATE store_counts SET n = n + 1 WHERE name = 'runs';
END;
CREATE TRIGGER count_runs_out AFTER DELETE ON runs BEGIN
    UPDATE store_counts SET n = n - 1 WHERE name = 'runs';
END;
CREATE TRIGGER count_turns_in AFTER INSERT ON turns BEGIN
    UPDATE store_counts SET n = n + 1 WHERE name = 'turns';
END;
CREATE TRIGGER count_turns_out AFTER DELETE ON turns BEGIN
    UPDATE store_counts SET n = n - 1 WHERE name = 'turns';
END;
CREATE TRIGGER count_llm_calls_in AFTER INSERT ON llm_calls BEGIN
    UPDATE store_counts SET n = n + 1 WHERE name = 'llm_calls';
END;
CREATE TRIGGER count_llm_calls_out AFTER DELETE ON llm_calls BEGIN
    UPDATE store_counts SET n = n - 1 WHERE name = 'llm_calls';
END;
CREATE TRIGGER count_llm_call_errors_in AFTER INSERT ON llm_call_errors BEGIN
    UPDATE store_counts SET n = n + 1 WHERE name = 'llm_call_errors';
END;
CREATE TRIGGER count_llm_call_errors_out AFTER DELETE ON llm_call_errors BEGIN
    UPDATE store_counts SET n = n - 1 WHERE name = 'llm_call_errors';
END;
CREATE TRIGGER count_tool_calls_in AFTER INSERT ON tool_calls BEGIN
    UPDATE store_counts SET n = n + 1 WHERE name = 'tool_calls';
END;
CREATE TRIGGER count_tool_calls_out AFTER DELETE ON tool_calls BEGIN
    UPDATE store_counts SET n = n - 1 WHERE name = 'tool_calls';
END;
CREATE TRIGGER count_subagent_edges_in AFTER INSERT ON subagent_edges BEGIN
    UPDATE store_counts SET n = n + 1 WHERE name = 'subagent_edges';
END;
CREATE TRIGGER count_subagent_edges_out AFTER DELETE ON subagent_edges BEGIN
    UPDATE store_counts SET n = n - 1 WHERE name = 'subagent_edges';
END;
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
CREATE TRIGGER count_metric_log_in AFTER INSERT ON metric_log BEGIN
    UPDATE store_counts SET n = n + 1 WHERE name = 'metric_log';
END;
CREATE TRIGGER count_metric_log_out AFTER DELETE ON metric_log BEGIN
    UPDATE store_counts SET n = n - 1 WHERE name = 'metric_log';
END;

-- Captured content lives in span_content only, where its retention
-- applies; journal payloads no longer carry it. Earlier versions wrote it
-- into the payloads too: take it out of them once, here.
UPDATE journal SET payload = json_remove(payload, '$.user_message', '$.request_messages', '$.assistant_content',
                                         '$.args', '$.result', '$.assistant_response', '$.child_summary', '$.command')
 WHERE hook IN ('pre_llm_call', 'pre_api_request', 'post_api_request', 'pre_tool_call', 'post_tool_call',
                'post_llm_call', 'subagent_stop', 'pre_approval_request', 'post_approval_response')
   AND json_valid(payload)
   AND (json_type(payload, '$.user_message') IS NOT NULL OR json_type(payload, '$.request_messages') IS NOT NULL
        OR json_type(payload, '$.assistant_content') IS NOT NULL OR json_type(payload, '$.args') IS NOT NULL
        OR json_type(payload, '$.result') IS NOT NULL OR json_type(payload, '$.assistant_response') IS NOT NULL
        OR json_type(payload, '$.child_summary') IS NOT NULL OR json_type(payload, '$.command') IS NOT NULL);

-- `report --since` and `export --since` read what ended in their window,
-- not every row ever recorded: each table they read has an index on when
-- its rows ended (llm_calls and llm_call_errors had one). Partial, so rows
-- still open (and subagent proxy rows, which no report counts) cost nothing.
CREATE INDEX tool_calls_ended ON tool_calls (ended_at) WHERE proxy = 0 AND ended_at IS NOT NULL;
CREATE INDEX turns_ended ON turns (ended_at) WHERE ended_at IS NOT NULL;
CREATE INDEX runs_settled ON runs (COALESCE(ended_at, last_event_at)) WHERE status != 'running';
CREATE INDEX approvals_ended ON approvals (ended_at) WHERE ended_at IS NOT NULL;

-- A fold reads the oldest session rows of the metric log; without an
-- index it read every other row before them, which in a log that was not
-- folded for a while is most of it. One entry per session end.
CREATE INDEX metric_log_sessions ON metric_log (seq) WHERE kind = 5;
