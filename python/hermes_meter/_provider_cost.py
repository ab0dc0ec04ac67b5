"""The cost a provider reports for a call, passed on with its usage.

Some providers bill each response themselves and say what they billed in
the response's usage (OpenRouter's ``usage.cost``, in USD), and some the
charge of the provider behind them (``usage.cost_details.
upstream_inference_cost``: Nous Portal's real charge, about 5x its token
price; OpenRouter's for a call on the user's own key, ``is_byok``). Hermes 0.19.0
drops everything but the token counts when it builds the ``usage`` of
``post_api_request`` (``AIAgent._usage_summary_for_api_request_hook``).
:func:`wrap_main` wraps that method, in this process only: Hermes's summary is
built first and unchanged, then the provider's figures are added (``cost``,
``upstream_cost``, ``byok``) when the raw usage carries finite,
non-negative numbers, and Anthropic's one-hour cache writes
(``cache_write_1h_tokens``, from ``usage.cache_creation``) where it says
them. The ledger then bills the call from them (source
``provider`` or ``provider_upstream``; the rule is the model's
``PriceTable::bill``) with our estimate beside it. Nothing else in Hermes
reads the keys.
"""

from __future__ import annotations

import math
from typing import Any

from . import _patch


def wrap_main(agent_class: Any) -> bool:
    """Wraps ``AIAgent._usage_summary_for_api_request_hook`` (the usage of
    ``post_api_request``); returns whether it is in place. Installed by
    ``_integrations.settle``: the class is patched, so agents made before
    the wrap see it too."""

    def with_cost(original: Any) -> Any:
        def summary_with_cost(self: Any, response: Any, *args: Any, **kwargs: Any) -> Any:
            return _add_cost(original(self, response, *args, **kwargs), response)

        return summary_with_cost

    _patch.wrap(agent_class, "_usage_summary_for_api_request_hook", with_cost)
    return _patch.is_wrapped(agent_class, "_usage_summary_for_api_request_hook")


def wrap_auxiliary(auxiliary_hooks: Any) -> bool:
    """Hermes 0.21.5 and later build ``post_auxiliary_call``'s usage in
    ``agent.auxiliary_hooks._usage_summary(response, *, provider,
    api_mode)`` (read at 7effdff81b7bbcdf0e441829030a7ee2d037a7f9), which
    drops the provider's billed cost as the main loop's summary does: the
    same ``cost`` is added there."""

    def with_cost(original: Any) -> Any:
        def usage_summary_with_cost(response: Any, *args: Any, **kwargs: Any) -> Any:
            return _add_cost(original(response, *args, **kwargs), response)

        return usage_summary_with_cost

    _patch.wrap(auxiliary_hooks, "_usage_summary", with_cost)
    return _patch.is_wrapped(auxiliary_hooks, "_usage_summary")


def _add_cost(summary: Any, response: Any) -> Any:
    """Hermes's usage ``summary`` of ``response``, with the provider's billed
    ``cost``, the upstream provider's ``upstream_cost`` and whether the call
    ran on the user's own key (``byok``) added where the raw usage has them
    and the summary has not."""
    try:
        if isinstance(summary, dict):
            usage = getattr(response, "usage", None)
            figures = (
                ("cost", reported_cost(usage)),
                ("upstream_cost", reported_upstream_cost(usage)),
                ("byok", True if _field(usage, "is_byok") is True else None),
                ("cache_write_1h_tokens", reported_cache_write_1h(usage)),
            )
            for key, value in figures:
                if value is not None and key not in summary:
                    summary[key] = value
    except Exception:  # noqa: BLE001 - Hermes's summary must survive us
        pass
    return summary


def _field(obj: Any, name: str) -> Any:
    """``name`` of a raw usage object or dict (or of its ``cost_details``):
    an attribute, a dict key, or an undeclared field Pydantic keeps in
    ``model_extra``."""
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(name)
    value = getattr(obj, name, None)
    if value is None:
        extra = getattr(obj, "model_extra", None)
        value = extra.get(name) if isinstance(extra, dict) else None
    return value


def reported_cache_write_1h(usage: Any) -> int | None:
    """Of the call's cache writes, those kept an hour, where the provider
    says (Anthropic's ``usage.cache_creation.ephemeral_1h_input_tokens``):
    they bill at the one-hour rate, 2x input rather than 1.25x."""
    value = _field(_field(usage, "cache_creation"), "ephemeral_1h_input_tokens")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    return value


def reported_upstream_cost(usage: Any) -> float | None:
    """The upstream provider's charge for the call, USD
    (``usage.cost_details.upstream_inference_cost``), if the usage has one."""
    return _usd(_field(_field(usage, "cost_details"), "upstream_inference_cost"))


def reported_cost(usage: Any) -> float | None:
    """The provider's billed USD in a raw usage object or dict, if any."""
    return _usd(_field(usage, "cost"))


def _usd(value: Any) -> float | None:
    """A finite, non-negative amount of USD, or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        cost = float(value)
    except ValueError:
        return None
    return cost if math.isfinite(cost) and cost >= 0 else None
