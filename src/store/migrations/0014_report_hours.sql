-- Report rollups by hour for the whole store (issue 18): level 2 of
-- report_rollups holds dimension 0 (the whole store) per hour, so a report
-- over a long window tells the days of any zone apart from a quarter of the
-- rows it read per quarter hour (the table's key, (level, bucket, dim, key),
-- made that read pass every other dimension's quarter-hour rows too). Hours
-- a zone's day begins inside (offsets such as +5:30 and +5:45) are still
-- read by quarter hour (store/rollup.rs).
--
-- No table changes: this fills the new level for the hours wholly below the
-- mark from their quarter hours, as the sweep's roll-up keeps it from now on.
INSERT INTO report_rollups (level, bucket, dim, key, cost_usd, input_tokens, output_tokens, cache_read_tokens,
       cache_write_tokens, reasoning_tokens, llm_calls, estimated_llm_calls, unpriced_llm_calls, aux_llm_calls,
       aux_cost_usd, api_errors, tool_calls, tool_failures, tool_nonzero_exits, sessions, estimate_usd)
SELECT 2, bucket - bucket % 3600, 0, '', SUM(cost_usd), SUM(input_tokens), SUM(output_tokens),
       SUM(cache_read_tokens), SUM(cache_write_tokens), SUM(reasoning_tokens), SUM(llm_calls),
       SUM(estimated_llm_calls), SUM(unpriced_llm_calls), SUM(aux_llm_calls), SUM(aux_cost_usd),
       SUM(api_errors), SUM(tool_calls), SUM(tool_failures), SUM(tool_nonzero_exits),
       SUM(sessions), SUM(estimate_usd)
  FROM report_rollups
 WHERE level = 0 AND dim = 0
   AND bucket < (SELECT until - until % 3600 FROM report_rollup_state WHERE id = 0)
 GROUP BY 2;
