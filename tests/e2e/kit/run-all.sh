#!/usr/bin/env bash
# Run every scenario (or those listed in $E2E_SCENARIOS) into OUTROOT/<scenario>.
#
#   run-all.sh OUTROOT [run-scenario options...]      e.g. run-all.sh "$TMPDIR/e2e" --probe
#
# Prints one summary line per scenario: name, Hermes rc, seconds, hook count.
# Exit status: 0 if every run-scenario.sh invocation worked (whatever Hermes'
# own rc), 1 otherwise.
set -u
KIT_DIR=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 1 ] || { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
ROOT=$1; shift
mkdir -p "$ROOT" || exit 2
FAILED=0
for s in ${E2E_SCENARIOS:-$(bash "$KIT_DIR/run-scenario.sh" --list)}; do
    t0=$(date +%s)
    if bash "$KIT_DIR/run-scenario.sh" "$s" "$ROOT/$s" "$@" 2> "$ROOT/$s.harness.log"; then
        hooks=0; [ -f "$ROOT/$s/hooks.jsonl" ] && hooks=$(wc -l < "$ROOT/$s/hooks.jsonl")
        printf '%-14s rc=%-3s %4ss hooks=%s\n' "$s" "$(cat "$ROOT/$s/rc")" "$(( $(date +%s) - t0 ))" "$hooks"
    else
        printf '%-14s HARNESS-ERROR (see %s)\n' "$s" "$ROOT/$s.harness.log"
        FAILED=1
    fi
done
exit $FAILED
