#!/usr/bin/env bash
# Records the hook fixtures (tests/fixtures) anew from a real Hermes: every
# kit scenario with the recording probe, machine paths replaced by
# placeholders (tests/e2e/kit/make-fixtures.sh).
#
#   scripts/make-fixtures.sh 0.19    Hermes 0.19.0 on this machine's Python
#                                    (target/py/hermes-venv) -> tests/fixtures/
#   scripts/make-fixtures.sh 0.22    Hermes 0.22 on Python 3.14 in the chroot
#                                    (scripts/py314.sh) -> tests/fixtures/hermes-0.22/
#
# E2E_SCENARIOS="failalways cron" records only those. Ids and times change
# from one recording to the next; the shapes do not. About 10 minutes
# (0.22's failalways waits out Hermes's auto-recovery cycles, ~5 min).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
WORK=$ROOT/target/fixtures-work
rm -rf "$WORK"
case "${1:-}" in
    0.19)
        [ -x target/py/hermes-venv/bin/hermes ] || bash tests/e2e/kit/setup-hermes.sh target/py/hermes-venv
        HERMES_BIN=$ROOT/target/py/hermes-venv/bin/hermes E2E_PYTHON=$ROOT/target/py/hermes-venv/bin/python \
            bash tests/e2e/kit/make-fixtures.sh tests/fixtures "$WORK"
        ;;
    0.22)
        bash scripts/py314.sh setup
        bash scripts/py314.sh run env HERMES_BIN=/opt/hermes/bin/hermes E2E_PYTHON=/opt/hermes/bin/python \
            E2E_SCENARIOS="${E2E_SCENARIOS:-}" bash tests/e2e/kit/make-fixtures.sh tests/fixtures/hermes-0.22 "$WORK"
        ;;
    *) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
