-- Schema version 9: a cost the provider reported itself, and attempts
-- hermes-meter closed.
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
-- The attempt (0-based) of a request that hermes-meter closed itself,
-- because its process exited or it went idle, and sent as a span then. A
-- late success or error of that same attempt is still recorded in the
-- ledger (it was spent), but its span is not sent again: a span goes out
-- once.
ALTER TABLE api_requests ADD COLUMN closed_attempt INTEGER;
