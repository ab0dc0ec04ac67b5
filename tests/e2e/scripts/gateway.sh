# Custom kit scenario (run-scenario.sh custom --script this): the Hermes
# gateway with its OpenAI-compatible API server platform on loopback, one
# conversation of two turns (X-Hermes-Session-Id keeps the session), a pause
# between them, then SIGTERM, as a service manager stops it. One step
# covers the gateway's whole life, so a test can tell what it sent before
# it ended. Sourced by the kit.
step gateway "$PY" "$SCRIPT_DIR/gateway_session.py" --hermes "$HERMES" --out "$OUTDIR"
