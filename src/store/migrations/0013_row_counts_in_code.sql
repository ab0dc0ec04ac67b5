-- Schema version 13: the journal's, the ledger's and the metric log's row
-- counts kept by the code whose transactions write the rows, not by a
-- trigger per row.
--
-- The triggers of version 11 ran an UPDATE of `store_counts` for every row
-- inserted or deleted: in the ledger benchmark, most of what schema 11
-- cost replay and group commit. The statements that write these tables
-- know how many rows they inserted or deleted (the metric log: how far its
-- end moved); they add it up per transaction and write each changed
-- counter once, before the commit (src/store/row_counts.rs). The outbox's
-- counters and the metric log's deletes keep their triggers (see that
-- module for why).
DROP TRIGGER IF EXISTS count_journal_in;
DROP TRIGGER IF EXISTS count_journal_out;
DROP TRIGGER IF EXISTS count_runs_in;
DROP TRIGGER IF EXISTS count_runs_out;
DROP TRIGGER IF EXISTS count_turns_in;
DROP TRIGGER IF EXISTS count_turns_out;
DROP TRIGGER IF EXISTS count_llm_calls_in;
DROP TRIGGER IF EXISTS count_llm_calls_out;
DROP TRIGGER IF EXISTS count_llm_call_errors_in;
DROP TRIGGER IF EXISTS count_llm_call_errors_out;
DROP TRIGGER IF EXISTS count_tool_calls_in;
DROP TRIGGER IF EXISTS count_tool_calls_out;
DROP TRIGGER IF EXISTS count_subagent_edges_in;
DROP TRIGGER IF EXISTS count_subagent_edges_out;
-- The metric log's rows are appended by triggers; the transactions that
-- fire them count how far its end moved. Its deletes (the fold's) keep
-- their trigger.
DROP TRIGGER IF EXISTS count_metric_log_in;

-- The triggers kept these exact; counted again anyway, so a store starts
-- version 13 from the tables themselves whatever wrote it before.
INSERT OR REPLACE INTO store_counts (name, n) VALUES
    ('journal', (SELECT COUNT(*) FROM journal)),
    ('runs', (SELECT COUNT(*) FROM runs)),
    ('turns', (SELECT COUNT(*) FROM turns)),
    ('llm_calls', (SELECT COUNT(*) FROM llm_calls)),
    ('llm_call_errors', (SELECT COUNT(*) FROM llm_call_errors)),
    ('tool_calls', (SELECT COUNT(*) FROM tool_calls)),
    ('subagent_edges', (SELECT COUNT(*) FROM subagent_edges)),
    ('metric_log', (SELECT COUNT(*) FROM metric_log));
