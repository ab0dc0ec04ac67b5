-- Schema version 6: delta temporality for pushed metrics.
-- With OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE=delta a push sends
-- what each series gained since the last accepted delta push, by whichever
-- process held the lease then. This table holds each metric_series row as
-- that push saw it (export_state 'metrics.delta_at' says when); it is
-- replaced in the transaction that records the next accepted push, so a
-- new lease holder continues where the previous one stopped.
CREATE TABLE metric_delta_base (
    metric  TEXT NOT NULL,
    attrs   TEXT NOT NULL,
    value   REAL NOT NULL,
    count   INTEGER NOT NULL,
    buckets TEXT,
    PRIMARY KEY (metric, attrs)
) WITHOUT ROWID;
