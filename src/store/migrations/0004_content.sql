-- Schema version 4: captured content, per span.
-- Only written while content capture is on (OTEL_INSTRUMENTATION_GENAI_
-- CAPTURE_MESSAGE_CONTENT=true), already redacted and cut to size by the
-- decoder, in the shape the span attribute carries (JSON text).
--   kind: 'llm' (key = api_request_id) or 'tool' (key = tool_call_id; tool
--         call ids repeat across sessions, hence session_id in the key)
--   attr: the span attribute, e.g. gen_ai.input.messages
-- A retried request rewrites its input messages; the last attempt's win.
-- IF NOT EXISTS: migrations 3 to 5 were written at the same time by
-- different people, and a development store may have met this one first.
CREATE TABLE IF NOT EXISTS span_content (
    kind       TEXT NOT NULL,
    session_id TEXT NOT NULL,
    key        TEXT NOT NULL,
    attr       TEXT NOT NULL,
    value      TEXT NOT NULL,
    PRIMARY KEY (kind, session_id, key, attr)
) WITHOUT ROWID;
