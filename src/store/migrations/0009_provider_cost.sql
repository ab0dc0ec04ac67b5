-- Schema version 9: a cost the provider reported itself.
--   llm_calls.cost_usd     stays what the call is billed: the provider's
--                          figure when its usage carried one (cost_source
--                          'provider'), else the price table's.
--   llm_calls.estimate_usd the price table's cost of the same usage, kept
--                          beside a provider's figure so `report` can show
--                          where the two disagree; NULL on rows recorded
--                          before version 9 (the estimate was the cost).
ALTER TABLE llm_calls ADD COLUMN estimate_usd REAL;
-- `report` reconciles the provider's figures with the estimates by reading
-- only the calls a provider billed itself, in time order.
CREATE INDEX llm_calls_provider_billed ON llm_calls (ended_at) WHERE cost_source = 'provider';
