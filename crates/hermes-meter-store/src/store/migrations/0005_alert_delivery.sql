-- Version 5: alerts delivered as a message through Hermes itself
-- (HERMES_METER_ALERT_DELIVER: a platform Hermes's gateway is configured
-- for, its home channel or a chat), from the store like the webhook's.
--   hermes_sent_at:  when Hermes's sender took the message; NULL until then
--   hermes_attempts: sends tried, the one in flight included
--   hermes_after:    when it may be tried (again): a process claims an alert
--                    by moving this past now before it sends, and a failed
--                    send backs off here
--   hermes_error:    why the last send failed
ALTER TABLE alerts ADD COLUMN hermes_sent_at REAL;
ALTER TABLE alerts ADD COLUMN hermes_attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE alerts ADD COLUMN hermes_after REAL NOT NULL DEFAULT 0;
ALTER TABLE alerts ADD COLUMN hermes_error TEXT;
CREATE INDEX alerts_to_send ON alerts (hermes_after) WHERE hermes_sent_at IS NULL;
