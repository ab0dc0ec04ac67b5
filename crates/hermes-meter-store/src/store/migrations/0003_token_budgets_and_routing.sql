-- Version 3: calendar budgets in tokens, and calls routed to another model.
--
-- Calendar budgets in tokens (`daily_tokens` and so on) beside
-- the USD ones. The spend rollups and per-period totals also sum each
-- call's tokens, input (cache reads and writes included) and output
-- (reasoning included) apart, so a budget can count either or both
-- (`tokens_counted`); the estimated_* columns hold the part whose usage was
-- estimated. Reservations hold a call's expected tokens as they hold its
-- expected cost. Rows written before this version count no tokens: token
-- totals start with the upgrade.
ALTER TABLE budget_spend ADD COLUMN input_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE budget_spend ADD COLUMN output_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE budget_spend ADD COLUMN estimated_input_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE budget_spend ADD COLUMN estimated_output_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE budget_period ADD COLUMN input_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE budget_period ADD COLUMN output_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE budget_period ADD COLUMN estimated_input_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE budget_period ADD COLUMN estimated_output_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE budget_reservations ADD COLUMN input_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE budget_reservations ADD COLUMN output_tokens INTEGER NOT NULL DEFAULT 0;

-- A call an llm_request middleware routed to another model than the
-- agent's (a budget downgrade): the model it was sent to, from
-- pre_api_request's request, kept on the request and then on the call,
-- which is priced as that model. NULL for a call that went where the agent
-- asked.
ALTER TABLE api_requests ADD COLUMN routed_model TEXT;
ALTER TABLE llm_calls ADD COLUMN routed_model TEXT;
CREATE INDEX llm_calls_routed ON llm_calls (ended_at) WHERE routed_model IS NOT NULL;
