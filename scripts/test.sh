#!/usr/bin/env bash
# The one test command (README, "Run the tests"). CI runs exactly this
# through .ci/run. Needs: cargo, python3 (3.11+) with pip and venv, and
# promtool (Debian package `prometheus`) for the collector-config checks.
set -euo pipefail
cd "$(dirname "$0")/.."

steps=0
step() {
    echo
    echo "=== $*"
    "$@"
    steps=$((steps + 1))
}

step cargo fmt --all -- --check
step cargo clippy --all-targets -- -D warnings
step cargo clippy --all-targets --features python -- -D warnings
step cargo test
# A fixed fuzzing budget for the decoder and the replay reader (proptest).
step env PROPTEST_CASES=4096 cargo test --test decode_props
step bash collector-config/check.sh
if [ -f scripts/test-python.sh ]; then
    step bash scripts/test-python.sh
fi

echo
echo "steps: $steps passed, 0 failed"
