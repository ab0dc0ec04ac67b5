#!/usr/bin/env bash
# Lints .github/workflows with actionlint, built once with Go into
# target/tools/bin (the Go module proxy is needed the first time).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ACTIONLINT_VERSION=v1.7.12
BIN=$ROOT/target/tools/bin
if [ ! -x "$BIN/actionlint" ] || ! "$BIN/actionlint" -version | head -n 1 | grep -qx "$ACTIONLINT_VERSION"; then
    mkdir -p "$BIN"
    GOBIN=$BIN go install "github.com/rhysd/actionlint/cmd/actionlint@$ACTIONLINT_VERSION"
fi
"$BIN/actionlint" -version | head -n 1
cd "$ROOT"
"$BIN/actionlint" .github/workflows/*.yml
echo "workflows: ok"
