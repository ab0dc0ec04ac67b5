"""Auxiliary LLM calls on a Hermes that has no hook for them (0.19.0).

Hermes makes auxiliary calls (session titles, context compression, vision,
web extraction, approval review, plugins' ``ctx.llm``) outside a turn's API
requests and fires no hook for them before ``post_auxiliary_call`` exists.
It does account them itself: its auxiliary client passes every successful
response to ``agent.aux_accounting.record_aux_usage``, which writes the
normalized usage with ``SessionDB.record_auxiliary_usage`` (one chokepoint,
after Hermes's own exclusions such as MoA slots the main loop counts).

:func:`install` wraps that method, in this process only: Hermes's own
write runs first and unchanged, then the same figures go to our
``post_auxiliary_call`` hook, shaped as newer Hermes fires it (the fields
of ``post_api_request`` plus ``aux_task``). Nothing here opens Hermes's
database. Where Hermes knows ``post_auxiliary_call`` the package registers
the hook instead and never installs this, so no call is counted twice.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any


def install(hook: Callable[..., Any]) -> bool:
    """Wrap ``SessionDB.record_auxiliary_usage``; returns whether it did."""
    try:
        import hermes_state
    except Exception:
        return False
    cls = getattr(hermes_state, "SessionDB", None)
    original = getattr(cls, "record_auxiliary_usage", None)
    if original is None or getattr(original, "_hermes_otel", False):
        return False

    @functools.wraps(original)
    def record_auxiliary_usage(self: Any, session_id: Any, task: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return original(self, session_id, task, *args, **kwargs)
        finally:
            _report(hook, session_id, task, kwargs)

    record_auxiliary_usage._hermes_otel = True  # type: ignore[attr-defined]
    cls.record_auxiliary_usage = record_auxiliary_usage
    return True


def _report(hook: Callable[..., Any], session_id: Any, task: Any, kw: dict) -> None:
    # Never let accounting of ours disturb Hermes's (the hook itself never
    # raises, but building its kwargs must not either).
    try:
        if not session_id or not task:
            return
        hook(
            session_id=session_id,
            aux_task=task,
            model=kw.get("model"),
            provider=kw.get("billing_provider"),
            base_url=kw.get("billing_base_url"),
            ended_at=time.time(),
            usage={
                "input_tokens": kw.get("input_tokens") or 0,
                "output_tokens": kw.get("output_tokens") or 0,
                "cache_read_tokens": kw.get("cache_read_tokens") or 0,
                "cache_write_tokens": kw.get("cache_write_tokens") or 0,
                "reasoning_tokens": kw.get("reasoning_tokens") or 0,
            },
        )
    except BaseException:  # noqa: BLE001 - an aux call must never fail because of us
        pass
