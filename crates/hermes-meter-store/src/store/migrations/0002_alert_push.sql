-- Version 2: alerts pushed to a person through a webhook
-- (HERMES_METER_ALERT_WEBHOOK), from the store like spans, never from a hook.
--   pushed_at:     when the webhook accepted the alert (a 2xx); NULL until then
--   push_attempts: posts tried, the one in flight included
--   push_after:    when it may be tried (again): a process claims an alert by
--                  moving this past now before it posts, so two processes do
--                  not post it at once, and a failed post backs off here
--   push_error:    why the last post failed
ALTER TABLE alerts ADD COLUMN pushed_at REAL;
ALTER TABLE alerts ADD COLUMN push_attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE alerts ADD COLUMN push_after REAL NOT NULL DEFAULT 0;
ALTER TABLE alerts ADD COLUMN push_error TEXT;
CREATE INDEX alerts_to_push ON alerts (push_after) WHERE pushed_at IS NULL;
