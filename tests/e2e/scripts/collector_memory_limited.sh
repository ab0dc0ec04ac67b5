# Custom kit scenario (run-scenario.sh custom --script this, with the
# pipeline sidecar): a Collector short of memory. It starts with the
# memory_limiter extension as its OTLP receiver's middleware and a limit
# below what it uses (PIPELINE_COLLECTOR_CONFIG_FIRST), so from the
# limiter's first check on ("Refusing data" in its log) it refuses every
# request: gRPC RESOURCE_EXHAUSTED, HTTP 429. Hermes runs while it refuses,
# and the plugin keeps what was refused. The Collector is restarted without
# the limit, as with more memory, and the sidecar's `serve --drain` at the
# end sends what the plugin kept, as the next exporter of a host would.
# Each span must reach Jaeger once.
step refusing "$PY" "$SCRIPT_DIR/pipeline_control.py" --out "$OUTDIR" --collector-log "Refusing data"
chat chat "READFILE please read hello.txt"
step restart "$PY" "$SCRIPT_DIR/pipeline_control.py" --out "$OUTDIR" collector.stop collector.start
