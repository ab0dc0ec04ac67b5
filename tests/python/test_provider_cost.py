"""The provider's billed cost passed on with a call's usage. (The real
Hermes run with a provider that bills is tests/e2e/test_scenarios.py's
``provider_cost`` scenario.)"""

from __future__ import annotations

import sys
import types

from hermes_meter import _provider_cost


class _Usage:
    """Shaped like an OpenAI SDK usage object: declared fields as
    attributes, undeclared ones (OpenRouter's ``cost``) in ``model_extra``."""

    def __init__(self, extra: dict) -> None:
        self.prompt_tokens = 10
        self.model_extra = extra


def test_the_reported_cost_is_read_from_objects_dicts_and_extras() -> None:
    assert _provider_cost.reported_cost({"cost": 0.0123}) == 0.0123
    assert _provider_cost.reported_cost(types.SimpleNamespace(cost=2)) == 2.0
    assert _provider_cost.reported_cost(_Usage({"cost": "0.5"})) == 0.5
    assert _provider_cost.reported_cost(_Usage({"cost": 0})) == 0.0
    for absent in (None, {}, _Usage({}), types.SimpleNamespace(prompt_tokens=1)):
        assert _provider_cost.reported_cost(absent) is None
    for bad in (-1, float("nan"), float("inf"), "free", True, [1], {"usd": 1}):
        assert _provider_cost.reported_cost({"cost": bad}) is None, bad


def test_install_adds_the_cost_to_hermes_summary_once_and_never_breaks_it(monkeypatch) -> None:
    class AIAgent:
        def _usage_summary_for_api_request_hook(self, response):
            if response is None:
                return None
            return {"input_tokens": response.usage.prompt_tokens}

    assert _provider_cost.wrap_main(AIAgent)
    wrapped = AIAgent._usage_summary_for_api_request_hook
    assert _provider_cost.wrap_main(AIAgent) and AIAgent._usage_summary_for_api_request_hook is wrapped, (
        "wrapped once"
    )
    agent = AIAgent()
    billed = types.SimpleNamespace(usage=_Usage({"cost": 0.25}))
    assert agent._usage_summary_for_api_request_hook(billed) == {"input_tokens": 10, "cost": 0.25}
    unbilled = types.SimpleNamespace(usage=_Usage({}))
    assert agent._usage_summary_for_api_request_hook(unbilled) == {"input_tokens": 10}
    assert agent._usage_summary_for_api_request_hook(None) is None

    # A usage object that raises on access leaves Hermes's summary as it was.
    class Hostile:
        prompt_tokens = 3

        @property
        def model_extra(self):
            raise RuntimeError("boom")

    hostile = types.SimpleNamespace(usage=Hostile())
    assert agent._usage_summary_for_api_request_hook(hostile) == {"input_tokens": 3}


def test_the_auxiliary_usage_summary_of_hermes_main_gets_the_cost_too(monkeypatch) -> None:
    # agent/auxiliary_hooks.py at 7effdff81b7bbcdf0e441829030a7ee2d037a7f9:
    # _usage_summary(response, *, provider, api_mode) -> dict | None.
    aux = types.ModuleType("agent.auxiliary_hooks")

    def _usage_summary(response, *, provider, api_mode):
        if response is None or not getattr(response, "usage", None):
            return None
        return {"input_tokens": response.usage.prompt_tokens, "output_tokens": 1}

    aux._usage_summary = _usage_summary
    agent = types.ModuleType("agent")
    agent.auxiliary_hooks = aux
    monkeypatch.setitem(sys.modules, "agent", agent)
    monkeypatch.setitem(sys.modules, "agent.auxiliary_hooks", aux)
    assert _provider_cost.wrap_auxiliary(aux)
    once = aux._usage_summary
    assert _provider_cost.wrap_auxiliary(aux) and aux._usage_summary is once, "never wrapped twice"
    billed = types.SimpleNamespace(usage=_Usage({"cost": 0.0042}))
    assert aux._usage_summary(billed, provider="openrouter", api_mode="chat_completions") == {
        "input_tokens": 10,
        "output_tokens": 1,
        "cost": 0.0042,
    }
    assert aux._usage_summary(None, provider="openrouter", api_mode="chat_completions") is None


# OpenRouter's usage of a call on the user's own key, as its usage
# accounting documents it (the fee, then the upstream charge).
OPENROUTER_BYOK_USAGE = {
    "completion_tokens": 2,
    "completion_tokens_details": {"reasoning_tokens": 0},
    "cost": 0.95,
    "cost_details": {"upstream_inference_cost": 19},
    "is_byok": True,
    "prompt_tokens": 194,
    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
    "total_tokens": 196,
}


def test_the_upstream_charge_and_own_key_flag_are_passed_on_beside_the_cost() -> None:
    class AIAgent:
        def _usage_summary_for_api_request_hook(self, response):
            return {"input_tokens": response.usage.prompt_tokens}

    assert _provider_cost.wrap_main(AIAgent)
    agent = AIAgent()
    extra = {k: v for k, v in OPENROUTER_BYOK_USAGE.items() if k != "prompt_tokens"}
    summary = agent._usage_summary_for_api_request_hook(types.SimpleNamespace(usage=_Usage(extra)))
    assert summary == {"input_tokens": 10, "cost": 0.95, "upstream_cost": 19.0, "byok": True}
    # A gateway that reports only the upstream charge (Nous Portal), as a
    # plain dict usage: no `cost`, no `byok`.
    nous = {"prompt_tokens": 37, "completion_tokens": 16, "cost_details": {"upstream_inference_cost": 0.0042}}
    assert _provider_cost.reported_upstream_cost(nous) == 0.0042
    assert _provider_cost.reported_cost(nous) is None
    # Figures that are not amounts are not passed on.
    for bad in (-1, float("nan"), "lots", True, None):
        assert (
            _provider_cost.reported_upstream_cost({"cost_details": {"upstream_inference_cost": bad}}) is None
        )
    assert _provider_cost.reported_upstream_cost({"cost_details": "19"}) is None
    # `is_byok` must be the boolean true; anything else is not a key of the user's own.
    odd = _Usage({"cost": 0.1, "is_byok": "yes"})
    assert agent._usage_summary_for_api_request_hook(types.SimpleNamespace(usage=odd)) == {
        "input_tokens": 10,
        "cost": 0.1,
    }


# Anthropic's Messages API usage of a call that wrote its prompt to the
# one-hour cache, as its prompt-caching documentation shows it.
ANTHROPIC_1H_USAGE = {
    "input_tokens": 2095,
    "cache_creation_input_tokens": 2051,
    "cache_read_input_tokens": 0,
    "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 2051},
    "output_tokens": 503,
}


def test_one_hour_cache_writes_are_passed_on_where_the_provider_says_them() -> None:
    class AIAgent:
        def _usage_summary_for_api_request_hook(self, response):
            return {"cache_write_tokens": 2051}

    assert _provider_cost.wrap_main(AIAgent)
    agent = AIAgent()
    # As a dict, and as the SDK's object whose `cache_creation` is an object.
    assert agent._usage_summary_for_api_request_hook(types.SimpleNamespace(usage=ANTHROPIC_1H_USAGE)) == {
        "cache_write_tokens": 2051,
        "cache_write_1h_tokens": 2051,
    }
    sdk = types.SimpleNamespace(
        input_tokens=2095,
        cache_creation=types.SimpleNamespace(ephemeral_5m_input_tokens=51, ephemeral_1h_input_tokens=2000),
    )
    assert _provider_cost.reported_cache_write_1h(sdk) == 2000
    # Five-minute writes only, no split, or nonsense: nothing is added.
    for usage in (
        {"cache_creation": {"ephemeral_5m_input_tokens": 2051, "ephemeral_1h_input_tokens": 0}},
        {"cache_creation_input_tokens": 2051},
        {"cache_creation": {"ephemeral_1h_input_tokens": -5}},
        {"cache_creation": {"ephemeral_1h_input_tokens": "2051"}},
        {"cache_creation": {"ephemeral_1h_input_tokens": True}},
    ):
        assert _provider_cost.reported_cache_write_1h(usage) is None, usage
