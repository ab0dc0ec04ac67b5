#!/usr/bin/env bash
# The demo: replay sessions recorded from a real Hermes 0.19.0 into a fresh
# store, print the spend report and the trace of the newest session. No collector, no network, no Hermes.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet --bin hermes-meter
bin="${CARGO_TARGET_DIR:-target}/release/hermes-meter"
home=$(mktemp -d)
trap 'rm -rf "$home"' EXIT
export HERMES_METER_HOME="$home"
cp examples/pricing.toml "$home/pricing.toml"
"$bin" replay examples/sessions.jsonl
"$bin" report --tz UTC
"$bin" status
"$bin" trace --last
