#!/usr/bin/env bash
# Builds the real OpenTelemetry Collector (tools/otelcol: core v0.165.0
# with the memorylimiterextension module at v0.149.0, the newest served,
# contrib v0.165.1) and Jaeger v2 (tools/jaeger: v1.75.0) that the
# end-to-end pipeline tests run, into target/tools/bin. Each is rebuilt only
# when its module (go.mod, go.sum, sources) changed: a stamp beside the
# binary holds the hash it was built from. Needs Go >= 1.26 and the Go
# module proxy the first time (about 1 minute of downloads, 10 minutes of
# building on 2 cores).
#
#   scripts/build-otel-tools.sh      prints the two binaries' paths
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/target/tools/bin
mkdir -p "$BIN"

build() { # build NAME MODULE_DIR PACKAGE
    local name=$1 dir=$ROOT/$2 pkg=$3 stamp
    stamp=$(cd "$dir" && { go version; find . -maxdepth 1 \( -name '*.go' -o -name 'go.mod' -o -name 'go.sum' \) |
        LC_ALL=C sort | xargs cat; } | sha256sum | cut -c1-16)
    if [ -x "$BIN/$name" ] && [ "$(cat "$BIN/$name.stamp" 2>/dev/null)" = "$stamp" ]; then
        return
    fi
    echo "building $name ($2)" >&2
    (cd "$dir" && go build -mod=readonly -trimpath -o "$BIN/$name.tmp" "$pkg")
    mv "$BIN/$name.tmp" "$BIN/$name"
    echo "$stamp" > "$BIN/$name.stamp"
}

build otelcol-hermes-meter tools/otelcol .
build jaeger tools/jaeger github.com/jaegertracing/jaeger/cmd/jaeger
echo "HERMES_METER_OTELCOL=$BIN/otelcol-hermes-meter"
echo "HERMES_METER_JAEGER=$BIN/jaeger"
