#!/usr/bin/env bash
# Regenerate hook fixtures: run every scenario with hook_probe, then copy each
# hooks.jsonl to FIXDIR/<scenario>.jsonl with machine paths replaced.
#
#   make-fixtures.sh FIXDIR WORKDIR
#
# WORKDIR (absent or empty) receives the raw runs.  Placeholders used:
#   <run OUTDIR>/work -> /home/user/work       <run OUTDIR>/home -> /home/user/.hermes
#   <run OUTDIR>      -> /home/user/e2e-out    Hermes' venv      -> /home/user/venv
#   this kit folder   -> /home/user/shared/e2e $HOME             -> /home/user
#   $TMPDIR (if set)  -> /tmp                  `uname -r`        -> 6.0.0-generic
# Fails if any of those paths is left in a fixture.
set -u
KIT_DIR=$(cd "$(dirname "$0")" && pwd)
[ $# -eq 2 ] || { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
FIX=$1; WORK=$2
mkdir -p "$FIX" "$WORK" || exit 2
FIX=$(cd "$FIX" && pwd); WORK=$(cd "$WORK" && pwd)
HERMES=${HERMES_BIN:-$(command -v hermes 2>/dev/null || true)}
[ -x "$HERMES" ] || { echo "make-fixtures: set HERMES_BIN" >&2; exit 2; }
PY=${E2E_PYTHON:-python3}
VENV=$("$(dirname "$HERMES")/python" -c 'import sys; print(sys.prefix)' 2>/dev/null || true)
case "$VENV" in ""|/|/usr|/usr/local) VENV= ;; esac

# 600 s a command: Hermes 0.22 waits out five auto-recovery cycles
# (15/30/60/60/60 s) before failalways ends.
HERMES_BIN=$HERMES bash "$KIT_DIR/run-all.sh" "$WORK" --probe --timeout "${E2E_TIMEOUT:-600}" || exit 1

STATUS=0
for d in "$WORK"/*/; do
    s=$(basename "$d"); d=${d%/}
    [ -f "$d/hooks.jsonl" ] || continue
    maps=(--map "$(uname -r)=6.0.0-generic"); forbid=(--forbid "$WORK" --forbid "$KIT_DIR")
    for base in "$d" "$(cd "$d" && pwd -P)"; do       # also the symlink-resolved form
        maps+=(--map "$base/work=/home/user/work" --map "$base/home=/home/user/.hermes"
               --map "$base=/home/user/e2e-out")
    done
    # The runs' root too: Hermes cuts long strings, a run's path with them.
    maps+=(--map "$WORK=/home/user/e2e-runs")
    for base in "$KIT_DIR" "$(cd "$KIT_DIR" && pwd -P)"; do
        maps+=(--map "$base=/home/user/shared/e2e")
    done
    [ -n "$VENV" ] && { maps+=(--map "$VENV=/home/user/venv"); forbid+=(--forbid "$VENV"); }
    case "${HOME:-/}" in /) ;; *) maps+=(--map "$HOME=/home/user"); forbid+=(--forbid "$HOME") ;; esac
    case "${TMPDIR:-/tmp}" in /tmp|/tmp/) ;; *) maps+=(--map "${TMPDIR%/}=/tmp") ;; esac
    "$PY" "$KIT_DIR/sanitize_paths.py" "$d/hooks.jsonl" "$FIX/$s.jsonl" "${maps[@]}" "${forbid[@]}" || STATUS=1
done
du -sh "$FIX"
exit $STATUS
