# Custom kit scenario (run-scenario.sh custom --script this, with the
# pipeline sidecar): the gateway of gateway.sh, with the Collector stopped
# for 30 s after the first of three turns (see gateway_session.py --outage).
step gateway "$PY" "$SCRIPT_DIR/gateway_session.py" --hermes "$HERMES" --out "$OUTDIR" --outage 30
