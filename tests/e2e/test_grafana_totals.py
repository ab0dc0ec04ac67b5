"""The Grafana dashboard's totals, evaluated by Debian's real Prometheus,
equal ``hermes-meter report``.

One store, scraped from ``hermes-meter serve --prometheus`` every second:
``readfile`` is recorded before the time range begins; ``cron`` (a new
``hermes_platform``, so new series) and ``terminal_ok`` (a new tool, and the
``cli`` series growing) are recorded inside it. Each "(time range)" panel's
query, taken from the dashboard with Grafana's variables filled in as
Grafana would, must then say what the report counted in between; over a
range that holds the store's whole life, what it counted in all. No Hermes
and no Collector: the Collector's exporter serves the same names (the
pipeline test compares those with the report too).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import grafana_panels
import pytest
from conftest import NEW_LINE, ROOT

CLI = Path(sys.executable).parent / "hermes-meter"
PROMETHEUS = os.environ.get("PROMETHEUS", "/usr/bin/prometheus")
FIXTURES = ROOT / "tests" / "fixtures"

# Said in every report line it appears in (-rs), never skipped silently.
pytestmark = pytest.mark.skipif(
    NEW_LINE, reason="runs in the Hermes 0.19 suite only: it drives no Hermes (serve and Prometheus)"
)


def _free_addr() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def _poll(what: str, check, seconds: float = 90.0):
    """Calls ``check`` until it returns something truthy, for ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            got = check()
        except OSError:
            got = None
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {seconds} s")
        time.sleep(0.2)


def _query(prom: str, expr: str, at: float | None = None) -> dict[str, float]:
    """An instant query's result, by the labels of each series."""
    params = {"query": expr} | ({"time": f"{at:.3f}"} if at is not None else {})
    with urllib.request.urlopen(
        f"http://{prom}/api/v1/query?{urllib.parse.urlencode(params)}", timeout=10
    ) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", body
    return {
        ",".join(f"{k}={v}" for k, v in sorted(s["metric"].items())): float(s["value"][1])
        for s in body["data"]["result"]
    }


def _total(prom: str, expr: str, at: float | None = None) -> float | None:
    """The sum of an instant query's values; None when it has no series."""
    result = _query(prom, expr, at)
    return sum(result.values()) if result else None


def _report(env: dict) -> dict:
    p = subprocess.run([str(CLI), "report", "--json"], env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def _replay(env: dict, *fixtures: str) -> None:
    p = subprocess.run(
        [str(CLI), "replay", *(str(FIXTURES / f"{f}.jsonl") for f in fixtures)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr


def _shown(prom: str, range_seconds: int, at: float) -> dict[str, dict[str, float]]:
    def query(expr: str) -> list[dict]:
        params = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"})
        with urllib.request.urlopen(f"http://{prom}/api/v1/query?{params}", timeout=10) as r:
            return json.loads(r.read())["data"]["result"]

    return grafana_panels.shown(query, range_seconds)


def test_the_dashboards_range_totals_equal_the_report_with_a_series_born_in_the_range(tmp_path):
    assert Path(PROMETHEUS).exists(), f"{PROMETHEUS} missing: apt-get install -y prometheus"
    home = tmp_path / "meter"
    # Priced (examples/pricing.toml prices the fixtures' model), so spend counts too.
    home.mkdir(mode=0o700)
    shutil.copy(ROOT / "examples" / "pricing.toml", home / "pricing.toml")
    env = dict(
        os.environ,
        HERMES_METER_HOME=str(home),
        OTEL_TRACES_EXPORTER="none",
        HERMES_METER_SESSION_GRACE_SECONDS="0",
    )
    # `serve --prometheus` alone: the endpoint, no OTLP push.
    env.pop("OTEL_METRICS_EXPORTER", None)
    _replay(env, "readfile")
    before = _report(env)
    assert before["totals"]["cost_usd"] > 0

    serve_addr, prom = _free_addr(), _free_addr()
    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: hermes-meter\n"
        f"    static_configs:\n      - targets: ['{serve_addr}']\n"
    )
    procs = [
        subprocess.Popen(
            [str(CLI), "serve", "--prometheus", serve_addr],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=(tmp_path / "serve.log").open("wb"),
        ),
        subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address={prom}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(tmp_path / "prometheus.log").open("wb"),
        ),
    ]
    try:
        first = time.time()
        # The range's start comes after a few scrapes of the first data.
        cost = "gen_ai_client_operation_cost_sum"
        _poll(
            "Prometheus holds the first data",
            lambda: (
                _total(prom, f"sum({cost})") == pytest.approx(before["totals"]["cost_usd"], abs=1e-9)
                and (_total(prom, f"min(count_over_time({cost}[1m]))") or 0) >= 3
            ),
        )
        # A few scrapes of the first data inside the range, and of the second
        # below: over a range of two or three samples, increase()'s
        # extrapolation can make up by chance for a series it drops.
        start = time.time()
        _poll(
            "scrapes after the range's start",
            lambda: (_total(prom, f"max(timestamp({cost}))") or 0) > start + 3,
        )
        _replay(env, "cron", "terminal_ok")
        after = _report(env)
        assert after["totals"]["tool_calls"] > before["totals"]["tool_calls"]
        for key, series in [("cost_usd", cost), ("tool_calls", "hermes_tool_calls_total")]:
            _poll(
                f"Prometheus holds the second data ({series})",
                lambda key=key, series=series: (
                    _total(prom, f"sum({series})") == pytest.approx(after["totals"][key], abs=1e-9)
                ),
            )
        # The cron series were born inside the range.
        platforms = {k.split("hermes_platform=")[1].split(",")[0] for k in _query(prom, cost)}
        assert "cron" in platforms and "cli" in platforms, platforms
        _poll(
            "scrapes of the second data",
            lambda: (_total(prom, f'min(count_over_time({cost}{{hermes_platform="cron"}}[1m]))') or 0) >= 4,
        )

        range_seconds = math.ceil(time.time() - start)
        at = start + range_seconds
        shown = _shown(prom, range_seconds, at)
        assert grafana_panels.mismatches(shown, grafana_panels.expected(after, before)) == [], shown

        # The store's whole life in the range: every series is born in it.
        whole = math.ceil(time.time() - first) + 60
        shown = _shown(prom, whole, time.time())
        assert grafana_panels.mismatches(shown, grafana_panels.expected(after)) == [], shown

        # What the panels showed before: increase() over the same range
        # misses the series born in it (and extrapolates the others).
        old = _total(prom, f"sum(increase({cost}[{range_seconds}s]))", at)
        new_cost = after["totals"]["cost_usd"] - before["totals"]["cost_usd"]
        assert old is None or abs(old - new_cost) > 0.1 * new_cost, (old, new_cost)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
