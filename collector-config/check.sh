#!/usr/bin/env bash
# Checks for collector-config/ and semconv/. Run from anywhere:
#
#   bash collector-config/check.sh
#
# Needs promtool (Debian: `apt-get install -y prometheus`, which also ships
# the server; it need not run) and python3 with PyYAML (python3-yaml).
# Docker is NOT needed: the compose file is only checked for YAML syntax;
# the collector config is validated by the real Collector, which
# scripts/build-otel-tools.sh builds (or $HERMES_METER_OTELCOL names).
#
# Prints one line per check and closes with
#   collector-config: N passed, M failed
# Exits non-zero if any check failed.
set -u

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
passed=0
failed=0

# run NAME DIR CMD...: run CMD in DIR, count and report the result.
run() {
    local name="$1" dir="$2"
    shift 2
    local out
    if out="$(cd "$dir" && "$@" 2>&1)"; then
        passed=$((passed + 1))
        echo "PASS  $name"
    else
        failed=$((failed + 1))
        echo "FAIL  $name"
        printf '%s\n' "$out" | sed 's/^/      /'
    fi
}

have_promtool() {
    if command -v promtool >/dev/null 2>&1; then
        return 0
    fi
    echo "promtool not found: apt-get install -y prometheus (Debian) or put promtool on PATH"
    return 1
}

run "promtool is installed" "$here" have_promtool
# Rule paths in prometheus.yml are relative to the config file, so this works
# from collector-config/ as well as from /etc/prometheus in the container.
run "promtool check config prometheus/prometheus.yml" "$here" \
    promtool check config prometheus/prometheus.yml
run "promtool check rules prometheus/rules/*.yaml" "$here" \
    bash -c 'promtool check rules prometheus/rules/*.yaml'
run "promtool test rules prometheus/tests/*.yaml" "$here" \
    bash -c 'promtool test rules prometheus/tests/*.yaml'
run "dashboard JSON parses (python3 -m json.tool)" "$here" \
    bash -c 'for f in grafana/dashboards/*.json; do python3 -m json.tool "$f" >/dev/null || exit 1; done'
run "YAML syntax (otelcol, compose, provisioning, prometheus)" "$here" \
    python3 -c '
import sys, yaml
for f in sys.argv[1:]:
    with open(f) as fh:
        doc = yaml.safe_load(fh)
    if not isinstance(doc, dict):
        sys.exit(f"{f}: not a YAML mapping")
' otelcol.yaml docker-compose.yaml \
    grafana/provisioning/datasources/datasources.yaml \
    grafana/provisioning/dashboards/dashboards.yaml \
    prometheus/prometheus.yml prometheus/rules/hermes-meter.rules.yaml
# The real Collector (scripts/build-otel-tools.sh builds it; the end-to-end
# pipeline test runs this very file through it into Jaeger).
otelcol="${HERMES_METER_OTELCOL:-$root/target/tools/bin/otelcol-hermes-meter}"
run "otelcol validate --config otelcol.yaml (Collector v0.165.0, contrib v0.165.1)" "$here" \
    "$otelcol" validate --config otelcol.yaml
run "versions agree: versions.env, docker-compose.yaml, tools/otelcol, tools/jaeger" "$root" \
    python3 collector-config/check_versions.py
run "rules, tests and dashboard use registry names; dashboard PromQL parses" "$root" \
    python3 collector-config/lint_names.py
run "semconv docs up to date (gen_docs.py --check)" "$root" \
    python3 semconv/gen_docs.py --check

echo "collector-config: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
