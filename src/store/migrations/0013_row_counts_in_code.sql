-- Schema version 13: the journal's and the ledger's row counts kept by the
-- code that writes the rows, not by a trigger per row.
--
-- The triggers of version 11 ran an UPDATE of `store_counts` for every row
-- inserted or deleted, which cost replay about 40% of its throughput. The
-- statements that write these tables know how many rows they inserted or
-- deleted; they add it up per transaction and write each changed counter
-- once, before the commit (src/store/row_counts.rs). The outbox's and the
-- metric log's counters keep their triggers (see that module for why).
DROP TRIGGER count_journal_in;
DROP TRIGGER count_journal_out;
DROP TRIGGER count_runs_in;
DROP TRIGGER count_runs_out;
DROP TRIGGER count_turns_in;
DROP TRIGGER count_turns_out;
DROP TRIGGER count_llm_calls_in;
DROP TRIGGER count_llm_calls_out;
DROP TRIGGER count_llm_call_errors_in;
DROP TRIGGER count_llm_call_errors_out;
DROP TRIGGER count_tool_calls_in;
DROP TRIGGER count_tool_calls_out;
DROP TRIGGER count_subagent_edges_in;
DROP TRIGGER count_subagent_edges_out;

-- The triggers kept these exact; counted again anyway, so a store starts
-- version 13 from the tables themselves whatever wrote it before.
INSERT OR REPLACE INTO store_counts (name, n) VALUES
    ('journal', (SELECT COUNT(*) FROM journal)),
    ('runs', (SELECT COUNT(*) FROM runs)),
    ('turns', (SELECT COUNT(*) FROM turns)),
    ('llm_calls', (SELECT COUNT(*) FROM llm_calls)),
    ('llm_call_errors', (SELECT COUNT(*) FROM llm_call_errors)),
    ('tool_calls', (SELECT COUNT(*) FROM tool_calls)),
    ('subagent_edges', (SELECT COUNT(*) FROM subagent_edges));
