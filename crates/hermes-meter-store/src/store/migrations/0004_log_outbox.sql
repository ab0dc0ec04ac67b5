-- Version 4: OTLP logs, the third signal.
--
-- What happened that is neither a span nor a number: budget verdicts,
-- alerts, approvals' decisions, failed LLM API attempts. The transaction
-- that records the fact also appends its record here (store first, like
-- spans); the log exporter sends records in `seq` order and deletes them
-- once the collector accepted them. A record names its session, turn and
-- span so the exporter stamps it with the trace context its span has.
--   event:    the event name (hermes.budget.verdict, hermes.alert, ...)
--   severity: the OTLP SeverityNumber (9 info, 13 warn, 17 error)
--   span_id:  the span it happened in (8 bytes), NULL for its turn's or
--             session's
--   attrs:    a JSON object of its attributes (strings, numbers, booleans)
--   content_key: a content event's: the api_request_id whose captured
--             content (`span_content`) it carries, read when it is sent
CREATE TABLE log_outbox (
    seq        INTEGER PRIMARY KEY,
    at         REAL NOT NULL,
    event      TEXT NOT NULL,
    severity   INTEGER NOT NULL,
    session_id TEXT,
    turn_id    TEXT,
    span_id    BLOB,
    body       TEXT NOT NULL,
    attrs      TEXT NOT NULL DEFAULT '{}',
    content_key TEXT
);
-- Content retention keeps a session's content while an event of it waits.
CREATE INDEX log_outbox_content ON log_outbox (session_id) WHERE content_key IS NOT NULL;
