"""Our store against the raw hook stream of the same real Hermes run.

For each kit scenario, the expected ledger is computed here straight from
the probe's ``hooks.jsonl`` (no hermes-meter code involved), then compared
with what the plugin wrote to its store in that run.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import HERMES_TEXT, NEW_LINE, PANIC_RUN, SCENARIOS, Run

OUR_HOOKS = {
    "on_session_start",
    "pre_llm_call",
    "pre_api_request",
    "post_api_request",
    "api_request_error",
    "pre_tool_call",
    "post_tool_call",
    "post_llm_call",
    "subagent_start",
    "subagent_stop",
    "on_session_end",
    "on_session_finalize",
}
if NEW_LINE:
    # Hermes 0.21.5+ fires a hook for each auxiliary call (titles after
    # every chat, compression); 0.19 fires none (the plugin reads them from
    # Hermes's own accounting, and the mock's AUX answers are the truth).
    OUR_HOOKS.add("post_auxiliary_call")


def aux_day(t: float) -> str:
    """The session the store gives an auxiliary call made outside any turn."""
    return "aux_" + time.strftime("%Y%m%d", time.gmtime(t))


# The e2e mock's /v1/models prices for mock-model, USD per million tokens.
MOCK_PRICE = {"input": 2.0, "output": 8.0, "cache_read": 0.5, "cache_write": 2.5}

# Scenarios in which Hermes itself fails the turn (exit code 1).
FAILING = {"failalways", "model404"}


def records(run: Run) -> list[dict]:
    lines = (run.outdir / "hooks.jsonl").read_text().splitlines()
    recs = [json.loads(line) for line in lines if line.strip()]
    recs.sort(key=lambda r: (r["t"], r["pid"], r["seq"]))
    return [r for r in recs if r["hook"] in OUR_HOOKS]


def provider_bill(usage: dict) -> float | None:
    """What a call is billed from the figures its provider reported (the
    rule of docs/pricing.md): an upstream charge plus the gateway's fee on
    the user's own key, else the larger of the two; else the gateway's
    cost; None when it reported none."""
    cost, upstream = usage.get("cost"), usage.get("upstream_cost")
    if upstream is None:
        return cost
    return upstream + (cost or 0.0) if usage.get("byok") else max(upstream, cost or 0.0)


def query(run: Run, sql: str) -> list[tuple]:
    conn = sqlite3.connect(f"file:{run.store}?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def mock_cost(inp: int, out: int, cache_read: int, cache_write: int) -> float:
    p = MOCK_PRICE
    per_million = inp * p["input"] + out * p["output"] + cache_read * p["cache_read"]
    return (per_million + cache_write * p["cache_write"]) / 1e6


class Expected:
    """The ledger a scenario should produce, from its hook records alone."""

    def __init__(self, recs: list[dict]):
        self.sessions: set[str] = set()
        self.llm_calls: dict[str, tuple] = {}
        self.billed: dict[str, float | None] = {}
        self.sources: dict[str, str] = {}
        self.errors: set[tuple] = set()
        self.tools: dict[tuple, tuple] = {}
        self.edges: dict[str, tuple] = {}
        #: Auxiliary calls answered (post_auxiliary_call with usage, 0.21.5+):
        #: api_request_id -> (session, model, input, output, cache_read,
        #: cache_write, what the provider billed or None).
        self.aux_calls: dict[str, tuple] = {}
        approx_input: dict[str, int] = {}
        turns: dict[str, list[str]] = defaultdict(list)
        turn_end: dict[str, dict] = {}
        finalized: set[str] = set()
        child_stop: dict[str, str] = {}
        api_ok: set[str] = set()
        api_failed: dict[str, set[str]] = defaultdict(set)
        for r in recs:
            kw, hook = r["kwargs"], r["hook"]
            for key in ("session_id", "parent_session_id", "child_session_id"):
                if kw.get(key):
                    self.sessions.add(kw[key])
            if hook == "pre_api_request" and kw.get("approx_input_tokens") is not None:
                approx_input[kw["api_request_id"]] = kw["approx_input_tokens"]
            elif hook == "post_api_request":
                rid, u = kw["api_request_id"], kw.get("usage")
                api_ok.add(rid)
                if u is None:
                    tokens = (
                        approx_input.get(rid, 0),
                        ((kw.get("assistant_content_chars") or 0) + 3) // 4,
                        0,
                        0,
                    )
                else:
                    tokens = (
                        u["input_tokens"],
                        u["output_tokens"],
                        u["cache_read_tokens"],
                        u["cache_write_tokens"],
                    )
                self.llm_calls[rid] = (kw["session_id"], *tokens, u is None)
                # What the provider billed, where its usage said
                # (PROVIDERCOST, UPSTREAMCOST).
                self.billed[rid] = provider_bill(u or {})
                self.sources[rid] = "provider_upstream" if "upstream_cost" in (u or {}) else "provider"
            elif hook == "post_auxiliary_call":
                u = kw.get("usage")
                session = kw.get("session_id") or aux_day(r["t"])
                if session.startswith("aux_"):
                    self.sessions.add(session)
                if u and not kw.get("error"):
                    self.aux_calls[kw["api_request_id"]] = (
                        session,
                        kw.get("model"),
                        u["input_tokens"],
                        u["output_tokens"],
                        u.get("cache_read_tokens", 0),
                        u.get("cache_write_tokens", 0),
                        provider_bill(u),
                    )
            elif hook == "api_request_error":
                self.errors.add((kw["api_request_id"], kw["retry_count"], kw.get("status_code")))
                api_failed[kw.get("turn_id")].add(kw["api_request_id"])
            elif hook == "post_tool_call":
                result = kw.get("result")
                exit_code = None
                if isinstance(result, str) and result.lstrip().startswith("{"):
                    try:
                        exit_code = json.loads(result).get("exit_code")
                    except ValueError:
                        pass
                ok = kw.get("status") == "ok"
                self.tools[(kw["session_id"], kw["tool_call_id"])] = (kw["tool_name"], ok, exit_code)
            elif hook == "subagent_start":
                self.edges[kw["child_session_id"]] = (kw["parent_session_id"], None)
            elif hook == "subagent_stop":
                self.edges[kw["child_session_id"]] = (kw["parent_session_id"], kw.get("child_status"))
                child_stop[kw["child_session_id"]] = kw.get("child_status")
            elif hook == "pre_llm_call":
                if kw["turn_id"] not in turns[kw["session_id"]]:
                    turns[kw["session_id"]].append(kw["turn_id"])
            elif hook == "on_session_end":
                turn_end[kw["turn_id"]] = kw
            elif hook == "on_session_finalize":
                finalized.add(kw["session_id"])
        self.status = {}
        for s in self.sessions:
            if s.startswith("aux_"):
                # The day's auxiliary calls outside any turn: no turns of
                # its own, no status to compare.
                continue
            last = turns[s][-1] if turns[s] else None
            end = turn_end.get(last) if last else None
            if end is not None:
                status = (
                    "interrupted" if end.get("interrupted") else "ok" if end.get("completed") else "error"
                )
            elif s in finalized:
                failed = api_failed.get(last, set()) - api_ok
                status = "error" if failed else "interrupted" if last else "ok"
            elif s in child_stop:
                status = "ok" if child_stop[s] in ("completed", "ok", "success") else "error"
            else:
                # Never ended by Hermes (a background child the exit cut
                # off): the plugin's exit flush closes it.
                status = "abandoned"
            self.status[s] = status


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_store_matches_the_hook_stream(runs: dict[str, Run], scenario: str) -> None:
    run = runs[scenario]
    assert run.harness_rc == 0, run.harness_log
    assert run.rc == (1 if scenario in FAILING else 0), run.stdout
    recs = records(run)
    assert recs, "the probe recorded no hooks"
    exp = Expected(recs)

    # Every hook call of ours is in the journal, once, and every auxiliary
    # call the mock served (Hermes fires no hook for them on 0.19.0; the
    # plugin reads them from Hermes's own accounting).
    if NEW_LINE:
        # Hermes 0.21.5+ fires post_auxiliary_call: they are in recs.
        aux = len(exp.aux_calls)
        assert query(run, "SELECT COUNT(*) FROM journal")[0][0] == len(recs)
    else:
        aux = len(served(run, "AUX"))
        assert query(run, "SELECT COUNT(*) FROM journal")[0][0] == len(recs) + aux
    assert query(run, "SELECT COUNT(*) FROM llm_calls WHERE aux_task IS NOT NULL")[0][0] == aux

    # Runs and statuses.
    got_runs = {r[0]: r[1] for r in query(run, "SELECT session_id, status FROM runs")}
    assert set(got_runs) == exp.sessions
    assert {k: v for k, v in got_runs.items() if not k.startswith("aux_")} == exp.status

    # LLM calls: tokens exactly; the cost from Hermes's own price (provenance
    # host), or what the provider billed where it said; the estimate from
    # Hermes's price either way.
    got_calls = {
        r[0]: r[1:]
        for r in query(
            run,
            "SELECT api_request_id, session_id, input_tokens, output_tokens, cache_read_tokens,"
            " cache_write_tokens, estimated, cost_usd, cost_source, estimate_usd FROM llm_calls"
            " WHERE aux_task IS NULL",
        )
    }
    assert set(got_calls) == set(exp.llm_calls)
    for rid, (session, inp, out, cr, cw, estimated) in exp.llm_calls.items():
        g = got_calls[rid]
        assert g[:6] == (session, inp, out, cr, cw, int(estimated)), rid
        billed = exp.billed[rid]
        estimate = mock_cost(inp, out, cr, cw)
        assert g[7] == ("host" if billed is None else exp.sources[rid]), rid
        assert math.isclose(g[6], estimate if billed is None else billed, rel_tol=1e-12, abs_tol=1e-15), rid
        assert math.isclose(g[8], estimate, rel_tol=1e-12, abs_tol=1e-15), rid

    # Failed attempts.
    got_errors = set(query(run, "SELECT api_request_id, retry_count, status_code FROM llm_call_errors"))
    assert got_errors == exp.errors

    # Tool calls (the proxy rows of subagent_stop aside).
    got_tools = {
        (r[0], r[1]): (r[2], bool(r[3]), r[4])
        for r in query(
            run, "SELECT session_id, tool_call_id, tool_name, ok, exit_code FROM tool_calls WHERE proxy = 0"
        )
    }
    assert got_tools == exp.tools

    # Subagent edges.
    got_edges = {
        r[0]: (r[1], r[2])
        for r in query(run, "SELECT child_session_id, parent_session_id, child_status FROM subagent_edges")
    }
    assert got_edges == exp.edges

    # Run totals add up to their rows (auxiliary calls included: the mock's
    # auxiliary model is one neither table nor Hermes prices, so they add
    # calls, not cost).
    for session, llm_calls, cost, tools in query(
        run, "SELECT session_id, llm_calls, cost_usd, tool_calls FROM runs"
    ):
        mine = [c for c in exp.llm_calls.values() if c[0] == session]
        aux_mine = query(
            run, f"SELECT COUNT(*) FROM llm_calls WHERE aux_task IS NOT NULL AND session_id = '{session}'"
        )
        assert llm_calls == len(mine) + aux_mine[0][0], session
        want = sum(
            mock_cost(*c[1:5]) if exp.billed[rid] is None else exp.billed[rid]
            for rid, c in exp.llm_calls.items()
            if c[0] == session
        )
        # Auxiliary calls the hook reported (0.21.5+) are priced like any
        # call of their model; the mock lists mock-model's price only.
        want += sum(
            mock_cost(*c[2:6]) if c[6] is None else c[6]
            for c in exp.aux_calls.values()
            if c[0] == session and (c[1] == "mock-model" or c[6] is not None)
        )
        assert math.isclose(cost, want, rel_tol=1e-9, abs_tol=1e-15)
        assert tools >= len([t for t in exp.tools if t[0] == session])


def our_cli(run: Run, *args: str) -> str:
    """What `hermes-meter --home <the run's store> ARGS...` prints."""
    cli = str(Path(sys.executable).parent / "hermes-meter")
    home = str(run.outdir / "meter")
    return subprocess.run([cli, "--home", home, *args], capture_output=True, text=True, check=True).stdout


def served(run: Run, decision: str | None = None) -> list[dict]:
    """The requests the mock provider answered with 200, optionally of one rule."""
    out = []
    for line in (run.outdir / "requests.jsonl").read_text().splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        if r.get("status") == 200 and r.get("usage") and (decision is None or r.get("decision") == decision):
            out.append(r)
    return out


@pytest.mark.parametrize(
    ("scenario", "aux_tasks"),
    [
        # The REPL's first turn makes Hermes generate a title: an auxiliary
        # call no hook announces on 0.19.0.
        ("multi_turn", ["title_generation"]),
        # Then a /compress typed in the REPL: Hermes summarizes the
        # conversation outside any turn, and records it nowhere itself.
        ("compress", ["compression", "title_generation"]),
    ],
)
def test_a_repl_sessions_ledger_equals_what_the_provider_served_auxiliary_calls_included(
    runs: dict[str, Run], scenario: str, aux_tasks: list[str]
) -> None:
    run = runs[scenario]
    billed = served(run)
    if NEW_LINE:
        # Hermes 0.22 says which calls are auxiliary (the mock answers its
        # compression as a plain chat): the hook is the truth.
        announced = [
            r for r in records(run) if r["hook"] == "post_auxiliary_call" and r["kwargs"].get("usage")
        ]
        assert sorted(r["kwargs"]["aux_task"] for r in announced) == aux_tasks, "Hermes made them"
    else:
        assert len([r for r in billed if r["decision"] == "AUX"]) == len(aux_tasks), "the mock served them"
    (inp, out) = query(
        run,
        "SELECT SUM(input_tokens + cache_read_tokens + cache_write_tokens), SUM(output_tokens)"
        " FROM llm_calls",
    )[0]
    assert inp == sum(r["usage"]["prompt_tokens"] for r in billed)
    assert out == sum(r["usage"]["completion_tokens"] for r in billed)
    got = query(run, "SELECT aux_task FROM llm_calls WHERE aux_task IS NOT NULL ORDER BY aux_task")
    assert [t for (t,) in got] == aux_tasks
    totals = json.loads(our_cli(run, "report", "--json"))["totals"]
    assert totals["aux_llm_calls"] == len(aux_tasks)
    assert totals["input_tokens"] + totals["cache_read_tokens"] + totals["cache_write_tokens"] == inp


def test_what_the_provider_billed_is_the_cost_and_report_reconciles_it(runs: dict[str, Run]) -> None:
    # The mock bills each main call itself (OpenRouter's `usage.cost`) at
    # prices other than the ones it lists, as a provider's invoice can.
    run = runs["provider_cost"]
    billed = [r for r in served(run) if r["decision"] != "AUX"]
    assert len(billed) == 2 and all("cost" in r["usage"] for r in billed), billed
    total = sum(r["usage"]["cost"] for r in billed)
    (calls, cost, estimate) = query(
        run,
        "SELECT COUNT(*), SUM(cost_usd), SUM(estimate_usd) FROM llm_calls"
        " WHERE cost_source = 'provider' AND aux_task IS NULL",
    )[0]
    assert calls == 2 and math.isclose(cost, total, rel_tol=1e-12)
    assert not math.isclose(estimate, total, rel_tol=1e-3), "the mock bills apart from its list prices"
    # The report reconciles every billed call (Hermes 0.22's title call is
    # billed by the mock too).
    (all_calls, all_cost, all_estimate) = query(
        run, "SELECT COUNT(*), SUM(cost_usd), SUM(estimate_usd) FROM llm_calls WHERE cost_source = 'provider'"
    )[0]
    assert all_calls == 2 + (1 if NEW_LINE else 0)
    rows = json.loads(our_cli(run, "report", "--json"))["provider_billed"]
    assert [(r["model"], r["llm_calls"]) for r in rows] == [("mock-model", all_calls)]
    assert math.isclose(rows[0]["billed_usd"], all_cost, rel_tol=1e-12)
    assert math.isclose(rows[0]["estimate_usd"], all_estimate, rel_tol=1e-12)
    text = our_cli(run, "report")
    assert "billed by the provider" in text and f"{all_cost - all_estimate:+.6f}" in text, text


def test_an_upstream_charge_on_the_users_own_key_is_billed_with_the_gateways_fee(
    runs: dict[str, Run],
) -> None:
    # The mock answers as OpenRouter does for a call on the user's own key:
    # the upstream charge in `cost_details.upstream_inference_cost`, its 5%
    # fee in `cost`, `is_byok`. Through Hermes's own SDK objects, the plugin
    # passes both on; the ledger bills their sum.
    run = runs["upstream_cost"]
    billed = [r for r in served(run) if "cost_details" in r["usage"]]
    assert len(billed) >= 2 and all(r["usage"]["is_byok"] for r in billed), billed
    total = sum(r["usage"]["cost_details"]["upstream_inference_cost"] + r["usage"]["cost"] for r in billed)
    (calls, cost, estimate) = query(
        run,
        "SELECT COUNT(*), SUM(cost_usd), SUM(estimate_usd) FROM llm_calls"
        " WHERE cost_source = 'provider_upstream'",
    )[0]
    assert calls == len(billed) and math.isclose(cost, total, rel_tol=1e-12), (calls, cost, total)
    assert not math.isclose(estimate, total, rel_tol=1e-3), "the mock bills apart from its list prices"
    rows = json.loads(our_cli(run, "report", "--json"))["provider_billed"]
    assert [(r["model"], r["llm_calls"]) for r in rows] == [("mock-model", calls)]
    assert math.isclose(rows[0]["billed_usd"], cost, rel_tol=1e-12)
    shown = our_cli(run, "pricing", "show", "mock-model")
    assert "upstream_inference_cost" in shown and "is_byok" in shown, shown


def test_our_cost_of_a_one_shot_run_equals_the_usage_file(runs: dict[str, Run]) -> None:
    run = runs["delegate_sync"]
    usage = json.loads((run.outdir / "usage.json").read_text())
    assert usage["cost_status"] == "estimated", usage
    # The turns' calls: Hermes's usage file leaves out the title call 0.22
    # makes after the answer (the ledger has it, as an auxiliary call).
    ours = query(
        run,
        "SELECT SUM(l.cost_usd) FROM llm_calls l JOIN runs r ON r.session_id = l.session_id"
        " WHERE l.aux_task IS NULL AND (r.session_id = '{0}' OR r.root_session_id = '{0}')".format(
            usage["session_id"]
        ),
    )[0][0]
    assert math.isclose(ours, usage["estimated_cost_usd"], rel_tol=1e-9), (ours, usage)


def test_no_kit_scenario_is_taken_for_a_runaway(runs: dict[str, Run]) -> None:
    # Runaway detection is on by default (alerting): no working run of the
    # kit, subagents, retries and resumes included, may raise it.
    checked = 0
    for name, run in runs.items():
        if name == PANIC_RUN or not run.store.exists():
            continue
        alerts = query(run, "SELECT text FROM alerts WHERE kind = 'runaway'")
        if NEW_LINE and name == "failalways":
            # Hermes 0.22 retries one request 18 times (five recovery
            # cycles after its three retries): that is the retry sign.
            assert len(alerts) == 1 and "one request retried" in alerts[0][0], alerts
        else:
            assert alerts == [], name
        checked += 1
    assert checked >= 20, checked


def test_an_injected_panic_leaves_the_hermes_run_intact(runs: dict[str, Run]) -> None:
    run = runs[PANIC_RUN]
    assert run.harness_rc == 0, run.harness_log
    assert run.rc == 0
    assert "MOCK-FINAL-ANSWER" in run.stdout

    # Hermes went through the whole readfile sequence, our hooks included:
    # the same hooks in the same order, auxiliary calls aside, which Hermes
    # 0.22 makes on a thread of their own (the title call may come before
    # or after on_session_finalize); those the same number of times.
    def split(recs: list[dict]) -> tuple[list[str], list[str]]:
        hooks = [r["hook"] for r in recs]
        aux = sorted(h for h in hooks if h.endswith("_auxiliary_call"))
        return [h for h in hooks if not h.endswith("_auxiliary_call")], aux

    assert split(records(run)) == split(records(runs["readfile"]))
    # Nothing was recorded, and the panic was logged through Python logging.
    assert query(run, "SELECT COUNT(*) FROM journal")[0][0] == 0
    log = (run.outdir / "home" / "logs" / "errors.log").read_text(errors="replace")
    assert "hermes_meter: Hook.Panicked" in log


def test_hermes_meter_status_runs_inside_hermes(runs: dict[str, Run], hermes_bin) -> None:
    run = runs["readfile"]
    env = dict(
        os.environ,
        HERMES_HOME=str(run.outdir / "home"),
        HERMES_METER_HOME=str(run.outdir / "meter"),
        HTTP_PROXY="http://127.0.0.1:9",
        HTTPS_PROXY="http://127.0.0.1:9",
        NO_PROXY="127.0.0.1,localhost",
    )
    p = subprocess.run(
        [str(hermes_bin), "meter", "status"], env=env, text=True, capture_output=True, timeout=120
    )
    assert p.returncode == 0, p.stderr
    assert "journal" in p.stdout and "events" in p.stdout, p.stdout
    p = subprocess.run(
        [str(hermes_bin), "meter", "report", "--json"], env=env, text=True, capture_output=True, timeout=120
    )
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["totals"]["llm_calls"] >= 1, p.stdout


def test_pricing_drift_reads_hermes_own_prices_and_names_what_differs(tmp_path: Path) -> None:
    # The e2e venv is Hermes's own: its `hermes-meter` script runs with
    # Hermes's Python, so drift needs no flag.
    cli = str(Path(sys.executable).parent / "hermes-meter")

    def drift() -> dict:
        p = subprocess.run(
            [cli, "--home", str(tmp_path), "pricing", "drift", "--json", "--all"],
            capture_output=True,
            text=True,
            check=True,
        )
        return json.loads(p.stdout)

    out = drift()
    assert out["hermes_version"] == HERMES_TEXT
    assert out["models"] == len(out["compared"]) > 20
    by_model = {(c["provider"], c["model"]): c for c in out["compared"]}
    opus = by_model[("anthropic", "claude-opus-4-7")]
    assert opus["differs"] == [] and opus["ours_source"] == "builtin", opus
    # An override in pricing.toml that Hermes does not share shows up.
    (tmp_path / "pricing.toml").write_text(
        '[models."claude-opus-4-7"]\ninput = 7.0\noutput = 25.0\ncache_read = 0.5\ncache_write = 6.25\n'
    )
    opus = {(c["provider"], c["model"]): c for c in drift()["compared"]}[("anthropic", "claude-opus-4-7")]
    assert opus["ours_source"] == "user"
    assert opus["differs"] == ["input ours $7 Hermes $5"], opus
