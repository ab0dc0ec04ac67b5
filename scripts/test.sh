#!/usr/bin/env bash
# The one test command (README, "The two commands"). CI runs exactly this
# through .ci/run. It first checks every prerequisite and stops with one
# line per missing one, naming how to install it:
#   Rust >= 1.89 with the rustfmt and clippy components; python3 >= 3.11
#   with venv and PyYAML; promtool and prometheus (Debian `prometheus`);
#   ip and unshare (iproute2, util-linux) for the end-to-end namespaces;
#   headless chromium for the viewer's browser tests;
#   Debian's PostgreSQL 15 (initdb, postgres, psql, pg_isready) for the
#   fleet budget tests, and setpriv (util-linux) to run it as nobody as root;
#   root and debootstrap, for the Debian unstable chroot with Python 3.14
#   where Hermes 0.22 runs (scripts/py314.sh; the mirror is apt's own);
#   Go >= 1.26, to build the OpenTelemetry Collector and Jaeger v2 the
#   pipeline tests run, and actionlint (the release workflow's lint);
#   access to PyPI and the Go module proxy the first time (maturin, ruff,
#   pytest, ziglang, hermes-agent; the Collector, Jaeger, actionlint).
# Nothing is skipped: a test that needs one of these fails without it.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=0
need() { # need WHAT HOW: print the line, count it
    echo "missing: $1; $2" >&2
    missing=$((missing + 1))
}
if ! command -v cargo >/dev/null 2>&1; then
    need "cargo (Rust >= 1.89)" "install Rust with rustup: https://rustup.rs"
else
    rust=$(rustc --version 2>/dev/null | awk '{print $2}')
    if ! printf '1.89.0\n%s\n' "${rust:-0}" | sort -V -C; then
        need "Rust >= 1.89 (found ${rust:-none})" "rustup update stable"
    fi
    cargo fmt --version >/dev/null 2>&1 || need "rustfmt" "rustup component add rustfmt"
    cargo clippy --version >/dev/null 2>&1 || need "clippy" "rustup component add clippy"
fi
PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    need "python3 >= 3.11 ($PY)" "apt-get install -y python3 (Debian 12 has 3.11), or set PYTHON"
else
    "$PY" -c 'import venv, ensurepip' 2>/dev/null || need "python3 venv" "apt-get install -y python3-venv"
    "$PY" -c 'import yaml' 2>/dev/null || need "PyYAML" "apt-get install -y python3-yaml"
fi
command -v go >/dev/null 2>&1 || need "go >= 1.26 (builds the OTel Collector, Jaeger and actionlint)" "install Go: https://go.dev/dl"
command -v promtool >/dev/null 2>&1 || need "promtool" "apt-get install -y prometheus"
[ -x /usr/bin/prometheus ] || need "/usr/bin/prometheus (the real-Prometheus test)" "apt-get install -y prometheus"
command -v ip >/dev/null 2>&1 || need "ip (end-to-end loopback namespaces)" "apt-get install -y iproute2"
command -v unshare >/dev/null 2>&1 || need "unshare (end-to-end loopback namespaces)" "apt-get install -y util-linux"
pg_bin=${PG_BIN:-/usr/lib/postgresql/15/bin}
for tool in initdb postgres psql pg_isready; do
    [ -x "$pg_bin/$tool" ] || { need "$pg_bin/$tool (the fleet budget tests)" "apt-get install -y postgresql, or set PG_BIN"; break; }
done
# Hermes 0.22 runs on Python 3.14 in a Debian unstable chroot (scripts/py314.sh).
[ "$(id -u)" = 0 ] || need "root (the Hermes 0.22 tests run in a chroot)" "run as root, or in CI"
command -v debootstrap >/dev/null 2>&1 || [ -x target/py314/root/opt/hermes/bin/hermes ] ||
    need "debootstrap (the Python 3.14 chroot for Hermes 0.22)" "apt-get install -y debootstrap"
if [ "$(id -u)" = 0 ] && ! command -v setpriv >/dev/null 2>&1; then
    need "setpriv (PostgreSQL refuses root; the fleet tests run it as nobody)" "apt-get install -y util-linux"
fi
if [ -z "${CHROMIUM:-}" ] && ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1 &&
    ! command -v google-chrome >/dev/null 2>&1; then
    need "chromium (the viewer's browser tests)" "apt-get install -y chromium, or set CHROMIUM"
fi
if "$PY" -c '' 2>/dev/null && { [ ! -x "${HERMES_METER_PY_VENV:-target/py/venv}/bin/maturin" ] ||
    [ ! -x target/py/hermes-venv/bin/hermes ]; }; then
    index=${PIP_INDEX_URL:-https://pypi.org/simple/}
    if ! "$PY" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=15)' "$index" >/dev/null 2>&1; then
        need "access to $index (first run: maturin, ruff, pytest, hermes-agent==0.19.0)" \
            "allow HTTPS to PyPI, or set PIP_INDEX_URL to a mirror"
    fi
fi
if [ "$missing" -gt 0 ]; then
    echo "scripts/test.sh: $missing prerequisite(s) missing (README, \"The two commands\"); nothing was run" >&2
    exit 1
fi

steps=0
step() {
    echo
    echo "=== $*"
    "$@"
    steps=$((steps + 1))
}

step cargo fmt --all -- --check
step cargo clippy --workspace --all-targets --features services -- -D warnings
step cargo clippy --workspace --all-targets --features test-hooks -- -D warnings
# Everything that needs only Rust.
step cargo test --workspace --no-fail-fast
# What needs PostgreSQL, Prometheus and Chromium, in its own binary; every
# test in it must have run and passed (none filtered, none ignored).
services_ran() {
    local out expected
    out=$(cargo test --features services --test services -- --include-ignored 2>&1) || { echo "$out"; return 1; }
    echo "$out" | grep -E '^test |^test result'
    expected=$(cargo test --features services --test services -- --list 2>/dev/null | grep -c ': test$')
    echo "$out" | grep -q "^test result: ok. $expected passed; 0 failed; 0 ignored; 0 measured; 0 filtered out" || {
        echo "the services binary did not run its $expected tests" >&2
        return 1
    }
}
step services_ran
# A fixed fuzzing budget for the decoder and the replay reader (proptest).
step env PROPTEST_CASES=4096 cargo test -p hermes-meter-store --test store decode_props
# The real Collector and Jaeger, built once from their Go modules.
step bash scripts/build-otel-tools.sh
step bash collector-config/check.sh
step bash scripts/lint-workflows.sh
if [ -f scripts/test-python.sh ]; then
    step bash scripts/test-python.sh
fi

echo
echo "steps: $steps passed, 0 failed"
