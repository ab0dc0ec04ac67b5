"""The cost a provider reports for a call, passed on with its usage.

Some providers bill each response themselves and say what they billed in
the response's usage (OpenRouter's ``usage.cost``, in USD). Hermes 0.19.0
drops everything but the token counts when it builds the ``usage`` of
``post_api_request`` (``AIAgent._usage_summary_for_api_request_hook``).
:func:`wrap_main` wraps that method, in this process only: Hermes's summary is
built first and unchanged, then the provider's figure is added as ``cost``
when the raw usage carries a finite, non-negative number. The ledger then
records it as the call's cost (source ``provider``) with our estimate
beside it. Nothing else in Hermes reads the key.
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
    ``cost`` added where the raw usage has one and the summary has none."""
    try:
        if isinstance(summary, dict) and "cost" not in summary:
            cost = reported_cost(getattr(response, "usage", None))
            if cost is not None:
                summary["cost"] = cost
    except Exception:  # noqa: BLE001 - Hermes's summary must survive us
        pass
    return summary


def reported_cost(usage: Any) -> float | None:
    """The provider's billed USD in a raw usage object or dict, if any."""
    if usage is None:
        return None
    if isinstance(usage, dict):
        value = usage.get("cost")
    else:
        value = getattr(usage, "cost", None)
        if value is None:
            # Pydantic models keep fields they do not declare here.
            extra = getattr(usage, "model_extra", None)
            value = extra.get("cost") if isinstance(extra, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        cost = float(value)
    except ValueError:
        return None
    return cost if math.isfinite(cost) and cost >= 0 else None
