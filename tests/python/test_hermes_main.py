"""The plugin on Hermes git main (0.21 - 0.23), held by a dispatcher that
behaves like main's (hermes_main_dispatch.py): registered through its real
``register(ctx)``, driven through the real binding (its key filter
included), with kwargs shaped after main's call sites
(``agent/auxiliary_hooks.py`` at 7effdff81b7bbcdf0e441829030a7ee2d037a7f9).
The ledger must equal what the provider served, and no call may be lost.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import query, run_python

HERE = Path(__file__).resolve().parent

# A Hermes process: main's hermes_cli modules (as far as the plugin reads
# them) for VERSION, Hermes's WARNINGs collected.
PRELUDE = """
import json, sys, threading, time, types, logging
sys.path.insert(0, {here!r})
import hermes_main_dispatch as hmd
VERSION = {version!r}
hmd.install_modules(VERSION)
warnings = []
class Collect(logging.Handler):
    def emit(self, record):
        warnings.append(record.getMessage())
logging.getLogger().addHandler(Collect(level=logging.WARNING))
import hermes_meter
from hermes_meter import _native, _skips
"""


def _run(tmp_path: Path, body: str, version: str, **env: str) -> dict:
    code = PRELUDE.format(here=str(HERE), version=version) + body
    p = run_python(code, HERMES_METER_HOME=str(tmp_path / "meter"), **env)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def aux_attempt(session: str, turn: str, request_id: str, retry: int, task: str, usage, error=None) -> dict:
    """``post_auxiliary_call`` as ``_AuxCallHooks.post`` builds it."""
    failed = error is not None or usage is None
    return {
        "session_id": session,
        "task_id": session,
        "turn_id": turn,
        "platform": "telegram" if session else "",
        "aux_task": task,
        "task": task,
        "middleware_trace": [],
        "api_request_id": request_id,
        "retry_count": retry,
        "api_call_count": retry + 1,
        "model": "google/gemini-2.5-flash",
        "provider": "openrouter",
        "base_url": "https://openrouter.ai/api/v1",
        "api_mode": "chat_completions",
        "streaming": False,
        "started_at": time.time(),
        "message_count": 6,
        "ended_at": time.time(),
        "api_duration": 0.2,
        "error": error,
        "error_type": error.split(":")[0] if error else None,
        "finish_reason": None if failed else "stop",
        "response_model": None if failed else "google/gemini-2.5-flash",
        "usage": usage,
        "response": None,
        "assistant_content_chars": 0 if failed else 120,
        "assistant_tool_call_count": 0,
    }


def _usage(n: int) -> dict:
    return {
        "input_tokens": n,
        "output_tokens": n // 10,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "reasoning_tokens": 0,
        "prompt_tokens": n,
        "total_tokens": n + n // 10,
    }


@pytest.mark.parametrize("version", ["0.21", "main"])
def test_a_parallel_tool_batch_is_recorded_whole_although_hermes_skips_overlapping_calls(
    tmp_path, version
) -> None:
    body = """
d = hmd.Dispatcher(VERSION)
hermes_meter.register(hmd.Context(d))
d.invoke_hook("on_session_start", session_id="s-tools", model="m", platform="cli")
threads, rounds = 8, 25
barrier = threading.Barrier(threads)
def worker(i):
    for r in range(rounds):
        barrier.wait()
        d.invoke_hook("post_tool_call", session_id="s-tools", task_id="s-tools", turn_id="s-tools:t1",
                      api_request_id="s-tools:t1:api:1", tool_call_id=f"call-{i}-{r}", tool_name="terminal",
                      args={"command": "true"}, result='{"output": "", "exit_code": 0, "error": null}',
                      duration_ms=3, status="ok")
ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
for t in ts: t.start()
for t in ts: t.join()
# One collision for certain: the call of another tool of the batch still
# running, as Hermes's own gate holds it.
cb = d._hooks["post_tool_call"][0]
kw = dict(session_id="s-tools", turn_id="s-tools:t1", tool_call_id="call-held", tool_name="read_file",
          result='{"content": "x"}', duration_ms=1, status="ok")
held = d.gate_key("post_tool_call", cb, kw)
d._hook_running_callbacks[held] = object()
d.invoke_hook("post_tool_call", **kw)
del d._hook_running_callbacks[held]
assert _native.flush(10.0)
print(json.dumps({"counts": _skips.watch().totals(), "warnings": warnings}))
"""
    out = _run(tmp_path, body, version)
    recorded, lost = out["counts"]
    assert lost == 0
    assert recorded >= 1, "the held call was skipped by Hermes and recorded by the plugin"
    rows = query("SELECT COUNT(*) FROM tool_calls WHERE session_id = 's-tools'", store_dir=tmp_path / "meter")
    assert rows[0][0] == 8 * 25 + 1, "every tool call of the batch is in the ledger"
    assert not [w for w in out["warnings"] if "skipped" in w], "a call recorded anyway is no lost call"


def test_auxiliary_retries_and_moa_advisors_are_billed_exactly_on_main(tmp_path) -> None:
    attempts = [
        # One compression: a failed attempt, then the retry that answered.
        aux_attempt(
            "s-aux", "s-aux:t1", "aux-1", 0, "compression", None, "APIConnectionError: Connection error."
        ),
        aux_attempt("s-aux", "s-aux:t1", "aux-1", 1, "compression", _usage(1200)),
        # A streamed title: no usage, estimated.
        # Mixture of agents: three advisors of one turn at once (one turn
        # id: main's gate key collides), the aggregator (the turn's own).
        aux_attempt("s-aux", "s-aux:t1", "aux-2", 0, "moa_reference", _usage(300)),
        aux_attempt("s-aux", "s-aux:t1", "aux-3", 0, "moa_reference", _usage(400)),
        aux_attempt("s-aux", "s-aux:t1", "aux-4", 0, "moa_reference", _usage(500)),
        aux_attempt("s-aux", "s-aux:t1", "aux-5", 0, "moa_aggregator", _usage(900)),
        # Gateway idle work: no turn.
        aux_attempt("", "", "aux-6", 0, "title_generation", _usage(250)),
    ]
    body = f"""
d = hmd.Dispatcher(VERSION)
hermes_meter.register(hmd.Context(d))
attempts = json.loads({json.dumps(json.dumps(attempts))})
d.invoke_hook("post_auxiliary_call", **attempts[0])
d.invoke_hook("post_auxiliary_call", **attempts[1])
advisors = attempts[2:5]
barrier = threading.Barrier(len(advisors))
def advise(kw):
    barrier.wait()
    d.invoke_hook("post_auxiliary_call", **kw)
ts = [threading.Thread(target=advise, args=(kw,)) for kw in advisors]
for t in ts: t.start()
for t in ts: t.join()
cb = d._hooks["post_auxiliary_call"][0]
held = d.gate_key("post_auxiliary_call", cb, attempts[5])
d._hook_running_callbacks[held] = object()
d.invoke_hook("post_auxiliary_call", **attempts[5])
d.invoke_hook("post_auxiliary_call", **attempts[6])
del d._hook_running_callbacks[held]
assert _native.flush(10.0)
print(json.dumps({{"counts": _skips.watch().totals()}}))
"""
    out = _run(tmp_path, body, "main")
    assert out["counts"][1] == 0
    store = tmp_path / "meter"
    calls = query(
        "SELECT api_request_id, aux_task, input_tokens, estimated FROM llm_calls ORDER BY api_request_id",
        store_dir=store,
    )
    assert [tuple(c) for c in calls] == [
        ("aux-1#1", "compression", 1200, 0),
        ("aux-2", "moa_reference", 300, 0),
        ("aux-3", "moa_reference", 400, 0),
        ("aux-4", "moa_reference", 500, 0),
        ("aux-6", "title_generation", 250, 0),
    ], "what the provider billed, each attempt once, the aggregator not twice"
    errors = query("SELECT api_request_id, retry_count, error_type FROM llm_call_errors", store_dir=store)
    assert [tuple(e) for e in errors] == [("aux-1", 0, "APIConnectionError")]
    sessions = query("SELECT session_id FROM llm_calls WHERE api_request_id = 'aux-6'", store_dir=store)
    assert sessions[0][0] == "aux_" + time.strftime("%Y%m%d", time.gmtime()), (
        "turn-less: the day's aux session"
    )


def test_concurrent_gateway_sessions_start_without_losing_one(tmp_path) -> None:
    # on_session_start carries neither tool_call_id nor turn_id: on main
    # every concurrent start shares one gate key.
    body = """
d = hmd.Dispatcher(VERSION)
hermes_meter.register(hmd.Context(d))
cb = d._hooks["on_session_start"][0]
held = d.gate_key("on_session_start", cb, {})
d._hook_running_callbacks[held] = object()
for i in range(5):
    d.invoke_hook("on_session_start", session_id=f"gw-{i}", model="m", platform="telegram")
del d._hook_running_callbacks[held]
assert _native.flush(10.0)
print(json.dumps({"counts": _skips.watch().totals()}))
"""
    out = _run(tmp_path, body, "main")
    assert out["counts"] == [5, 0]
    rows = query("SELECT COUNT(*) FROM runs WHERE session_id LIKE 'gw-%'", store_dir=tmp_path / "meter")
    assert rows[0][0] == 5
    # The count outlives the process: `hermes-meter status` shows it.
    status = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from hermes_meter import _native; sys.exit(_native.cli_main(sys.argv[1:]))",
            "hermes-meter",
            "status",
        ],
        env=dict(os.environ, HERMES_METER_HOME=str(tmp_path / "meter")),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 0, status.stderr
    assert "5 hook calls Hermes skipped" in status.stdout and "5 recorded anyway, 0 lost" in status.stdout, (
        status.stdout
    )


def test_a_skip_of_another_plugins_callback_is_left_alone(tmp_path) -> None:
    body = """
d = hmd.Dispatcher(VERSION)
hermes_meter.register(hmd.Context(d))
def other(**kw):
    return None
d._hooks["post_llm_call"].append(other)
held = d.gate_key("post_llm_call", other, {"turn_id": "t"})
d._hook_running_callbacks[held] = object()
d.invoke_hook("post_llm_call", session_id="s-o", turn_id="t", model="m")
assert _native.flush(10.0)
print(json.dumps({"counts": _skips.watch().totals(), "warnings": warnings}))
"""
    out = _run(tmp_path, body, "main")
    assert out["counts"] == [0, 0]
    assert any("callback other skipped" in w for w in out["warnings"]), "Hermes's own warning goes through"


def test_status_names_each_integration_point_and_its_hermes_versions(tmp_path) -> None:
    body = """
d = hmd.Dispatcher(VERSION)
ctx = hmd.Context(d)
hermes_meter.register(ctx)
# The first hook call settles the points (register imports nothing).
d.invoke_hook("on_session_start", session_id="s-points", platform="cli")
from hermes_meter import _integrations
print(json.dumps({"lines": _integrations.lines(), "slash": ctx.commands["meter"]("status"),
                  "plain": ctx.commands["meter"]("")}))
"""
    out = _run(tmp_path, body, "main")
    assert "Hermes integration points:" in out["slash"], "/meter status lists them"
    assert "_run_hook_callback_bounded" in out["slash"]
    assert "_usage_summary_for_api_request_hook" in out["plain"], "plain /meter shows what is MISSING"
    assert "_run_hook_callback_bounded" not in out["plain"], "and only that"
    lines = out["lines"]
    assert any(
        line.startswith("agent.aux_accounting.record_aux_usage (Hermes 0.19.0 - 0.21.x): not needed")
        for line in lines
    ), lines
    assert any("_usage_summary_for_api_request_hook" in line and "MISSING" in line for line in lines), (
        "no run_agent here: the provider's billed cost is not recorded, and status says so"
    )
    assert any(
        line.startswith(
            "hermes_cli.plugins_dispatch.PluginDispatchMixin._run_hook_callback_bounded"
            " (Hermes 0.21.0 - 0.23.x): active"
        )
        for line in lines
    ), "the dispatcher's frame has the locals a skipped call is read from"


@pytest.mark.parametrize("classifies", [True, False])
def test_a_budget_stop_is_final_on_main_not_a_retry_storm(tmp_path, classifies) -> None:
    # A global budget already over its hard line: every LLM call is stopped
    # before the provider. Without transform_api_error_classification
    # (before 0.20.2) Hermes retries the stop; every retry is stopped too.
    store = tmp_path / "meter"
    store.mkdir(parents=True)
    (store / "budgets.toml").write_text("[global]\ndaily = 0.000001\n")
    forget = (
        ""
        if classifies
        else 'sys.modules["hermes_cli.plugins"].VALID_HOOKS.discard("transform_api_error_classification")'
    )
    body = (
        forget
        + """
d = hmd.Dispatcher(VERSION)
hermes_meter.register(hmd.Context(d))
ids = dict(session_id="s-stop", task_id="s-stop", turn_id="s-stop:t1", platform="cli", model="gpt-4o-mini",
           provider="openai", base_url="https://api.openai.com/v1", api_mode="chat_completions")
d.invoke_hook("on_session_start", session_id="s-stop", model="gpt-4o-mini", platform="cli")
d.invoke_hook("pre_llm_call", session_id="s-stop", task_id="s-stop", turn_id="s-stop:t1", model="gpt-4o-mini",
              platform="cli", is_first_turn=True, user_message="hi")
d.invoke_hook("pre_api_request", api_request_id="s-stop:t1:api:1", api_call_count=1, **ids)
d.invoke_hook("post_api_request", api_request_id="s-stop:t1:api:1", api_call_count=1, api_duration=0.1,
              usage={"input_tokens": 50000, "output_tokens": 5000}, response_model="gpt-4o-mini", **ids)
assert _native.flush(5.0)
served = []
def provider():
    served.append(1)
    return "a response"
d.invoke_hook("pre_api_request", api_request_id="s-stop:t1:api:2", api_call_count=2, **ids)
response, classified = hmd.call_api_with_retries(d, provider, api_request_id="s-stop:t1:api:2", **ids)
assert _native.flush(5.0)
print(json.dumps({"served": len(served), "response": response, "classified": classified}))
"""
    )
    out = _run(tmp_path, body, "main")
    assert out["served"] == 0, "stopped before the provider, every attempt"
    assert out["response"] is None
    attempts = 1 if classifies else 3
    if classifies:
        assert [c["retryable"] for c in out["classified"]] == [False], "one final classification, no retries"
        assert out["classified"][0]["reason"] == "provider_policy_blocked"
    else:
        assert [c["reason"] for c in out["classified"]] == ["unknown"] * attempts
    errors = query(
        "SELECT COUNT(*) FROM llm_call_errors WHERE api_request_id = 's-stop:t1:api:2'", store_dir=store
    )
    assert errors[0][0] == attempts


def test_the_tool_gate_is_left_out_where_hermes_blocks_overlapping_tool_calls(tmp_path) -> None:
    body = """
d = hmd.Dispatcher(VERSION)
hermes_meter.register(hmd.Context(d))
d.invoke_hook("on_session_start", session_id="s-gate", platform="cli")
from hermes_meter import _integrations
print(json.dumps({"hooks": sorted(d._hooks), "lines": _integrations.lines()}))
"""
    old = _run(tmp_path / "a", body, "0.21")
    assert "pre_tool_call" not in old["hooks"], "0.21.x would block every overlapping tool"
    assert any(
        line.startswith("hermes_cli.plugins_dispatch._hook_call_identity")
        and "pre_tool_call is not registered" in line
        for line in old["lines"]
    ), old["lines"]
    new = _run(tmp_path / "b", body, "main")
    assert "pre_tool_call" in new["hooks"], "main keys the gate by tool call"
    assert "transform_api_error_classification" in new["hooks"]


def test_an_auxiliary_call_of_a_session_over_its_hard_line_is_stopped_too(tmp_path) -> None:
    # Main's auxiliary calls (aux-…) pass the llm_execution middleware but
    # fire no pre_api_request: the session's last verdict stops them.
    store = tmp_path / "meter"
    store.mkdir(parents=True)
    (store / "budgets.toml").write_text("[global]\ndaily = 0.000001\n")
    body = """
d = hmd.Dispatcher(VERSION)
hermes_meter.register(hmd.Context(d))
ids = dict(session_id="s-aux-stop", task_id="s-aux-stop", turn_id="s-aux-stop:t1", platform="cli",
           model="gpt-4o-mini", provider="openai", base_url="https://api.openai.com/v1",
           api_mode="chat_completions")
d.invoke_hook("pre_api_request", api_request_id="s-aux-stop:t1:api:1", api_call_count=1, **ids)
d.invoke_hook("post_api_request", api_request_id="s-aux-stop:t1:api:1", api_call_count=1, api_duration=0.1,
              usage={"input_tokens": 50000, "output_tokens": 5000}, response_model="gpt-4o-mini", **ids)
assert _native.flush(5.0)
d.invoke_hook("pre_api_request", api_request_id="s-aux-stop:t1:api:2", api_call_count=2, **ids)
served = []
def provider():
    served.append(1)
    return "a response"
outcomes = {}
for session, request_id in [("s-aux-stop", "aux-7"), ("s-never-seen", "aux-8")]:
    try:
        hmd.run_llm_execution(d, {"messages": []}, provider, api_request_id=request_id, session_id=session,
                              model="gpt-4o-mini", provider="openai")
        outcomes[session] = "served"
    except hmd.LLMExecutionBlocked as exc:
        outcomes[session] = "stopped: " + str(exc)[:15]
print(json.dumps({"outcomes": outcomes, "served": len(served)}))
"""
    out = _run(tmp_path, body, "main")
    assert out["outcomes"]["s-aux-stop"].startswith("stopped: BUDGET-EXCEEDED"), out
    assert out["outcomes"]["s-never-seen"] == "served", "a session with no verdict yet goes ahead"
    assert out["served"] == 1
