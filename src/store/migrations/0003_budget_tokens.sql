-- Version 3: calendar budgets in tokens (`daily_tokens` and so on) beside
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
