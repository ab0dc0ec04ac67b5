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
import re
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from conftest import KIT, PLUGIN_KEY

BLOCKED_MODEL = "hermes-meter/budget-blocked"


def _scenario(
    hermes_bin: Path, tmp_path: Path, script: str, env: dict[str, str] | None = None, sidecar: bool = False
) -> Path:
    """Runs ``script`` in the kit's ``custom`` scenario; ``env`` goes to
    Hermes and the script's steps. With ``sidecar``, the loopback OTLP/HTTP
    receiver (which also takes an alert webhook's posts at /hook) runs in the
    scenario's namespace and Hermes exports to it."""
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
    if sidecar:
        cmd += ["--sidecar", f'"$E2E_PYTHON" {Path(__file__).parent / "otlp_sidecar.py"}']
        cmd += ["--env", "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf"]
        cmd += ["--env", "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318"]
    for key, value in (env or {}).items():
        cmd += ["--env", f"{key}={value}"]
    run_env = {"HERMES_BIN": str(hermes_bin), "PATH": "/usr/bin:/bin", "E2E_PYTHON": sys.executable}
    p = subprocess.run(cmd, env=run_env, text=True, capture_output=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return out


def _served(out: Path) -> list[dict]:
    """The chat completions the mock answered with 200."""
    rows = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines() if x.strip()]
    return [r for r in rows if r.get("path", "").endswith("/chat/completions") and r.get("status") == 200]


def _assert_ledger_is_what_was_served(out: Path) -> list[dict]:
    """Every call the mock served is in the ledger, tokens exactly; returns them."""
    served = _served(out)
    (calls, inp, outp) = _query(
        out,
        "SELECT COUNT(*), SUM(input_tokens + cache_read_tokens + cache_write_tokens), SUM(output_tokens)"
        " FROM llm_calls",
    )[0]
    assert calls == len(served), [r.get("decision") for r in served]
    assert inp == sum(r["usage"]["prompt_tokens"] for r in served)
    assert outp == sum(r["usage"]["completion_tokens"] for r in served)
    return served


def _steps(out: Path) -> dict[str, tuple[int, str]]:
    """name -> (rc, stdout) of each step."""
    rows = (out / "steps.tsv").read_text().splitlines()[1:]
    steps = {}
    for row in rows:
        n, name, rc, _secs, _cmd = row.split("\t", 4)
        text = (out / "steps" / f"{n}-{name}.stdout").read_text(errors="replace")
        steps[name] = (int(rc), text)
    return steps


def _command(out: Path, name: str) -> str:
    """The command line of the step ``name``."""
    for row in (out / "steps.tsv").read_text().splitlines()[1:]:
        fields = row.split("\t")
        if fields[1] == name:
            return fields[4]
    raise KeyError(name)


def _stderr(out: Path, name: str) -> str:
    """The stderr of the step ``name``."""
    return "".join(f.read_text(errors="replace") for f in sorted((out / "steps").glob(f"*-{name}.stderr")))


#: The exit code of a one-shot run a budget stopped (docs/budgets-and-fleet.md).
EXIT_BUDGET_STOPPED = 3
STOPPED_LINE = f"hermes-meter: a budget stopped this run (exit code {EXIT_BUDGET_STOPPED}): "


def _assert_stopped_run(out: Path, steps: dict, name: str) -> None:
    """The one-shot step ``name`` was stopped by a budget: it exits 3 and
    says so, once, on stderr (stdout stays the answer). A `chat -q` step
    also showed the person the stop itself as it happened (``hermes -z``
    sends stderr to /dev/null while the agent runs)."""
    assert steps[name][0] == EXIT_BUDGET_STOPPED, (steps[name], _stderr(out, name))
    err = _stderr(out, name)
    assert err.count(STOPPED_LINE) == 1, err
    if " -z " not in _command(out, name):
        said = [
            x for x in err.splitlines() if x.startswith("hermes-meter: ") and not x.startswith(STOPPED_LINE)
        ]
        assert said and "not yours to change" not in said[0], err
    assert not any(line.startswith("hermes-meter:") for line in steps[name][1].splitlines()), steps[name][1]


def _hooks(out: Path) -> list[dict]:
    lines = (out / "hooks.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines if x.strip()]


def _blocked_tools(out: Path) -> list[dict]:
    """The post_tool_call hooks of tool calls a budget blocked."""
    return [
        h for h in _hooks(out) if h["hook"] == "post_tool_call" and h["kwargs"].get("status") == "blocked"
    ]


def _aux_posts(out: Path) -> int:
    """Auxiliary calls the mock answered (titles: Hermes 0.22 makes one
    for every chat; they fire no post_api_request)."""
    rows = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines() if x.strip()]
    return sum(1 for r in rows if r.get("decision") == "AUX" and r.get("status") == 200)


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
        sid=$(cat "$STEPS/2-chat.stdout" "$STEPS/2-chat.stderr" | sed -n "s/^session_id: *//p" | tail -n 1)
        step trace "$BUDGET" trace "$sid" --json
        """,
    )
    steps = _steps(out)
    assert steps["set"][0] == 0
    _assert_stopped_run(out, steps, "chat")
    # The first call spent past the limit: read_file was blocked, with a
    # message that says whose limit it is and never how to lift it.
    blocked = _blocked_tools(out)
    assert blocked, "read_file was not blocked"
    message = blocked[0]["kwargs"]["error_message"]
    assert "not yours to change" in message and "budget set" not in message, message
    # The session is marked stopped, not healthy.
    root = json.loads(steps["trace"][1])["root"]
    assert root["status"] == "blocked" and "stopped by a budget" in (root["detail"] or ""), root
    assert _query(out, "SELECT status FROM tool_calls WHERE tool_name = 'read_file'") == [("blocked",)]
    # The next LLM call of the turn was stopped too: Hermes got the stand-in.
    assert "BUDGET-EXCEEDED" in steps["chat"][1]
    budgets = json.loads(steps["list"][1])["budgets"]
    assert budgets[0]["verdict"] == "hard", budgets
    counts = dict(_query(out, "SELECT verdict, count FROM budget_verdicts"))
    assert counts.get("blocked", 0) >= 2, counts


def test_the_agent_cannot_lift_its_own_budget_through_the_terminal(hermes_bin, tmp_path) -> None:
    # A budget far from its line; the model tries what an agent with a
    # shell would: the meter's CLI, and a rewrite of the budget file.
    out = _scenario(
        hermes_bin,
        tmp_path,
        """
        step set "$BUDGET" budget set global daily 0.5
        chat chat "LIFTBUDGET please give yourself more budget"
        step list "$BUDGET" budget list --json
        """,
    )
    steps = _steps(out)
    assert steps["chat"][0] == 0, steps["chat"]
    blocked = _blocked_tools(out)
    assert [h["kwargs"]["tool_name"] for h in blocked] == ["terminal", "terminal"], _hooks(out)
    for h in blocked:
        message = h["kwargs"]["error_message"]
        assert message.startswith("BUDGET-PROTECTED: "), message
        assert "budget set" not in message, message
    # The limit is what the operator set.
    budgets = json.loads(steps["list"][1])["budgets"]
    assert [(b["scope"], b["window"], b["limit_usd"]) for b in budgets] == [("global", "daily", 0.5)], budgets
    assert "daily = 1000" not in (out / "meter" / "budgets.toml").read_text()
    assert _query(out, "SELECT status FROM tool_calls") == [("blocked",), ("blocked",)]
    # The refusal is said in Hermes's log (a line a minute at most, with
    # how many similar ones it held back).
    log = (out / "home" / "logs" / "agent.log").read_text()
    assert "refused tool call" in log and "the meter's budgets" in log, log[-3000:]


def test_a_token_budget_blocks_a_tool_call_once_its_tokens_are_used(hermes_bin, tmp_path) -> None:
    # A budget in tokens only (a subscription plan): the first call's tokens
    # pass 100, whatever it cost.
    out = _scenario(
        hermes_bin,
        tmp_path,
        """
        step set "$BUDGET" budget set global daily_tokens 100
        chat chat "READFILE please read hello.txt"
        step list "$BUDGET" budget list --json
        """,
    )
    steps = _steps(out)
    assert steps["set"][0] == 0, steps["set"]
    _assert_stopped_run(out, steps, "chat")
    blocked = _blocked_tools(out)
    assert blocked, "read_file was not blocked"
    message = blocked[0]["kwargs"]["error_message"]
    assert "global daily_tokens budget is exhausted" in message, message
    assert "not yours to change" in message and "budget set" not in message, message
    assert "BUDGET-EXCEEDED" in steps["chat"][1]
    (budget,) = json.loads(steps["list"][1])["budgets"]
    assert (budget["unit"], budget["verdict"]) == ("tokens", "hard"), budget
    # What the budget counted is what the ledger recorded for the call.
    ((tokens,),) = _query(
        out,
        "SELECT SUM(input_tokens + cache_read_tokens + cache_write_tokens + output_tokens) FROM llm_calls",
    )
    assert budget["settled_tokens"] == tokens, (budget, tokens)


def test_a_rolling_window_stops_an_unattended_run_and_says_when_it_frees(hermes_bin, tmp_path) -> None:
    # A plan's 5-hour window in USD and its 7-day window in tokens, set in
    # the words people use; the first call of a `hermes -z` run crosses the
    # 5-hour one.
    out = _scenario(
        hermes_bin,
        tmp_path,
        """
        step set "$BUDGET" budget set global 5h usd 0.0005
        step set_tokens "$BUDGET" budget set global 7d tokens 50M
        step oneshot "$HERMES" -z "READFILE please read hello.txt"
        step list "$BUDGET" budget list --json
        step table "$BUDGET" budget list
        step again "$HERMES" -z "another plain question"
        """,
    )
    steps = _steps(out)
    assert steps["set"][0] == 0 and steps["set_tokens"][0] == 0, (steps["set"], steps["set_tokens"])
    _assert_stopped_run(out, steps, "oneshot")
    blocked = _blocked_tools(out)
    assert blocked, "read_file was not blocked"
    message = blocked[0]["kwargs"]["error_message"]
    assert "global 5h budget is exhausted" in message, message
    assert "Calls go again at " in message and "as spend leaves its rolling 5h window" in message, message
    assert "not yours to change" in message and "budget set" not in message, message
    budgets = {b["key"]: b for b in json.loads(steps["list"][1])["budgets"]}
    five, week = budgets["5h"], budgets["7d_tokens"]
    assert (five["verdict"], five["rolling"], week["verdict"]) == ("hard", True, "ok"), budgets
    # What leaves the window is what the ledger recorded, 5 h (and at
    # most a quarter hour) after it was spent.
    ((cost, ended),) = _query(out, "SELECT SUM(cost_usd), MAX(ended_at) FROM llm_calls")
    assert abs(five["settled_usd"] - cost) < 1e-9, (five, cost)
    assert abs(five["frees"]["amount_usd"] - cost) < 1e-9, five
    assert ended + 5 * 3600 - 1 <= five["frees"]["at"] <= ended + 5 * 3600 + 900, (five, ended)
    assert five["window_end"] == five["frees"]["at"], five
    ((tokens,),) = _query(
        out,
        "SELECT SUM(input_tokens + cache_read_tokens + cache_write_tokens + output_tokens) FROM llm_calls",
    )
    assert week["settled_tokens"] == tokens, (week, tokens)
    row = next(x for x in steps["table"][1].splitlines() if x.startswith("global") and " 5h " in x)
    assert "$0.00 left; back under its line at " in row, row
    # The next unattended run is stopped before the provider is called.
    _assert_stopped_run(out, steps, "again")
    assert _query(out, "SELECT COUNT(*) FROM llm_calls")[0][0] == 1


def _agent_posts(out: Path) -> int:
    """The agent's own requests the mock answered (not Hermes's auxiliary
    title calls, which fire no pre_api_request)."""
    rows = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines() if x.strip()]
    return sum(1 for r in rows if "chat/completions" in str(r.get("path")) and r.get("decision") != "AUX")


def test_a_rate_limit_stops_the_request_past_it_across_concurrent_runs(hermes_bin, tmp_path) -> None:
    # Two unattended runs at once, each two requests (a tool call, then the
    # answer), under 3 requests a minute for everyone: the fourth request
    # is stopped before the provider, whichever run makes it.
    out = _scenario(
        hermes_bin,
        tmp_path,
        """
        step set "$BUDGET" budget set global requests_per_minute 3
        step one "$HERMES" -z "READFILE please read hello.txt" & one=$!
        step two "$HERMES" -z "READFILE please read hello.txt" & two=$!
        wait "$one" "$two"
        step list "$BUDGET" budget list --json
        """,
    )
    steps = _steps(out)
    assert steps["set"][0] == 0, steps["set"]
    rcs = {name: steps[name][0] for name in ("one", "two")}
    assert sorted(rcs.values()) == [0, EXIT_BUDGET_STOPPED], (rcs, _stderr(out, "one"), _stderr(out, "two"))
    stopped = next(name for name, rc in rcs.items() if rc == EXIT_BUDGET_STOPPED)
    _assert_stopped_run(out, steps, stopped)
    assert _agent_posts(out) == 3, (out / "requests.jsonl").read_text()
    # The stand-in is no LLM call: three of the agent's calls recorded
    # (Hermes 0.22's title calls are auxiliary: no rate limit counts them).
    assert _query(out, "SELECT COUNT(*) FROM llm_calls WHERE aux_task IS NULL") == [(3,)]
    counts = dict(_query(out, "SELECT verdict, count FROM budget_verdicts"))
    assert counts.get("blocked") == 1, counts
    # What the stopped run was told: the limit, never how to lift it.
    told = steps[stopped][1]
    assert "the global rate limit of 3 requests per minute is reached" in told, told
    assert "not yours to change" in told and "budget set" not in told, told
    posts = [h for h in _hooks(out) if h["hook"] == "post_api_request"]
    assert sum(1 for h in posts if h["kwargs"]["response_model"] == BLOCKED_MODEL) == 1, posts


def test_a_rate_limit_that_waits_holds_the_request_until_it_fits(hermes_bin, tmp_path) -> None:
    # The same two runs with action = "wait": the fourth request waits until
    # the first leaves the minute (about 65 s), then goes; both runs answer.
    out = _scenario(
        hermes_bin,
        tmp_path,
        """
        step set "$BUDGET" budget set global requests_per_minute 3
        f="$HERMES_METER_HOME/budgets.toml"
        printf '[rate_limit]\\naction = "wait"\\nmax_wait_seconds = 90\\n' >> "$f"
        step one "$HERMES" -z "READFILE please read hello.txt" & one=$!
        step two "$HERMES" -z "READFILE please read hello.txt" & two=$!
        wait "$one" "$two"
        """,
    )
    steps = _steps(out)
    assert (steps["one"][0], steps["two"][0]) == (0, 0), (_stderr(out, "one"), _stderr(out, "two"))
    assert _agent_posts(out) == 4
    rows = _query(
        out, "SELECT started_at, ended_at FROM llm_calls WHERE aux_task IS NULL ORDER BY started_at"
    )
    assert len(rows) == 4, rows
    first = rows[0][0]
    last_end = max(r[1] for r in rows)
    # The first request's 5-second step leaves the minute 65 s after it began.
    assert last_end - first >= 60.0, rows
    counts = dict(_query(out, "SELECT verdict, count FROM budget_verdicts"))
    assert counts.get("waited") == 1 and counts.get("blocked", 0) == 0, counts
    # Its log record (OTLP) says what held it back and for how long.
    ((said,),) = _query(out, "SELECT body FROM log_outbox WHERE event = 'hermes.budget.verdict'")
    assert said.startswith("an LLM call waits ") and "global rate limit of 3 requests per minute" in said, (
        said
    )


def _received_span_models(out: Path) -> list[tuple[str | None, str | None]]:
    """(gen_ai.request.model, gen_ai.response.model) of every span the
    scenario's loopback OTLP receiver got."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    models = []
    for path in sorted((out / "otlp").glob("*-traces.pb")):
        request = ExportTraceServiceRequest.FromString(path.read_bytes())
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    a = {kv.key: kv.value.string_value for kv in span.attributes}
                    if "gen_ai.response.model" in a:
                        models.append((a.get("gen_ai.request.model"), a["gen_ai.response.model"]))
    return models


def test_a_downgrade_sends_the_calls_past_its_line_to_the_cheaper_model(hermes_bin, tmp_path) -> None:
    # The first call (about $0.002 of mock-model) passes 30% of $0.003: the
    # next one goes to cheap-model through the llm_request middleware, as
    # [downgrade.models] maps mock-model (other models would go to `to`).
    out = _scenario(
        hermes_bin,
        tmp_path,
        """
        mkdir -p "$HERMES_METER_HOME"
        printf 'timezone = "UTC"\n[global]\ndaily = 0.003\n[downgrade]\nat = 0.3\nto = "other-model"\n' \
            > "$HERMES_METER_HOME/budgets.toml"
        printf '[downgrade.models]\n"mock-model" = "cheap-model"\n' >> "$HERMES_METER_HOME/budgets.toml"
        chat chat "READFILE please read hello.txt"
        step report "$BUDGET" report --json
        """,
        sidecar=True,
    )
    steps = _steps(out)
    assert steps["chat"][0] == 0, steps["chat"]
    assert "MOCK-FINAL-ANSWER" in steps["chat"][1], "a downgrade stops nothing"
    # The turn's own calls (Hermes 0.22 also makes a title call, an
    # auxiliary one, which the mock marks AUX).
    sent = [
        json.loads(x)["model"]
        for x in (out / "requests.jsonl").read_text().splitlines()
        if "chat/completions" in x and '"POST"' in x and json.loads(x).get("decision") != "AUX"
    ]
    assert sent[:2] == ["mock-model", "cheap-model"], sent
    rows = _query(out, "SELECT model, routed_model, response_model FROM llm_calls ORDER BY ended_at")
    # The mock answers as "<model>-served".
    assert rows[0] == ("mock-model", None, "mock-model-served"), rows
    assert rows[1] == ("mock-model", "cheap-model", "cheap-model-served"), rows
    assert not _blocked_tools(out), "a downgrade blocks no tool"
    report = json.loads(steps["report"][1])
    assert [(d["from"], d["to"], d["llm_calls"]) for d in report["downgraded"]] == [
        ("mock-model", "cheap-model", len(sent) - 1)
    ], report["downgraded"]
    # On the span: asked for the agent's model, answered by the cheaper one.
    models = _received_span_models(out)
    assert ("mock-model", "mock-model-served") in models, models
    assert ("mock-model", "cheap-model-served") in models, models


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
    _assert_stopped_run(out, steps, "oneshot")
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


def test_the_gateways_cron_scheduler_is_metered_exactly_and_its_budget_pauses_the_job(
    hermes_bin, tmp_path
) -> None:
    # Not `cron run`: the job runs as it does in production, on the cron
    # scheduler thread of a running `hermes gateway`.
    scripts = Path(__file__).parent / "scripts"
    out = _scenario(
        hermes_bin,
        tmp_path,
        f"""
        step set "$BUDGET" budget set cron daily 0.0005
        step create "$HERMES" cron create "every 1m" "READFILE cron test, read hello.txt" \\
             --name e2e-gateway-cron --deliver local
        job=$(sed -n 's/.*Created job: *\\([0-9a-zA-Z_-]*\\).*/\\1/p' "$STEPS/2-create.stdout" | head -n 1)
        echo "$job" > "$OUTDIR/cron_job_id"
        step gateway "$PY" {scripts / "gateway_session.py"} --hermes "$HERMES" --out "$OUTDIR" \\
             --cron-job "$job"
        step list "$HERMES" cron list --all
        step status "$BUDGET" status
        """,
    )
    steps = _steps(out)
    job = (out / "cron_job_id").read_text().strip()
    assert job, steps["create"]
    assert steps["gateway"][0] == 0, (out / "gateway.log").read_text()[-3000:]
    # The run is in the ledger as the cron job's, every call the provider
    # served, tokens exactly.
    runs = _query(out, "SELECT session_id, platform, cron_job_id FROM runs")
    assert [(r[1], r[2]) for r in runs] == [("cron", job)], runs
    assert _assert_ledger_is_what_was_served(out)
    # The run crossed the cron budget: the scheduler will not run it again.
    assert f"{job} [paused]" in steps["list"][1], steps["list"][1]
    assert _query(out, "SELECT kind, id FROM budget_once") == [("pause", job)]
    # Nothing Hermes ran went unrecorded.
    assert not [x for x in steps["status"][1].splitlines() if x.startswith("PROBLEM")], steps["status"][1]


def test_a_runaway_tool_loop_is_capped_per_run_and_the_model_still_answers(hermes_bin, tmp_path) -> None:
    # The mock calls `terminal` on every model call until a tool result says
    # BUDGET-EXCEEDED (or it gives up after 12): a loop that only a cap ends.
    out = _scenario(
        hermes_bin,
        tmp_path,
        """
        step set "$BUDGET" budget set run tool_calls 3
        chat chat "TOOLLOOP keep running true"
        step list "$BUDGET" budget list --json
        """,
    )
    steps = _steps(out)
    assert steps["set"][0] == 0, steps["set"]
    _assert_stopped_run(out, steps, "chat")
    assert "MOCK-FINAL-ANSWER" in steps["chat"][1], steps["chat"]
    rows = _query(out, "SELECT status, COUNT(*) FROM tool_calls WHERE tool_name = 'terminal' GROUP BY status")
    statuses = dict(rows)
    assert statuses.pop("blocked") == 1, rows
    assert sum(statuses.values()) == 3, f"three ran before the cap: {rows}"
    blocked = _blocked_tools(out)
    message = blocked[0]["kwargs"]["error_message"]
    assert "per-run tool_calls cap of this run is used up" in message, message
    assert "not yours to change" in message and "budget set" not in message, message
    # A tool-call cap blocks tools only: the model's answer after the block
    # reached the provider and came back.
    posts = [h for h in _hooks(out) if h["hook"] == "post_api_request"]
    assert posts[-1]["kwargs"].get("response_model") != BLOCKED_MODEL, posts[-1]
    assert dict(_query(out, "SELECT verdict, count FROM budget_verdicts")).get("blocked") == 1
    listing = json.loads(steps["list"][1])
    assert {"scope": "run", "unit": "tool_calls", "limit": 3.0} in listing["caps"], listing


def test_a_session_cap_holds_across_resume_and_a_new_session_starts_fresh(hermes_bin, tmp_path) -> None:
    # One call of the mock costs about $0.002: the first call of the session
    # goes through (spend before it is 0) and uses its $0.0005 cap up.
    out = _scenario(
        hermes_bin,
        tmp_path,
        """
        step set "$BUDGET" budget set session usd 0.0005
        chat first "plain question please"
        sid=$(session_of "$STEPS/2-first.stderr")
        echo "$sid" > "$OUTDIR/session_id"
        chat second "a second plain question" --resume "$sid"
        step fresh "$HERMES" -z "a question in a new session"
        """,
    )
    steps = _steps(out)
    sid = (out / "session_id").read_text().strip()
    assert sid, steps["first"]
    assert "BUDGET-EXCEEDED" not in steps["first"][1], steps["first"]
    _assert_stopped_run(out, steps, "second")
    assert "BUDGET-EXCEEDED" in steps["second"][1], steps["second"]
    assert "per-session usd cap of this session" in steps["second"][1], steps["second"]
    assert steps["fresh"][0] == 0, steps["fresh"]
    assert "MOCK-FINAL-ANSWER" in steps["fresh"][1], "a new session has a cap of its own"
    # The resumed session's call never reached the provider.
    assert _chat_posts(out) == 2, "the first session's first call and the fresh session's"
    rows = _query(out, "SELECT session_id, COUNT(*) FROM llm_calls GROUP BY session_id ORDER BY session_id")
    assert len(rows) == 2 and (sid, 1) in rows, rows


def test_a_runaway_loop_is_stopped_by_the_default_detector_with_action_stop(hermes_bin, tmp_path) -> None:
    # The same `true` over and over: the default detector (10 identical
    # calls in a row) with action = "stop" stops the run; no cap is set.
    out = _scenario(
        hermes_bin,
        tmp_path,
        """
        mkdir -p "$OUTDIR/meter"
        printf '[runaway]\\naction = "stop"\\n' > "$OUTDIR/meter/budgets.toml"
        chat chat "TOOLLOOP keep running true"
        """,
    )
    steps = _steps(out)
    _assert_stopped_run(out, steps, "chat")
    assert "RUNAWAY" in steps["chat"][1] and "looks stuck in a loop" in steps["chat"][1], steps["chat"]
    # The tenth call in a row shows the sign and is the one blocked: with
    # action = "stop" every tool call waits for the watch.
    statuses = dict(_query(out, "SELECT status, COUNT(*) FROM tool_calls GROUP BY status"))
    assert statuses == {"ok": 9, "blocked": 1}, statuses
    # The model's last call was answered by the stand-in, not the provider.
    # (After the turn Hermes may start its background review on thread
    # bg-review, a run of its own, which is not stopped.)
    # (The turn's calls are its session's: Hermes 0.22 fires hooks on
    # worker threads.)
    hooks = _hooks(out)
    session = next(h["kwargs"]["session_id"] for h in hooks if h["hook"] == "pre_llm_call")
    posts = [h for h in hooks if h["hook"] == "post_api_request"]
    # (On 0.19 the review shares the session id but runs on its own thread.)
    turn = [h for h in posts if h["kwargs"].get("session_id") == session and h.get("thread") != "bg-review"]
    assert turn[-1]["kwargs"]["response_model"] == BLOCKED_MODEL, turn[-1]
    served = [h for h in turn if h["kwargs"]["response_model"] != BLOCKED_MODEL]
    assert len(served) == 10, "one served call per tool call that ran or was blocked"
    elsewhere = [h for h in posts if h not in turn]
    assert _chat_posts(out) == len(served) + len(elsewhere) + _aux_posts(out)
    alerts = _query(out, "SELECT text FROM alerts WHERE kind = 'runaway'")
    assert len(alerts) == 1 and "terminal called 10 times in a row" in alerts[0][0], alerts
    counts = dict(_query(out, "SELECT verdict, count FROM budget_verdicts"))
    # Blocked: the tenth tool call and the LLM call after it.
    assert counts.get("runaway") == 1 and counts.get("blocked") == 2, counts


def test_a_runaway_alert_reaches_a_webhook_from_the_store(hermes_bin, tmp_path) -> None:
    # The default watch (alert only) and a webhook on loopback: the alert
    # reaches the receiver once, the run is not stopped.
    out = _scenario(
        hermes_bin,
        tmp_path,
        """
        chat chat "TOOLLOOP keep running true"
        """,
        env={"HERMES_METER_ALERT_WEBHOOK": "http://127.0.0.1:4318/hook"},
        sidecar=True,
    )
    steps = _steps(out)
    assert steps["chat"][0] == 0, steps["chat"]
    assert "MOCK-FINAL-ANSWER" in steps["chat"][1], "alerting stops nothing"
    posts = [json.loads(p.read_text()) for p in sorted((out / "otlp").glob("*-webhook.json"))]
    runaway = [p for p in posts if p["kind"] == "runaway"]
    assert len(runaway) == 1, posts
    assert runaway[0]["source"] == "hermes-meter"
    assert "terminal called 10 times in a row" in runaway[0]["text"], runaway[0]
    assert _query(out, "SELECT COUNT(*) FROM alerts WHERE kind = 'runaway' AND pushed_at IS NOT NULL") == [
        (1,)
    ]
    # The verdict also went out as an OTLP log record, in the run's turn.
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    records = [
        r
        for path in sorted((out / "otlp").glob("*-logs.pb"))
        for rl in ExportLogsServiceRequest.FromString(path.read_bytes()).resource_logs
        for sl in rl.scope_logs
        for r in sl.log_records
    ]
    verdicts = [r for r in records if r.event_name == "hermes.budget.verdict"]
    assert len(verdicts) == 1, records
    attrs = {kv.key: kv.value.string_value for kv in verdicts[0].attributes}
    assert attrs["hermes.budget.verdict"] == "runaway", attrs
    assert verdicts[0].severity_text == "WARN"
    assert "terminal called 10 times in a row" in verdicts[0].body.string_value
    turns = {
        (span.trace_id, span.span_id)
        for path in sorted((out / "otlp").glob("*-traces.pb"))
        for rs in ExportTraceServiceRequest.FromString(path.read_bytes()).resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
        if span.name == "invoke_agent hermes"
    }
    assert (verdicts[0].trace_id, verdicts[0].span_id) in turns


def test_an_alert_reaches_a_person_as_a_message_through_hermes_itself(hermes_bin, tmp_path) -> None:
    # Hermes's Signal platform, configured the way its gateway reads it,
    # talks to a signal-cli JSON-RPC API on loopback (the sidecar). The
    # runaway alert of the first run goes out through Hermes's own sender,
    # from the first run's delivery thread or, if that run ended first, from
    # the next Hermes process's: once.
    home = "+15550000002"
    out = _scenario(
        hermes_bin,
        tmp_path,
        """
        chat loop "TOOLLOOP keep running true"
        chat next "plain question please"
        step status "$BUDGET" status --json
        """,
        env={
            "HERMES_METER_ALERT_DELIVER": "signal",
            "SIGNAL_HTTP_URL": "http://127.0.0.1:4318",
            "SIGNAL_ACCOUNT": "+15550000001",
            "SIGNAL_HOME_CHANNEL": home,
        },
        sidecar=True,
    )
    steps = _steps(out)
    assert steps["loop"][0] == 0 and steps["next"][0] == 0, steps
    sends = [json.loads(p.read_text()) for p in sorted((out / "otlp").glob("*-signal.json"))]
    runaway = [s for s in sends if "terminal called 10 times in a row" in s["params"]["message"]]
    assert len(runaway) == 1, sends
    assert runaway[0]["method"] == "send"
    assert runaway[0]["params"]["recipient"] == [home]
    assert runaway[0]["params"]["message"].startswith("[hermes-meter]")
    assert _query(
        out, "SELECT COUNT(*) FROM alerts WHERE kind = 'runaway' AND hermes_sent_at IS NOT NULL"
    ) == [(1,)]
    delivery = json.loads(steps["status"][1])["alert_delivery"]
    assert (delivery["target"], delivery["sent"], delivery["waiting"]) == ("signal", 1, 0), delivery


def test_the_person_at_the_repl_prompt_sees_the_budget_notice(hermes_bin, tmp_path) -> None:
    # A 5 % alert on a $0.01 daily budget: the first turn (about $0.002)
    # passes it, the second turn's pre_llm_call tells the model, and the
    # person at the prompt sees the line too, without the agent's sentence.
    out = _scenario(
        hermes_bin,
        tmp_path,
        """
        mkdir -p "$HERMES_METER_HOME"
        printf 'alert_thresholds = [0.05]\\n[global]\\ndaily = 0.01\\n' > "$HERMES_METER_HOME/budgets.toml"
        step repl "$PY" "$KIT_DIR/drive_repl.py" --hermes "$HERMES" \\
             --transcript "$OUTDIR/repl-transcript.txt" "plain question please" "a second plain question"
        """,
    )
    steps = _steps(out)
    assert steps["repl"][0] == 0, (steps["repl"], _stderr(out, "repl"))
    raw = (out / "repl-transcript.txt").read_text(errors="replace")
    screen = re.sub(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)", "", raw)
    said = [line for line in screen.splitlines() if "hermes-meter: The global daily budget has" in line]
    assert said, screen[-3000:]
    assert "past its 5% alert" in said[0] and "not yours to change" not in said[0], said
    assert screen.count("MOCK-FINAL-ANSWER") >= 2, "a notice stops nothing"


def test_a_one_call_run_past_the_downgrade_line_goes_to_the_cheaper_model(hermes_bin, tmp_path) -> None:
    # The first run's call (about $0.0024) passes the line at 30 % of $0.006
    # and stays under the 80 % notice: the next one-call run (a new
    # process, a new session) goes to cheap-model from its first call.
    out = _scenario(
        hermes_bin,
        tmp_path,
        """
        mkdir -p "$HERMES_METER_HOME"
        printf 'timezone = "UTC"\\n[global]\\ndaily = 0.006\\n' > "$HERMES_METER_HOME/budgets.toml"
        printf '[downgrade]\\nat = 0.3\\nto = "cheap-model"\\n' >> "$HERMES_METER_HOME/budgets.toml"
        step first "$HERMES" -z "plain question please"
        step second "$HERMES" -z "another plain question"
        """,
    )
    steps = _steps(out)
    assert steps["first"][0] == 0 and steps["second"][0] == 0, steps
    sent = [
        json.loads(x)["model"]
        for x in (out / "requests.jsonl").read_text().splitlines()
        if "chat/completions" in x and '"POST"' in x and json.loads(x).get("decision") != "AUX"
    ]
    assert sent == ["mock-model", "cheap-model"], sent


def test_a_budget_file_with_a_typo_holds_the_run_and_status_says_it_first(hermes_bin, tmp_path) -> None:
    # The operator meant a $0.50 line and typed a letter O: no limit can be
    # checked, so the run is held before the provider, not let through.
    out = _scenario(
        hermes_bin,
        tmp_path,
        """
        mkdir -p "$HERMES_METER_HOME"
        printf '[global]\\ndaily = 0.5O\\n' > "$HERMES_METER_HOME/budgets.toml"
        chat held "plain question please"
        step status "$BUDGET" status
        """,
    )
    steps = _steps(out)
    _assert_stopped_run(out, steps, "held")
    assert "budget file does not parse" in steps["held"][1], steps["held"]
    rows = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines() if x.strip()]
    served = [r for r in rows if "chat/completions" in r.get("path", "") and r.get("decision") != "AUX"]
    assert served == [], "the provider was not called for the run"
    first = steps["status"][1].splitlines()[0]
    assert "the budget file does not parse" in first, steps["status"][1]


def test_a_days_digest_leaves_with_the_first_unattended_run_after_it_and_only_once(
    hermes_bin, tmp_path
) -> None:
    # Yesterday's session (the readfile fixture moved to yesterday's UTC
    # noon) is in the store; two one-shot runs today with the daily digest
    # on and a webhook: the first sends yesterday's digest, the second
    # sends nothing more.
    now = time.time()
    noon_yesterday = (now // 86400) * 86400 - 43200
    lines = (Path(__file__).parents[1] / "fixtures" / "readfile.jsonl").read_text().splitlines()
    first = json.loads(lines[0])["t"]
    moved = []
    for line in lines:
        record = json.loads(line)
        record["t"] += noon_yesterday - first
        for key in ("started_at", "ended_at"):
            if isinstance(record["kwargs"].get(key), (int, float)):
                record["kwargs"][key] += noon_yesterday - first
        moved.append(json.dumps(record))
    (tmp_path / "yesterday.jsonl").write_text("\n".join(moved) + "\n")
    out = _scenario(
        hermes_bin,
        tmp_path,
        f"""
        mkdir -p "$HERMES_METER_HOME" && printf 'timezone = "UTC"\\n' > "$HERMES_METER_HOME/budgets.toml"
        step seed "$BUDGET" replay {tmp_path / "yesterday.jsonl"}
        step first "$HERMES" -z "READFILE please read hello.txt"
        step second "$HERMES" -z "READFILE please read hello.txt"
        """,
        env={
            "HERMES_METER_DIGEST": "day",
            "HERMES_METER_ALERT_WEBHOOK": "http://127.0.0.1:4318/hook",
            # And through Hermes's own sender, to Signal (the sidecar's signal-cli API).
            "HERMES_METER_ALERT_DELIVER": "signal",
            "SIGNAL_HTTP_URL": "http://127.0.0.1:4318",
            "SIGNAL_ACCOUNT": "+15550000001",
            "SIGNAL_HOME_CHANNEL": "+15550000002",
        },
        sidecar=True,
    )
    steps = _steps(out)
    assert [steps[s][0] for s in ("seed", "first", "second")] == [0, 0, 0], steps
    posts = [json.loads(p.read_text()) for p in sorted((out / "otlp").glob("*-webhook.json"))]
    digests = [p for p in posts if p["kind"] == "digest_day"]
    yesterday = time.strftime("%Y-%m-%d", time.gmtime(now - 86400))
    assert len(digests) == 1, posts
    assert digests[0]["key"] == yesterday, digests[0]
    assert digests[0]["text"].startswith("hermes-meter digest of the day"), digests[0]
    assert "1 sessions, 2 LLM calls" in digests[0]["text"], digests[0]
    assert _query(out, "SELECT COUNT(*) FROM alerts WHERE kind = 'digest_day' AND pushed_at IS NOT NULL") == [
        (1,)
    ]
    sends = [json.loads(p.read_text()) for p in sorted((out / "otlp").glob("*-signal.json"))]
    said = [s for s in sends if "hermes-meter digest of the day" in s["params"]["message"]]
    assert len(said) == 1, sends
    assert (
        said[0]["params"]["message"].startswith("[hermes-meter]")
        and yesterday in said[0]["params"]["message"]
    )
    assert said[0]["params"]["recipient"] == ["+15550000002"]
