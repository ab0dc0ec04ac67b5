"""``plugins.isolation: host`` (Hermes 0.22 and later): the plugin runs in
Hermes's plugin-host process, its hooks and middleware reached over a pipe.
The ledger is still what the provider served, a budget still stops the
call before the provider, and ``status`` says what the host cannot reach.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import NEW_LINE, ROOT
from test_budgets import _assert_ledger_is_what_was_served, _query, _scenario, _steps

# Said in every report line it appears in (-rs), never skipped silently.
pytestmark = pytest.mark.skipif(not NEW_LINE, reason="Hermes 0.19 has no plugin host (plugins.isolation)")


def test_in_the_plugin_host_the_ledger_is_exact_and_a_budget_stops_the_call(hermes_bin, tmp_path) -> None:
    # A daily budget the first chat (two calls and its title, ~$0.007 at
    # examples/pricing.toml's price for the mock's model) uses up.
    out = _scenario(
        hermes_bin,
        tmp_path,
        f"""
        step iso "$HERMES" config set plugins.isolation host
        mkdir -p "$OUTDIR/meter" && cp {ROOT / "examples" / "pricing.toml"} "$OUTDIR/meter/pricing.toml"
        step set "$BUDGET" budget set global daily 0.003
        chat first "READFILE please read hello.txt"
        chat second "plain question please"
        step status "$BUDGET" status --json
        """,
    )
    steps = _steps(out)
    assert steps["first"][0] == 0 and "MOCK-FINAL-ANSWER" in steps["first"][1], steps["first"]
    assert steps["second"][0] == 0 and "BUDGET-EXCEEDED" in steps["second"][1], steps["second"]
    # What the provider served is what the ledger holds, tokens exactly.
    served = _assert_ledger_is_what_was_served(out)
    assert len(served) == 3, [r.get("decision") for r in served]
    # The stopped call never reached the provider; the stand-in is no call.
    second = _query(out, "SELECT session_id FROM runs ORDER BY started_at")[1][0]
    assert _query(out, f"SELECT COUNT(*) FROM llm_calls WHERE session_id = '{second}'") == [(0,)]
    # Status names the host and what it cannot reach.
    report = json.loads(steps["status"][1])["hermes"]["reports"][-1]
    assert report["isolation"] == "host" and report["load"] == "ok", report
    states = {p["name"]: p for p in report["points"]}
    summary = states["run_agent.AIAgent._usage_summary_for_api_request_hook"]
    assert summary["state"] == "MISSING" and "plugin host" in summary["detail"], summary
    assert states["ctx.register_middleware"]["state"] == "active"


def test_the_status_of_a_store_written_from_the_plugin_host_reads_as_such(hermes_bin, tmp_path) -> None:
    out = _scenario(
        hermes_bin,
        tmp_path,
        """
        step iso "$HERMES" config set plugins.isolation host
        chat first "plain question please"
        """,
    )
    cli = str(Path(sys.executable).parent / "hermes-meter")
    text = subprocess.run(
        [cli, "--home", str(out / "meter"), "status"], capture_output=True, text=True, check=True
    ).stdout
    assert "plugin in Hermes's plugin host (plugins.isolation: host)" in text, text
