"""Budgets in the real Hermes 0.19.0: a tool call blocked, a text-only run
stopped, a cron job paused.

Each test runs the kit's ``custom`` scenario with a script that sets a budget
with our own CLI (``hermes-meter budget set``, the console script installed
beside ``hermes``), then runs Hermes against the loopback mock. The mock's
``mock-model`` costs $2/$8 per million input/output tokens, so one call of a
scenario costs about $0.002; the limits below are set to be crossed by the
first call (or by none at all).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import textwrap
from pathlib import Path

from conftest import KIT, PLUGIN_KEY

BLOCKED_MODEL = "hermes-meter/budget-blocked"


def _scenario(hermes_bin: Path, tmp_path: Path, script: str, env: dict[str, str] | None = None) -> Path:
    """Runs ``script`` in the kit's ``custom`` scenario; ``env`` goes to
    Hermes and the script's steps."""
    out = tmp_path / "run"
    script_file = tmp_path / "script.sh"
    script_file.write_text('BUDGET="$(dirname "$HERMES")/hermes-meter"\n' + textwrap.dedent(script))
    cmd = [
        "bash",
        str(KIT / "run-scenario.sh"),
        "custom",
        str(out),
        "--probe",
        "--script",
        str(script_file),
        "--enable",
        PLUGIN_KEY,
        "--env",
        f"HERMES_METER_HOME={out / 'meter'}",
    ]
    for key, value in (env or {}).items():
        cmd += ["--env", f"{key}={value}"]
    run_env = {"HERMES_BIN": str(hermes_bin), "PATH": "/usr/bin:/bin"}
    p = subprocess.run(cmd, env=run_env, text=True, capture_output=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return out


def _steps(out: Path) -> dict[str, tuple[int, str]]:
    """name -> (rc, stdout) of each step."""
    rows = (out / "steps.tsv").read_text().splitlines()[1:]
    steps = {}
    for row in rows:
        n, name, rc, _secs, _cmd = row.split("\t", 4)
        text = (out / "steps" / f"{n}-{name}.stdout").read_text(errors="replace")
        steps[name] = (int(rc), text)
    return steps


def _hooks(out: Path) -> list[dict]:
    lines = (out / "hooks.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines if x.strip()]


def _chat_posts(out: Path) -> int:
    lines = (out / "requests.jsonl").read_text().splitlines()
    return sum(1 for x in lines if "chat/completions" in x and '"POST"' in x)


def _query(out: Path, sql: str) -> list[tuple]:
    conn = sqlite3.connect(f"file:{out / 'meter' / 'hermes-meter.db'}?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def test_a_tool_call_is_blocked_once_the_budget_is_spent(hermes_bin, tmp_path) -> None:
    out = _scenario(
        hermes_bin,
        tmp_path,
        """
        step set "$BUDGET" budget set global daily 0.0005
        chat chat "READFILE please read hello.txt"
        step list "$BUDGET" budget list --json
        """,
    )
    steps = _steps(out)
    assert steps["set"][0] == 0
    assert steps["chat"][0] == 0, steps["chat"]
    # The first call spent past the limit: read_file was blocked, with the
    # message telling how to raise the limit.
    blocked = [
        h for h in _hooks(out) if h["hook"] == "post_tool_call" and h["kwargs"].get("status") == "blocked"
    ]
    assert blocked, "read_file was not blocked"
    message = blocked[0]["kwargs"]["error_message"]
    assert "hermes-meter budget set global daily <usd>" in message, message
    assert _query(out, "SELECT status FROM tool_calls WHERE tool_name = 'read_file'") == [("blocked",)]
    # The next LLM call of the turn was stopped too: Hermes got the stand-in.
    assert "BUDGET-EXCEEDED" in steps["chat"][1]
    budgets = json.loads(steps["list"][1])["budgets"]
    assert budgets[0]["verdict"] == "hard", budgets
    counts = dict(_query(out, "SELECT verdict, count FROM budget_verdicts"))
    assert counts.get("blocked", 0) >= 2, counts


def test_a_text_only_run_is_stopped_before_the_provider_is_called(hermes_bin, tmp_path) -> None:
    out = _scenario(
        hermes_bin,
        tmp_path,
        """
        step set "$BUDGET" budget set global daily 0.0005
        chat first "plain question please"
        step oneshot "$HERMES" -z "another plain question" --usage-file "$OUTDIR/usage.json"
        """,
    )
    steps = _steps(out)
    assert steps["first"][0] == 0
    assert "BUDGET-EXCEEDED" not in steps["first"][1], "the first run is under the limit"
    assert steps["oneshot"][0] == 0, steps["oneshot"]
    assert "BUDGET-EXCEEDED" in steps["oneshot"][1], steps["oneshot"]
    assert _chat_posts(out) == 1, "only the first run reached the provider"
    posts = [h for h in _hooks(out) if h["hook"] == "post_api_request"]
    assert posts[-1]["kwargs"]["response_model"] == BLOCKED_MODEL
    # The stand-in is no LLM call: one call, one run's worth of cost.
    assert _query(out, "SELECT COUNT(*) FROM llm_calls") == [(1,)]
    usage = json.loads((out / "usage.json").read_text())
    assert usage["completed"] is True and usage["failed"] is False


def test_a_cron_job_over_its_budget_is_paused(hermes_bin, tmp_path) -> None:
    out = _scenario(
        hermes_bin,
        tmp_path,
        """
        step set "$BUDGET" budget set cron daily 0.0005
        step create "$HERMES" cron create "every 1h" "READFILE cron test, read hello.txt" \\
             --name e2e-budget --deliver local
        job=$(sed -n 's/.*Created job: *\\([0-9a-zA-Z_-]*\\).*/\\1/p' "$STEPS/2-create.stdout" | head -n 1)
        echo "$job" > "$OUTDIR/cron_job_id"
        step run "$HERMES" cron run "$job"
        step list "$HERMES" cron list --all
        step again "$HERMES" cron run "$job"
        """,
    )
    steps = _steps(out)
    job = (out / "cron_job_id").read_text().strip()
    assert job, steps["create"]
    assert steps["run"][0] == 0
    listing = steps["list"][1]
    assert f"{job} [paused]" in listing, listing
    assert "paused" in steps["again"][1].lower(), steps["again"]
    jobs = json.loads((out / "home" / "cron" / "jobs.json").read_text())["jobs"]
    reason = next(j for j in jobs if j["id"] == job)["paused_reason"]
    assert reason.startswith("hermes-meter: cron " + job + " daily budget exhausted"), reason
    assert _query(out, "SELECT kind, id FROM budget_once") == [("pause", job)]
