"""The plugin in older Hermes releases from the package index.

Hermes 0.19.0 is the release every other end-to-end test drives. The older
ones users still run get one real REPL session each (two turns and the
title generation, the ``multi_turn`` scenario) with the plugin enabled as a
user enables it and only the collector endpoint set:

- the ledger equals what the mock provider served, the auxiliary call
  included (these releases have no auxiliary accounting at all: the plugin
  reads the auxiliary client's response check instead);
- every span arrived once, in one tree per trace;
- the plugin registered only the hooks that release knows.

Each release is installed once into ``target/e2e/hermes-<version>`` (about a
minute from the package index; kept for later runs).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from conftest import KIT, NEW_LINE, PLUGIN_KEY, ROOT, Run
from test_scenarios import query, served
from test_traces import _received

# Said in every report line it appears in (-rs), never skipped silently.
pytestmark = pytest.mark.skipif(
    NEW_LINE, reason="runs in the Hermes 0.19 suite only: it installs Hermes 0.17 and 0.18 itself"
)


#: Older releases with the hooks the plugin needs (0.17 added
#: api_request_error and subagent_start; 0.18 is the last before 0.19.0).
OLDER = ["0.18.2", "0.17.0"]


def _our_wheel() -> str:
    given = os.environ.get("HERMES_METER_E2E_WHEEL")
    if given:
        return given
    wheels = ROOT / "target" / "e2e" / "older-wheels"
    shutil.rmtree(wheels, ignore_errors=True)
    maturin = shutil.which("maturin") or str(Path(sys.executable).parent / "maturin")
    subprocess.run(
        [maturin, "build", "--release", "-o", str(wheels)], cwd=ROOT, check=True, capture_output=True
    )
    return sorted(glob.glob(str(wheels / "hermes_meter-*.whl")))[-1]


@pytest.fixture(scope="module")
def wheel() -> str:
    return _our_wheel()


@pytest.fixture(scope="module", params=OLDER)
def older(request, wheel: str, tmp_path_factory) -> tuple[str, Run]:
    version = request.param
    venv = ROOT / "target" / "e2e" / f"hermes-{version}"
    if not (venv / "bin" / "hermes").exists():
        env = dict(os.environ, HERMES_VERSION=version)
        subprocess.run(
            ["bash", str(KIT / "setup-hermes.sh"), str(venv)],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "--force-reinstall", "--no-deps", wheel], check=True, capture_output=True)
    outdir = tmp_path_factory.mktemp(f"hermes-{version}") / "run"
    cmd = ["bash", str(KIT / "run-scenario.sh"), "multi_turn", str(outdir), "--probe"]
    cmd += ["--enable", PLUGIN_KEY, "--env", f"HERMES_METER_HOME={outdir / 'meter'}"]
    cmd += ["--sidecar", f'"$E2E_PYTHON" {Path(__file__).parent / "otlp_sidecar.py"}']
    cmd += ["--env", "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf"]
    cmd += ["--env", "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318"]
    env = dict(os.environ, HERMES_BIN=str(venv / "bin" / "hermes"), E2E_PYTHON=sys.executable)
    p = subprocess.run(cmd, env=env, text=True, capture_output=True)
    run = Run(f"multi_turn on {version}", outdir, p.returncode, p.stderr)
    assert run.harness_rc == 0, run.harness_log
    assert run.rc == 0, run.stdout
    return version, run


def test_the_ledger_equals_what_the_provider_served(older: tuple[str, Run]) -> None:
    version, run = older
    billed = served(run)
    assert [r["decision"] for r in billed].count("AUX") == 1, "a title generation was served"
    (calls, inp, out) = query(
        run,
        "SELECT COUNT(*), SUM(input_tokens + cache_read_tokens + cache_write_tokens), SUM(output_tokens)"
        " FROM llm_calls",
    )[0]
    assert calls == len(billed), version
    assert inp == sum(r["usage"]["prompt_tokens"] for r in billed), version
    assert out == sum(r["usage"]["completion_tokens"] for r in billed), version
    assert query(run, "SELECT aux_task FROM llm_calls WHERE aux_task IS NOT NULL") == [("title_generation",)]
    assert query(run, "SELECT COUNT(*) FROM decode_problems") == [(0,)], version


def test_every_span_arrives_once_in_one_tree_per_trace(older: tuple[str, Run]) -> None:
    version, run = older
    spans = [r.span for r in _received(run)]
    assert spans, f"{version}: nothing arrived"
    ids = Counter(s.span_id for s in spans)
    assert all(n == 1 for n in ids.values()), f"{version}: a span arrived twice"
    roots = Counter(s.trace_id for s in spans if not s.parent_span_id)
    assert all(roots[t] == 1 for t in {s.trace_id for s in spans}), f"{version}: a trace without one root"
    assert all(s.parent_span_id in ids for s in spans if s.parent_span_id), f"{version}: an orphan"
    names = Counter(s.name for s in spans)
    assert names["invoke_agent hermes"] == 2 and names["hermes.session"] == 1, names
