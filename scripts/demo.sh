#!/usr/bin/env bash
# The demo: sessions recorded from a real Hermes 0.19.0 replayed into a
# fresh store, then what the product is for: the spend report, a budget
# over that spend and what it would do, the trace of a session that
# delegated to a subagent, and `status`. No collector, no network, no Hermes.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${CARGO_TARGET_DIR:-target}/debug/hermes-meter"
if [ ! -x "$bin" ]; then
    echo "Building the hermes-meter command line (a debug build of it alone: a few minutes the first time on"
    echo "2 cores, seconds after) ..."
fi
start=$(date +%s)
cargo build --quiet --bin hermes-meter
echo "built in $(($(date +%s) - start)) s"
home=$(mktemp -d)
trap 'rm -rf "$home"' EXIT
export HERMES_METER_HOME="$home"
cp examples/pricing.toml "$home/pricing.toml"
section() { printf '\n=== %s\n' "$*"; }

section "Seven sessions recorded from a real Hermes, replayed into a fresh store"
"$bin" replay examples/sessions.jsonl
section "Where the money went (hermes-meter report)"
"$bin" report --tz UTC
section "A budget: 5 cents a day, and a cap of half a cent on each session (hermes-meter budget set / list)"
"$bin" budget set global daily 0.05
"$bin" budget set session usd 0.005
"$bin" budget list
echo "(The replayed sessions ran on 2026-11-30: today's spend is \$0.) In Hermes, past a line every tool"
echo "call of the session is refused and every LLM call answered before the provider is called; a"
echo "\`chat -q\` or \`hermes -z\` run exits 3, and the agent is never told how to lift the limit. The"
echo "session that spent \$0.1215 in one call above would have been stopped at its next one."
section "The trace of the session that delegated to a subagent (hermes-meter trace)"
"$bin" trace 20261130_013759_e4a976
section "The store and what is wrong, first line first (hermes-meter status)"
"$bin" status
