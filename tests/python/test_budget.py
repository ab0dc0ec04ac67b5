"""The budget side of the package: the llm_execution middleware's stand-in
responses and the fail-open cron pause. (Budget decisions are Rust's, tested
in tests/budget.rs; the real Hermes runs are in tests/e2e/test_budgets.py.)"""

from __future__ import annotations

import sys
import types

from hermes_meter import _budget


def test_the_stand_in_has_the_shape_of_each_provider_api() -> None:
    chat = _budget.stand_in("chat_completions", "BUDGET-EXCEEDED: x")
    assert chat.model == _budget.BLOCKED_MODEL == "hermes-meter/budget-blocked"
    assert chat.usage is None
    assert chat.choices[0].message.content == "BUDGET-EXCEEDED: x"
    assert not chat.choices[0].message.tool_calls
    assert chat.choices[0].finish_reason == "stop"
    assert _budget.stand_in(None, "t").choices, "unknown modes get the chat shape"
    claude = _budget.stand_in("anthropic_messages", "t")
    assert [b.type for b in claude.content] == ["text"] and claude.content[0].text == "t"
    assert claude.stop_reason == "end_turn" and claude.model == _budget.BLOCKED_MODEL
    codex = _budget.stand_in("codex_responses", "t")
    assert codex.status == "completed" and codex.output and codex.output_text == "t"
    assert codex.output[0].content[0].type == "output_text"


def test_the_middleware_calls_the_provider_unless_the_call_was_stopped() -> None:
    calls = []

    def next_call(next_payload=None):
        calls.append(next_payload)
        return "provider response"

    kwargs = {"request": {}, "api_request_id": "never-stopped:api:1", "api_mode": "chat_completions"}
    assert _budget.llm_execution(next_call=next_call, **kwargs) == "provider response"
    assert calls == [None]
    # No id at all: the call goes ahead too.
    assert _budget.llm_execution(next_call=next_call, request={}) == "provider response"


def test_a_call_a_rate_limit_holds_back_sleeps_then_goes_and_a_broken_wait_never_stops_it(
    monkeypatch,
) -> None:
    slept = []
    monkeypatch.setattr(_budget.time, "sleep", slept.append)
    waits = {"held:api:1": 12.5, "forever:api:1": 10_000.0}
    monkeypatch.setattr(_budget._native, "llm_wait", lambda request_id=None: waits.pop(request_id, None))
    calls = []

    def next_call(next_payload=None):
        calls.append(slept[:])
        return "provider response"

    kwargs = {"request": {}, "api_mode": "chat_completions"}
    assert (
        _budget.llm_execution(next_call=next_call, api_request_id="held:api:1", **kwargs)
        == "provider response"
    )
    assert calls == [[12.5]], "it slept, then called the provider"
    assert (
        _budget.llm_execution(next_call=next_call, api_request_id="held:api:1", **kwargs)
        == "provider response"
    )
    assert slept == [12.5], "a wait is taken once"
    _budget.llm_execution(next_call=next_call, api_request_id="forever:api:1", **kwargs)
    assert slept[-1] == _budget.MAX_RATE_WAIT_SECONDS, "bounded whatever it is told"

    def broken(request_id=None):
        raise RuntimeError("the binding went away")

    monkeypatch.setattr(_budget._native, "llm_wait", broken)
    assert (
        _budget.llm_execution(next_call=next_call, api_request_id="x:api:1", **kwargs) == "provider response"
    )


def test_the_cron_pause_never_raises(monkeypatch) -> None:
    jobs = types.ModuleType("cron.jobs")
    cron = types.ModuleType("cron")
    cron.jobs = jobs
    monkeypatch.setitem(sys.modules, "cron", cron)
    monkeypatch.setitem(sys.modules, "cron.jobs", jobs)

    def boom(job_id, reason=None):
        raise RuntimeError("jobs.json is locked")

    jobs.pause_job = boom
    assert _budget.pause_cron_job("0123456789ab", "r") is False
    seen = {}
    jobs.pause_job = lambda job_id, reason=None: seen.update(job=job_id, reason=reason) or {"id": job_id}
    assert _budget.pause_cron_job("0123456789ab", "over budget") is True
    assert seen == {"job": "0123456789ab", "reason": "over budget"}
    jobs.pause_job = lambda job_id, reason=None: None
    assert _budget.pause_cron_job("missing", "r") is False


def test_a_stop_raises_hermes_own_block_where_hermes_has_it(monkeypatch) -> None:
    # Hermes 0.19.0 has no LLMExecutionBlocked: the stand-in answers.
    monkeypatch.setitem(sys.modules, "hermes_cli.middleware", types.ModuleType("hermes_cli.middleware"))
    assert _budget.stop("chat_completions", "BUDGET-EXCEEDED: x").model == _budget.BLOCKED_MODEL

    # Newer Hermes: shaped after hermes_cli/middleware.py there.
    class LLMExecutionBlocked(Exception):
        def __init__(self, reason: str, *, metadata: dict | None = None) -> None:
            super().__init__(reason)
            self.reason = reason
            self.metadata = metadata or {}

    middleware = types.ModuleType("hermes_cli.middleware")
    middleware.LLMExecutionBlocked = LLMExecutionBlocked
    monkeypatch.setitem(sys.modules, "hermes_cli.middleware", middleware)
    try:
        _budget.stop("chat_completions", "BUDGET-EXCEEDED: x")
    except LLMExecutionBlocked as e:
        assert e.reason == "BUDGET-EXCEEDED: x"
        assert e.metadata == {"checked_by": "hermes-meter", "reason": "budget"}
    else:
        raise AssertionError("the call was not stopped")


def test_the_request_middleware_routes_only_a_downgraded_session(monkeypatch) -> None:
    # No downgrade: Hermes's request goes as it is.
    assert _budget.llm_request(request={"model": "gpt-4o", "messages": []}, session_id="s") is None
    asked = []

    def downgrade_model(session_id=None, model=None):
        asked.append((session_id, model))
        return "gpt-4o-mini"

    monkeypatch.setattr(_budget._native, "downgrade_model", downgrade_model)
    request = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    out = _budget.llm_request(request=request, session_id="s")
    assert out["request"] == {"model": "gpt-4o-mini", "messages": request["messages"]}
    assert request["model"] == "gpt-4o", "Hermes's own dict is left alone"
    assert asked[0] == ("s", "gpt-4o"), "the handle is asked for the request's own model"
    # A request with no model (Hermes main's codex input rewrite) or already
    # on the cheaper model is left alone; so is anything odd.
    assert _budget.llm_request(request={"messages": []}, session_id="s") is None
    assert _budget.llm_request(request={"model": "gpt-4o-mini"}, session_id="s") is None
    assert _budget.llm_request(request="not a dict", session_id="s") is None

    def boom(session_id=None, model=None):
        raise RuntimeError("native failure")

    monkeypatch.setattr(_budget._native, "downgrade_model", boom)
    assert _budget.llm_request(request={"model": "gpt-4o"}, session_id="s") is None, "fails open"
