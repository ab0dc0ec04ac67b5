"""Auxiliary LLM calls on a Hermes that has no hook for them (0.19.0).

Hermes makes auxiliary calls (session titles, context compression, vision,
web extraction, approval review, plugins' ``ctx.llm``) outside a turn's API
requests and fires no hook for them before ``post_auxiliary_call`` exists.
Every successful one passes through one chokepoint of its auxiliary client,
``agent.aux_accounting.record_aux_usage(response, task, provider=...,
base_url=...)``, which writes the usage to Hermes's own database, but only
while a turn has published its session: a ``/compress`` typed in the REPL
is billed by the provider and recorded nowhere.

:func:`wrap_accounting` wraps that function, in this process only: Hermes's own
accounting runs first and unchanged, then the same response goes to our
``post_auxiliary_call`` hook, shaped as newer Hermes fires it (the fields of
``post_api_request`` plus ``aux_task``), with the provider's billed cost when
its usage carries one. The session is the one Hermes published, else the
last one a turn of the same profile in this process started
(:func:`remembering`). The wrapper is one per process, but a
multi-profile gateway registers the plugin per profile: each call is
recorded by the ``post_auxiliary_call`` hook of the profile it is made in
(``_profiles``), and not at all in a profile that never enabled the
plugin. The
mixture-of-agents aggregator is the turn's own call (``post_api_request``);
its advisors (``moa_reference``) are counted here, since the usage Hermes
passes to ``post_api_request`` is the aggregator's only. Nothing here opens Hermes's database. Where
Hermes knows ``post_auxiliary_call`` the package registers the hook instead
and never installs this, so no call is counted twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from . import _patch, _profiles, _provider_cost

#: Auxiliary tasks whose response is the turn's own, which
#: ``post_api_request`` already reports: the mixture-of-agents aggregator.
#: (Hermes's ``_EXCLUDED_TASKS`` also names ``moa_reference``, which its own
#: turn accounting adds; ``post_api_request`` carries only the aggregator's
#: usage, so the advisors, usually the bulk of a MoA turn, are counted here.)
_MAIN_LOOP_TASKS = frozenset({"moa_aggregator"})

#: The session of the latest turn this process started (``pre_llm_call``)
#: in each profile, by the profile's home key: where an auxiliary call made
#: outside a turn (a manual ``/compress``) is counted when Hermes published
#: no session for it.
_last_session: dict[str, str] = {}

#: The ``post_auxiliary_call`` hook of each profile that registered the
#: plugin, with its home key.
_hooks: _profiles.PerProfile[tuple[Callable[..., Any], str]] = _profiles.PerProfile()


def remembering(hook: Callable[..., Any], home: str = _profiles.UNKNOWN_HOME) -> Callable[..., Any]:
    """``pre_llm_call`` that first remembers the session of the turn
    starting, for the profile at ``home``, then is ``hook`` (its verdict
    returned unchanged)."""

    def pre_llm_call(**kwargs: Any) -> Any:
        session_id = kwargs.get("session_id")
        if isinstance(session_id, str) and session_id and _last_session.get(home) != session_id:
            _last_session[home] = session_id
        return hook(**kwargs)

    pre_llm_call.__wrapped__ = hook  # type: ignore[attr-defined]
    return pre_llm_call


def add_profile(hook: Callable[..., Any], home: str = _profiles.UNKNOWN_HOME) -> None:
    """Records the auxiliary calls made in the profile at ``home`` with
    ``hook`` once Hermes's chokepoint is wrapped (:func:`wrap_accounting`,
    installed by ``_integrations.settle``, never by ``register``)."""
    _hooks.set(home, (hook, home))


def wrap_accounting(aux_accounting: Any) -> bool:
    """Wraps ``agent.aux_accounting.record_aux_usage`` (Hermes 0.19 -
    0.21.4), which Hermes's auxiliary client looks up at each call
    (``from agent.aux_accounting import record_aux_usage`` inside the
    function), so a wrap made after the module loaded still sees every call.
    Returns whether it is in place."""

    def recording(original: Callable[..., Any]) -> Callable[..., Any]:
        def record_aux_usage(response: Any, task: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return original(response, task, *args, **kwargs)
            finally:
                _report(aux_accounting, response, task, kwargs)

        return record_aux_usage

    _patch.wrap(aux_accounting, "record_aux_usage", recording)
    return _patch.is_wrapped(aux_accounting, "record_aux_usage")


def wrap_validate(auxiliary_client: Any) -> bool:
    """Before Hermes 0.19 (no auxiliary accounting at all): wraps the
    auxiliary client's ``_validate_llm_response``, which every successful
    auxiliary response passes through."""

    def validating(original: Callable[..., Any]) -> Callable[..., Any]:
        def validate(response: Any, task: Any = None, *args: Any, **kwargs: Any) -> Any:
            valid = original(response, task, *args, **kwargs)
            _report(None, valid, task, kwargs)
            return valid

        return validate

    _patch.wrap(auxiliary_client, "_validate_llm_response", validating)
    return _patch.is_wrapped(auxiliary_client, "_validate_llm_response")


def _report(accounting: Any, response: Any, task: Any, kw: dict) -> None:
    # Never let accounting of ours disturb Hermes's (the hook itself never
    # raises, but building its kwargs must not either).
    try:
        if not task or task in _MAIN_LOOP_TASKS:
            return
        calling = _hooks.calling()
        if calling is None:
            # A profile of this gateway that never enabled the plugin: its
            # calls are not ours to record.
            return
        hook, home = calling
        # Kept only for compatibility on Hermes main (compat_manifest.json):
        # where it is gone, the call still counts, against the last turn's
        # session (status names the point MISSING).
        get_context = getattr(accounting, "get_accounting_context", None)
        published = get_context() if callable(get_context) else None
        session_id = published[1] if published else _last_session.get(home)
        raw = getattr(response, "usage", None)
        if not session_id or raw is None:
            return
        from agent.usage_pricing import normalize_usage

        provider = kw.get("provider")
        u = normalize_usage(raw, provider=provider)
        usage = {
            "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens,
            "cache_read_tokens": u.cache_read_tokens,
            "cache_write_tokens": u.cache_write_tokens,
            "reasoning_tokens": u.reasoning_tokens,
        }
        if not any(usage.values()):
            return
        cost = _provider_cost.reported_cost(raw)
        if cost is not None:
            usage["cost"] = cost
        hook(
            session_id=session_id,
            aux_task=task,
            model=str(getattr(response, "model", "") or "") or "unknown",
            provider=provider,
            base_url=kw.get("base_url"),
            ended_at=time.time(),
            usage=usage,
        )
    except Exception:  # noqa: BLE001 - an aux call must never fail because of us
        _report_failure()


_last_failure_log = 0.0
#: At most one log line a minute for auxiliary calls that could not be
#: recorded: Hermes makes several a turn.
_FAILURE_LOG_INTERVAL = 60.0


def _report_failure() -> None:
    global _last_failure_log
    now = time.monotonic()
    if now - _last_failure_log < _FAILURE_LOG_INTERVAL:
        return
    _last_failure_log = now
    import logging

    logging.getLogger("hermes_meter").warning(
        "hermes-meter: an auxiliary LLM call could not be recorded (Hermes's auxiliary accounting changed?)",
        exc_info=True,
    )


#: The name Hermes gives the thread that asks the model for a session's
#: title (``agent.title_generator``, 0.19.0 - 0.22.x). Hermes 0.22 starts it
#: once the turn's answer is in when the title shares a local endpoint
#: with the turn, so a one-shot run reaches its exit while the call is
#: still in flight.
TITLE_THREAD = "auto-title"


def wait_for_title_calls(timeout: float) -> int:
    """Wait, at most ``timeout`` seconds in all, for Hermes's title threads
    still running, so the auxiliary call they make is recorded before the
    exit flush pushes this run's metrics and spans (else the next process
    would export it, an hour later for an hourly cron job). Returns how many
    were still running after the wait. Never raises."""
    import threading

    deadline = time.monotonic() + max(0.0, timeout)
    left = 0
    try:
        me = threading.current_thread()
        for thread in threading.enumerate():
            if thread is me or thread.name != TITLE_THREAD or not thread.is_alive():
                continue
            thread.join(max(0.0, deadline - time.monotonic()))
            left += thread.is_alive()
    except Exception:  # noqa: BLE001 - the exit goes on whatever happens here
        return left
    return left
