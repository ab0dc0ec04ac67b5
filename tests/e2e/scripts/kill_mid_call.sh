# Custom kit scenario (run-scenario.sh custom --script this): start a real
# Hermes turn whose model calls the mock delays by 1 s (SLOW), and kill -9
# the Hermes process while its second model call is in flight (after the
# tool call), so the session, the turn, a finished LLM call, a tool call and
# an LLM call that never returns are all left open. Sourced by the kit.
(cd "$WORK" && exec "$HERMES" chat -q "READFILE SLOW please read hello.txt" --quiet \
    > "$OUTDIR/stdout" 2> "$OUTDIR/stderr") < /dev/null &
victim=$!
# The second pre_api_request is the probe's line for the call in flight.
for _ in $(seq 600); do
    n=$(grep -c '"hook": "pre_api_request"' "$OUTDIR/hooks.jsonl" 2>/dev/null || true)
    [ "${n:-0}" -ge 2 ] && break
    sleep 0.05
done
# Give our hook (registered after the probe or before it) time to return.
sleep 0.2
kill -9 "$victim"
wait "$victim"
echo "$?" > "$OUTDIR/killed_rc"
