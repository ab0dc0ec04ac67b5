"""End-to-end harness: a real Hermes with our wheel, every kit scenario.

The suite runs once per Hermes line (``scripts/test-python.sh``): Hermes
0.19.0 on this machine's Python 3.11, and Hermes 0.22 on Python 3.14 in
the Debian unstable chroot ``scripts/py314.sh`` makes. Every test's name
ends with the Hermes it ran (``[hermes 0.22.2.post1]``); where the two lines
behave differently a test branches on :data:`HERMES` and says why.

The wheel is built with maturin and installed, with hermes-agent==0.19.0, into
a venv by the kit's ``setup-hermes.sh``; the plugin is enabled the way a user
does (``plugins.enabled`` in config.yaml, written by ``run-scenario.sh
--enable hermes-meter``). Each scenario runs once per test session, beside the
kit's recording probe, with ``HERMES_METER_HOME`` inside the scenario's OUTDIR,
so a test compares our store with the raw hook stream of the same run.

Environment:
- ``HERMES_METER_E2E_HERMES``: a ``hermes`` executable whose venv already has
  our wheel (``scripts/test-python.sh`` prepares one); otherwise the harness
  builds the wheel and the venv under ``target/e2e/``.
- ``HERMES_METER_E2E_TEST_WHEEL``: a wheel built with the cargo feature
  ``test-hooks``, which only the panic run uses (the wheel in the Hermes venv
  is the one users get and has no test hooks); otherwise the harness builds
  one (a debug build) under ``target/e2e/``.
- ``HERMES_METER_E2E_OUT``: where runs go (default: a fresh temp directory).
- ``HERMES_METER_E2E_JOBS``: scenarios run at once (default 4; they mostly wait
  on the mock's delays and Hermes's retry backoff).
"""

from __future__ import annotations

import concurrent.futures
import glob
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KIT = ROOT / "tests" / "e2e" / "kit"
PLUGIN_KEY = "hermes-meter"

# A run with a panic injected into every hook of ours.
PANIC_RUN = "panic_readfile"
OTLP_RUN = "otlp_readfile"
# readfile with the loopback receiver and content capture EVENT_ONLY: the
# calls' content goes out as content events (OTLP log records), not on spans.
EVENTS_RUN = "events_readfile"
# Runs with a loopback OTLP receiver and nothing but the endpoint set (the
# plugin's defaults otherwise), by the scenario they run: every way of
# running Hermes the kit drives (docs/trace-model.md, "Traces").
OTLP_RUNS = {
    OTLP_RUN: "readfile",  # hermes chat -q
    "otlp_oneshot": "delegate_sync",  # hermes -z, a synchronous subagent
    "otlp_resume": "resume",  # chat -q, then --resume in a second process
    "otlp_repl": "multi_turn",  # the interactive REPL, two turns
    "otlp_bg": "delegate_bg",  # a background subagent
    "otlp_bg_orphan": "delegate_bg_orphan",  # a background child the exit cuts off
    "otlp_cron": "cron",  # hermes cron run
    "otlp_gateway": "custom:gateway.sh",  # the gateway (API server platform), two turns, SIGTERM
}


@dataclass
class Run:
    scenario: str
    outdir: Path
    harness_rc: int
    harness_log: str

    @property
    def store(self) -> Path:
        return self.outdir / "meter" / "hermes-meter.db"

    @property
    def rc(self) -> int:
        return int((self.outdir / "rc").read_text().strip())

    @property
    def stdout(self) -> str:
        return (self.outdir / "stdout").read_text(errors="replace")


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)


def _build_hermes_venv() -> Path:
    work = ROOT / "target" / "e2e"
    work.mkdir(parents=True, exist_ok=True)
    wheels = work / "wheels"
    shutil.rmtree(wheels, ignore_errors=True)
    maturin = shutil.which("maturin") or str(Path(sys.executable).parent / "maturin")
    _run([maturin, "build", "--release", "-o", str(wheels)], cwd=ROOT)
    wheel = sorted(glob.glob(str(wheels / "hermes_meter-*.whl")))[-1]
    venv = work / "hermes-venv"
    _run(["bash", str(KIT / "setup-hermes.sh"), str(venv), "--force-reinstall", "--no-deps", wheel])
    # The gateway's API server platform (hermes-agent[messaging] pins it).
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "aiohttp==3.14.1"])
    return venv / "bin" / "hermes"


def _test_hooks_hermes(hermes_bin: Path, out: Path) -> Path:
    """A copy of the Hermes venv with the test-hooks build of our package
    installed in place of the shipped one, for the panic run. (Putting the
    build first on PYTHONPATH is not enough: Hermes's bootstrap moves its
    own site-packages to the front of sys.path.)"""
    wheel = os.environ.get("HERMES_METER_E2E_TEST_WHEEL")
    if not wheel:
        wheels = ROOT / "target" / "e2e" / "test-wheels"
        shutil.rmtree(wheels, ignore_errors=True)
        maturin = shutil.which("maturin") or str(Path(sys.executable).parent / "maturin")
        _run([maturin, "build", "--features", "test-hooks", "-o", str(wheels)], cwd=ROOT)
        wheel = sorted(glob.glob(str(wheels / "hermes_meter-*.whl")))[-1]
    venv = out / "hermes-test-hooks"
    shutil.rmtree(venv, ignore_errors=True)
    shutil.copytree(hermes_bin.parent.parent, venv, symlinks=True)
    python = venv / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "-q", "--force-reinstall", "--no-deps", wheel])
    # The copied entry point still names the original venv's interpreter.
    hermes = venv / "bin" / "hermes"
    lines = hermes.read_text().splitlines(keepends=True)
    hermes.write_text(f"#!{python}\n" + "".join(lines[1:]))
    return hermes


def _hermes_version(hermes: str | None) -> tuple[str, tuple[int, ...]]:
    """(``hermes --version``'s version, its numbers) of the Hermes under test."""
    if not hermes:
        return "0.19.0", (0, 19, 0)
    try:
        first = subprocess.run(
            [hermes, "--version"],
            text=True,
            capture_output=True,
            timeout=120,
            env=dict(os.environ, NO_COLOR="1"),
        ).stdout.splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "unknown", (0, 0, 0)
    text = next((w.lstrip("v") for w in first.split() if w.lstrip("v")[:1].isdigit()), "unknown")
    numbers = []
    for part in text.split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        numbers.append(int(digits or 0))
    return text, tuple(numbers)


#: The Hermes under test: its version text and numbers.
HERMES_TEXT, HERMES = _hermes_version(os.environ.get("HERMES_METER_E2E_HERMES"))
#: The 0.21+ line (Python 3.14): worker-thread hooks, auxiliary hooks, the
#: plugin load deadline.
NEW_LINE = HERMES >= (0, 21, 0)


def pytest_report_header() -> str:
    return f"hermes {HERMES_TEXT} ({os.environ.get('HERMES_METER_E2E_HERMES', 'built by the harness')})"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Each test says which Hermes it ran, in every report line.
    for item in items:
        item._nodeid = f"{item.nodeid}[hermes {HERMES_TEXT}]"


@pytest.fixture(scope="session")
def hermes_bin() -> Path:
    given = os.environ.get("HERMES_METER_E2E_HERMES")
    return Path(given) if given else _build_hermes_venv()


def _scenarios() -> list[str]:
    out = _run(["bash", str(KIT / "run-scenario.sh"), "--list"]).stdout
    return out.split()


SCENARIOS = _scenarios()


@pytest.fixture(scope="session")
def runs(hermes_bin: Path) -> Iterator[dict[str, Run]]:
    """Every scenario (and the panic run), run once, a few at a time."""
    # HERMES_METER_E2E_OUT keeps the runs for a look afterwards; otherwise
    # they go when the session ends (about 20 MB of Hermes homes and stores).
    root = os.environ.get("HERMES_METER_E2E_OUT")
    out = Path(root) if root else Path(tempfile.mkdtemp(prefix="hermes-meter-e2e-"))
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, HERMES_BIN=str(hermes_bin), E2E_PYTHON=sys.executable)
    jobs = int(os.environ.get("HERMES_METER_E2E_JOBS", "4"))
    panic_hermes = _test_hooks_hermes(hermes_bin, out)

    def one(name: str) -> Run:
        scenario = "readfile" if name in (PANIC_RUN, EVENTS_RUN) else OTLP_RUNS.get(name, name)
        outdir = out / name
        shutil.rmtree(outdir, ignore_errors=True)
        script = []
        if scenario.startswith("custom:"):
            script = ["--script", str(Path(__file__).parent / "scripts" / scenario.split(":", 1)[1])]
            scenario = "custom"
        # 600 s a command: Hermes 0.22 waits out its auto-recovery cycles
        # (about 5 minutes) before failalways ends.
        cmd = [
            "bash",
            str(KIT / "run-scenario.sh"),
            scenario,
            str(outdir),
            "--probe",
            "--timeout",
            "600",
            *script,
        ]
        cmd += ["--enable", PLUGIN_KEY, "--env", f"HERMES_METER_HOME={outdir / 'meter'}"]
        if name == PANIC_RUN:
            cmd += ["--env", "HERMES_METER_TEST_PANIC=*"]
        if name == EVENTS_RUN:
            cmd += ["--env", "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=EVENT_ONLY"]
        if name in OTLP_RUNS or name == EVENTS_RUN:
            # A loopback OTLP/HTTP receiver in the scenario's namespace.
            cmd += ["--sidecar", f'"$E2E_PYTHON" {Path(__file__).parent / "otlp_sidecar.py"}']
            cmd += ["--env", "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf"]
            cmd += ["--env", "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318"]
        if name == OTLP_RUN:
            cmd += ["--env", "OTEL_METRIC_EXPORT_INTERVAL=1"]
        run_env = dict(env, HERMES_BIN=str(panic_hermes)) if name == PANIC_RUN else env
        p = subprocess.run(cmd, env=run_env, text=True, capture_output=True)
        return Run(name, outdir, p.returncode, p.stderr)

    # Longest first, so the pool is not left waiting on one slow scenario.
    slow = ["failalways", "multi_turn", "delegate_repl", "delegate_bg_orphan", "failonce", "resume", "cron"]
    slow += ["delegate_bg"]
    slow += ["otlp_gateway", "otlp_repl", "otlp_bg_orphan", "otlp_resume", "otlp_cron", "otlp_bg"]
    names = sorted(
        SCENARIOS + [PANIC_RUN, EVENTS_RUN, *OTLP_RUNS],
        key=lambda s: (s not in slow, slow.index(s) if s in slow else 0),
    )
    # HERMES_METER_E2E_SCENARIOS=a,b runs only those (while working on one;
    # the tests of the others then fail for want of their run).
    only = {n for n in os.environ.get("HERMES_METER_E2E_SCENARIOS", "").split(",") if n}
    if only:
        names = [n for n in names if n in only]
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        results = {r.scenario: r for r in pool.map(one, names)}
    yield results
    if not root:
        shutil.rmtree(out, ignore_errors=True)
