-- LLM calls whose usage is beyond what any provider bills in one call
-- (pricing::usage_beyond_bounds) are recorded at a cost of 0 with
-- cost_source 'held'. `report` and `status` count them; this index holds
-- only those rows, so counting them over a window reads them alone, not
-- every call of the window.
CREATE INDEX IF NOT EXISTS llm_calls_held ON llm_calls (ended_at) WHERE cost_source = 'held';
