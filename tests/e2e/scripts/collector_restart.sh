# Custom kit scenario (run-scenario.sh custom --script this, with the
# pipeline sidecar): the Collector restarted while its queue holds spans
# Jaeger has not taken. Jaeger is stopped; `hermes chat -q` runs and exits
# (the Collector accepted its spans, so the plugin's store let them go);
# once the Collector's log says its exporter failed (the spans are in its
# queue), the Collector is stopped and started again, then Jaeger: the
# queued spans must reach it, each once (pipeline_control.py).
step jaeger_stop "$PY" "$SCRIPT_DIR/pipeline_control.py" --out "$OUTDIR" jaeger.stop
chat chat "READFILE please read hello.txt"
step restart "$PY" "$SCRIPT_DIR/pipeline_control.py" --out "$OUTDIR" --collector-log "Exporting failed" \
    --jaeger-chats 2 collector.stop collector.start jaeger.start
