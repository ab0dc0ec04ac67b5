#!/usr/bin/env bash
# Python side of the test suite: build the wheel, lint, unit tests, end to end.
#
#   scripts/test-python.sh [--no-e2e] [PYTEST_ARGS...]
#
# Works on a fresh machine with python3 (>= 3.11), cargo and access to PyPI:
# 1. a tools venv ($HERMES_METER_PY_VENV, default target/py/venv) gets maturin,
#    ruff and pytest;
# 2. maturin builds the release wheel into target/py/wheels (the one users
#    get), which is checked to carry no test hooks, and a debug wheel with
#    the cargo feature test-hooks into target/py/test-wheels;
# 3. ruff format --check and ruff check run on python/, tests/ and benches/;
# 4. the test-hooks wheel is installed into the tools venv and tests/python
#    runs (it drives _native._spool_records and HERMES_METER_TEST_PANIC);
# 5. unless --no-e2e: tests/e2e/kit/setup-hermes.sh makes a venv with
#    hermes-agent==0.19.0 and the release wheel (target/py/hermes-venv), and
#    tests/e2e runs every kit scenario in real Hermes against the loopback
#    mock (about 2 minutes on 2 cores; HERMES_METER_E2E_JOBS sets how many
#    scenarios run at once, default 4); only its panic run uses the
#    test-hooks wheel, installed in a copy of that venv.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
E2E=1
if [ "${1:-}" = "--no-e2e" ]; then E2E=0; shift; fi
PY=${PYTHON:-python3}
WORK=$ROOT/target/py
VENV=${HERMES_METER_PY_VENV:-$WORK/venv}
PIP=(--disable-pip-version-check -q)

step() { printf '\n== %s\n' "$*"; }

step "tools venv ($VENV)"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
# mcp: the Model Context Protocol's Python SDK, the real client tests/python/test_mcp.py drives `hermes-meter mcp` with.
"$VENV/bin/python" -m pip install "${PIP[@]}" "maturin>=1.7,<2" "ruff>=0.6" "pytest>=8" "pyyaml>=6" "ziglang>=0.13" "mcp==2.3.0"

step "wheel (manylinux_2_28, abi3) and sdist"
rm -rf "$WORK/wheels" "$WORK/test-wheels" "$WORK/sdist"
# An extension a `maturin develop` left in the source tree must not ride along.
rm -f python/hermes_meter/_native*.so
# zig links against glibc 2.28's symbols whatever this machine's glibc, so
# the tag maturin checks and writes is one every current distribution
# installs (the release workflow builds the other platforms).
PATH="$VENV/bin:$PATH" "$VENV/bin/maturin" build --release --locked --zig --compatibility manylinux_2_28 -o "$WORK/wheels"
WHEEL=$(ls "$WORK"/wheels/hermes_meter-*.whl | tail -n 1)
"$VENV/bin/maturin" sdist -o "$WORK/sdist"
SDIST=$(ls "$WORK"/sdist/hermes_meter-*.tar.gz | tail -n 1)
# The sdist holds what a build from it needs: the lock file, the sources
# with the schema, the Python package (its contents are checked, not built).
"$VENV/bin/python" - "$SDIST" <<'EOF'
import sys, tarfile
names = tarfile.open(sys.argv[1]).getnames()
root = names[0].split("/")[0]
need = ["Cargo.toml", "Cargo.lock", "pyproject.toml", "src/lib.rs",
        "crates/hermes-meter-model/Cargo.toml", "crates/hermes-meter-model/src/lib.rs",
        "crates/hermes-meter-store/Cargo.toml", "crates/hermes-meter-runtime/Cargo.toml",
        "crates/hermes-meter-python/Cargo.toml", "crates/hermes-meter-python/src/lib.rs",
        "crates/hermes-meter-store/src/migrations/0001_initial.sql",
        "python/hermes_meter/__init__.py"]
missing = [n for n in need if f"{root}/{n}" not in names]
sys.exit(f"sdist lacks {missing}" if missing else 0)
EOF
# The wheel users get has no test hooks: neither the function's nor the
# variable's name is anywhere in its extension.
"$VENV/bin/python" - "$WHEEL" <<'EOF'
import sys, zipfile
wheel = zipfile.ZipFile(sys.argv[1])
found = [
    (name, hook)
    for name in wheel.namelist()
    if name.endswith(".so")
    for hook in (b"_spool_records", b"HERMES_METER_TEST_PANIC")
    if hook in wheel.read(name)
]
sys.exit(f"test hooks in the shipped wheel: {found}" if found else 0)
EOF

step "test wheel (feature test-hooks)"
# A debug build: it reuses the dependencies `cargo test` compiled, where a
# second release build would compile the crate optimised again (minutes on
# 2 cores) for tests that measure no speed.
"$VENV/bin/maturin" build --features test-hooks -o "$WORK/test-wheels"
TEST_WHEEL=$(ls "$WORK"/test-wheels/hermes_meter-*.whl | tail -n 1)

step "ruff"
LINT=(python catalog collector-config/check_versions.py tests/python tests/e2e/conftest.py tests/e2e/test_scenarios.py tests/e2e/test_crash.py benches/hook_overhead.py benches/register_time.py benches/pipeline.py tests/e2e/test_budgets.py tests/e2e/test_otlp.py tests/e2e/test_traces.py tests/e2e/otlp_sidecar.py tests/e2e/scripts/gateway_session.py tests/e2e/scripts/pipeline_control.py tests/e2e/test_dashboard.py tests/e2e/dashboard_probe.py tests/e2e/test_older_hermes.py tests/e2e/test_fleet.py tests/e2e/test_wheel.py tests/e2e/test_pipeline.py tests/e2e/pipeline_sidecar.py tests/e2e/grafana_panels.py tests/e2e/test_grafana_totals.py tests/e2e/test_isolation.py tests/e2e/test_dropped_load.py tests/e2e/test_agent_tool.py)
"$VENV/bin/ruff" format --check "${LINT[@]}"
"$VENV/bin/ruff" check "${LINT[@]}"

step "package tests"
"$VENV/bin/python" -m pip install "${PIP[@]}" --force-reinstall --no-deps "$TEST_WHEEL"
# Temporary directories of passed tests are removed (pytest keeps the last
# three runs' otherwise: the end-to-end ones hold ~20 MB of Hermes homes).
KEEP=(-o tmp_path_retention_policy=failed)
# With a selection (-k ...), "no test selected here" (5) is no failure.
"$VENV/bin/python" -m pytest tests/python -q "${KEEP[@]}" "$@" || { rc=$?; [ "$rc" = 5 ] && [ $# -gt 0 ] || exit "$rc"; }

if [ "$E2E" = 1 ]; then
    step "end to end (real Hermes 0.19.0)"
    HERMES_VENV=$WORK/hermes-venv
    if [ ! -x "$HERMES_VENV/bin/hermes" ]; then
        bash tests/e2e/kit/setup-hermes.sh "$HERMES_VENV"
    fi
    "$HERMES_VENV/bin/python" -m pip install "${PIP[@]}" --force-reinstall --no-deps "$WHEEL"
    # opentelemetry-proto decodes what the e2e OTLP receiver saved; aiohttp
    # is the gateway's API server platform (hermes-agent[messaging] pins it).
    "$HERMES_VENV/bin/python" -m pip install "${PIP[@]}" "pytest>=8" "opentelemetry-proto>=1.27" "aiohttp==3.14.1"
    HERMES_METER_E2E_HERMES=$HERMES_VENV/bin/hermes HERMES_METER_E2E_WHEEL=$WHEEL HERMES_METER_E2E_TEST_WHEEL=$TEST_WHEEL \
        "$HERMES_VENV/bin/python" -m pytest tests/e2e -q "${KEEP[@]}" "$@"

    step "end to end (real Hermes 0.22 on Python 3.14, in the chroot of scripts/py314.sh)"
    bash scripts/py314.sh setup
    # The same suite, run inside: the wheel users get installed into that
    # Hermes's venv, its own Python running pytest.
    bash scripts/py314.sh run bash -c '
        set -e
        python -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$1"
        HERMES_METER_E2E_HERMES=/opt/hermes/bin/hermes HERMES_METER_E2E_WHEEL=$1 HERMES_METER_E2E_TEST_WHEEL=$2 \
            python -m pytest tests/e2e -q -o tmp_path_retention_policy=failed -p no:cacheprovider "${@:3}"
    ' _ "$WHEEL" "$TEST_WHEEL" "$@"
fi
printf '\npython tests: ok\n'
