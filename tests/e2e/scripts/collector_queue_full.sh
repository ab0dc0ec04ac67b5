# Custom kit scenario (run-scenario.sh custom --script this, with the
# pipeline sidecar): the Collector's queue to Jaeger is full, then the
# Collector is restarted with it. Its exporter has one consumer and a
# queue of one request, and Jaeger is stopped, so once a request is being
# retried and another waits, the Collector refuses the rest ("sending queue
# is full", UNAVAILABLE). The plugin sends one span per request and keeps
# what was refused. The Collector is stopped and started again (its queue
# on disk), then Jaeger: the queue goes to Jaeger, and the sidecar's
# `serve --drain` at the end sends what the plugin kept, as the next
# exporter of a host would. Each span must reach Jaeger once.
step jaeger_stop "$PY" "$SCRIPT_DIR/pipeline_control.py" --out "$OUTDIR" jaeger.stop
chat chat "READFILE please read hello.txt"
step restart "$PY" "$SCRIPT_DIR/pipeline_control.py" --out "$OUTDIR" collector.stop collector.start jaeger.start
step settle sleep 10
