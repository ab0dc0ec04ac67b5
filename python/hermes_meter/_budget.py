"""Budget enforcement on the Hermes side: the ``llm_execution`` middleware
that stops an LLM call (with ``LLMExecutionBlocked`` where Hermes has it,
else a stand-in response), the ``llm_request`` middleware that routes a
session's calls to a cheaper model (``[downgrade]``), and the cron pause.

The decisions are made in Rust (the budget gate, at ``pre_api_request`` and
the other gating hooks); this module only turns them into what Hermes
understands. Everything here fails open: an error lets the call go ahead.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from types import SimpleNamespace as _NS
from typing import Any

from . import _native, _oneshot

#: The ``model`` of a stand-in response; ``post_api_request`` reports it as
#: ``response_model`` and the ledger records no LLM call for it.
BLOCKED_MODEL = _native.blocked_model()


def llm_execution(*, next_call: Any, **kwargs: Any) -> Any:
    """``llm_execution`` middleware: the provider call, or a stand-in response
    when the budget gate stopped this ``api_request_id``.

    Never returns ``None`` (Hermes would retry it as an invalid response).
    Raising before ``next_call`` makes Hermes log it and make the call
    anyway, which is the fail-open we want."""
    request_id = kwargs.get("api_request_id")
    message = _native.llm_stop(request_id)
    kind = "stop"
    if message is None and isinstance(request_id, str) and request_id.startswith(AUX_REQUEST_PREFIX):
        # An auxiliary call (Hermes main) fires no pre_api_request: it is
        # stopped while its session's last verdict is a hard breach.
        message = _native.session_stop(_aux_session(kwargs))
        kind = "aux"
    if message is None:
        wait_for_rate_limit(request_id)
        return next_call()
    _oneshot.noted(kind, message)
    return stop(kwargs.get("api_mode"), message)


#: The longest a call sleeps for a rate limit, whatever the gate said
#: (``[rate_limit] max_wait_seconds`` is at most an hour).
MAX_RATE_WAIT_SECONDS = 3600.0


def wait_for_rate_limit(request_id: Any) -> None:
    """Sleeps as long as the gate said the call ``request_id`` waits for a
    rate limit (``[rate_limit] action = "wait"``): on Hermes's thread that
    makes the call, which is what a wait is. Never raises."""
    try:
        seconds = _native.llm_wait(request_id)
        if seconds is not None and seconds > 0:
            time.sleep(min(float(seconds), MAX_RATE_WAIT_SECONDS))
    except Exception:  # noqa: BLE001 - a wait never stops the call
        return


#: What ``status`` says of the middleware in the plugin host.
HOST_NOTE = (
    "in the plugin host (plugins.isolation: host) a middleware cannot pass a call on: a call under budget"
    " goes ahead through Hermes's fail-open path (it logs one WARNING per process naming hermes-meter),"
    " a call over budget is answered by the stand-in"
)


class GoAhead(Exception):
    """Raised by :func:`host_llm_execution` for a call under budget: Hermes
    then makes the call itself (its fail-open path for a middleware that
    raises before ``next_call``)."""

    def __init__(self) -> None:
        super().__init__(
            "hermes-meter: under budget, the call goes ahead (in the plugin host a middleware cannot call"
            " next_call, so Hermes's fail-open path makes the call; not an error)"
        )


def host_llm_execution(**kwargs: Any) -> Any:
    """``llm_execution`` middleware in Hermes's plugin host
    (``plugins.isolation: host``, Hermes 0.22 and later), where ``next_call``
    is a placeholder that cannot be called (``hermes_cli/plugin_host_wire.py``,
    ``Opaque``) and only plain data and dataclasses cross back: a call over
    budget is answered by a stand-in made of dataclasses (which reaches
    Hermes as a record with attribute access), and a call under budget
    raises :class:`GoAhead`, which Hermes logs once and answers by making
    the call (``hermes_cli/middleware.py``, ``_run_execution_chain``)."""
    request_id = kwargs.get("api_request_id")
    message = _native.llm_stop(request_id)
    kind = "stop"
    if message is None and isinstance(request_id, str) and request_id.startswith(AUX_REQUEST_PREFIX):
        message = _native.session_stop(_aux_session(kwargs))
        kind = "aux"
    if message is None:
        wait_for_rate_limit(request_id)
        raise GoAhead()
    _oneshot.noted(kind, message)
    return stand_in(kwargs.get("api_mode"), message, make=_record)


def llm_request(*, request: Any = None, session_id: Any = None, **_: Any) -> dict[str, Any] | None:
    """``llm_request`` middleware (Hermes 0.19.0 and later, called before each
    provider call and before its ``pre_api_request``): the request with its
    ``model`` replaced while the session's last budget verdict asks for a
    downgrade, else ``None`` (the request as it is). Never raises."""
    try:
        if not isinstance(request, dict):
            return None
        model = request.get("model")
        to = _native.downgrade_model(
            session_id if isinstance(session_id, str) else None, model if isinstance(model, str) else None
        )
        if to is None or model in (None, to):
            return None
        return {"request": dict(request, model=to), "reason": "hermes-meter budget downgrade"}
    except Exception:  # noqa: BLE001 - never raise into Hermes: the call goes as asked
        return None


#: How Hermes main's auxiliary client names its requests (hooks.md at
#: 006a5aebb4d134ba188ff60adf1a02f668312b5f: "`api_request_id` (`aux-…`)").
AUX_REQUEST_PREFIX = "aux-"


#: The session of each auxiliary call announced by ``pre_auxiliary_call``
#: (its ``api_request_id`` -> ``session_id``), newest last: Hermes 0.22's
#: middleware gets no session for an auxiliary call made after its turn
#: ended (a session's title), the hook before it does.
_AUX_SESSIONS: dict[str, str] = {}
#: Most remembered; the oldest go first (a call's middleware runs right
#: after its hook).
_AUX_SESSIONS_MAX = 256


def note_auxiliary_call(*, api_request_id: Any = None, session_id: Any = None, **_: Any) -> None:
    """``pre_auxiliary_call`` (Hermes 0.21.5 and later): remembers whose
    auxiliary call is about to be made, for :func:`llm_execution`. Never
    raises."""
    try:
        if isinstance(api_request_id, str) and api_request_id and isinstance(session_id, str) and session_id:
            _AUX_SESSIONS[api_request_id] = session_id
            while len(_AUX_SESSIONS) > _AUX_SESSIONS_MAX:
                _AUX_SESSIONS.pop(next(iter(_AUX_SESSIONS)))
    except Exception:  # noqa: BLE001 - never raise into Hermes
        pass


def _aux_session(kwargs: dict[str, Any]) -> str | None:
    """The session of an auxiliary call: the middleware's ``session_id``
    where it passes one, else the one ``pre_auxiliary_call`` announced for
    its request, else the turn it runs under, found as
    ``agent/auxiliary_hooks.py`` finds it (``agent.relay_runtime.current_turn()``,
    read at 7effdff81b7bbcdf0e441829030a7ee2d037a7f9). None outside a turn."""
    session = kwargs.get("session_id")
    if isinstance(session, str) and session:
        return session
    announced = _AUX_SESSIONS.get(str(kwargs.get("api_request_id") or ""))
    if announced:
        return announced
    try:
        from agent.relay_runtime import current_turn

        turn = current_turn()
        session = getattr(getattr(turn, "lease", None), "session_id", None)
    except Exception:  # noqa: BLE001 - absent on older Hermes: no session known
        return None
    return session if isinstance(session, str) and session else None


class AuxiliaryCallStopped(RuntimeError):
    """An auxiliary LLM call (a title, a compression) of a session over its
    budget, stopped before the provider. Hermes's auxiliary callers treat
    it as a failed call (a title generation that failed is skipped)."""


def _aux_stop() -> str | None:
    """The stop text for the auxiliary call about to be made, if its
    session is over a hard line. Never raises (fails open)."""
    try:
        session = _aux_session({})
        return _native.session_stop(session) if session else None
    except Exception:  # noqa: BLE001 - a failure lets the call go ahead
        return None


def wrap_aux_runners(auxiliary_hooks: Any) -> bool:
    """Hermes 0.22's auxiliary calls go through Relay, not the
    ``llm_execution`` middleware (``agent/auxiliary_client.py``: every
    attempt runs in ``agent.auxiliary_hooks.run_with_aux_hooks`` /
    ``arun_with_aux_hooks``, read in 0.22.2): those two are wrapped so an
    auxiliary call of a session over its hard line is stopped before the
    provider (and before its hooks fire: nothing was spent). Returns whether
    both are in place."""
    from . import _patch

    def guarded(original: Any) -> Any:
        def run_with_aux_hooks(call: Any, *args: Any, **kwargs: Any) -> Any:
            message = _aux_stop()
            if message is not None:
                _oneshot.noted("aux", message)
                raise AuxiliaryCallStopped(message)
            return original(call, *args, **kwargs)

        return run_with_aux_hooks

    def guarded_async(original: Any) -> Any:
        async def arun_with_aux_hooks(call: Any, *args: Any, **kwargs: Any) -> Any:
            message = _aux_stop()
            if message is not None:
                _oneshot.noted("aux", message)
                raise AuxiliaryCallStopped(message)
            return await original(call, *args, **kwargs)

        return arun_with_aux_hooks

    _patch.wrap(auxiliary_hooks, "run_with_aux_hooks", guarded)
    _patch.wrap(auxiliary_hooks, "arun_with_aux_hooks", guarded_async)
    return _patch.is_wrapped(auxiliary_hooks, "run_with_aux_hooks") and _patch.is_wrapped(
        auxiliary_hooks, "arun_with_aux_hooks"
    )


def stop(api_mode: str | None, message: str) -> Any:
    """Stops a call: raises Hermes's ``LLMExecutionBlocked`` where it exists
    (newer Hermes: the sanctioned way; the runner re-raises it and the turn
    ends with ``message``), else returns the stand-in response (0.19.0)."""
    blocked = _llm_execution_blocked()
    if blocked is not None:
        raise blocked(message, metadata={"checked_by": CHECKED_BY, "reason": "budget"})
    return stand_in(api_mode, message)


#: Who stopped the call, in the ``LLMExecutionBlocked`` metadata: how
#: :func:`classify_api_error` knows the stops that are ours.
CHECKED_BY = "hermes-meter"

#: The classification of a budget stop on Hermes main: a policy blocked it
#: (``FailoverReason.provider_policy_blocked``), final. Without it Hermes
#: takes ``LLMExecutionBlocked`` for an unknown, retryable API error
#: (``agent/turn_api_error.py`` at 1db06b67296488ed5601420154b6549016622320,
#: ``handle_api_error``): backoff, retries that are stopped again, the
#: fallback model. Not retryable and no fallback, compression or credential
#: rotation: the same budget stops every one of them.
_STOP_CLASSIFICATION = {
    "reason": "provider_policy_blocked",
    "retryable": False,
    "should_fallback": False,
    "should_compress": False,
    "should_rotate_credential": False,
}


def classify_api_error(*, error: Any = None, **_: Any) -> dict[str, Any] | None:
    """``transform_api_error_classification`` (Hermes 0.20.2 and later): a
    budget stop of ours is final; any other error is left to Hermes."""
    try:
        metadata = getattr(error, "metadata", None)
        if not isinstance(metadata, dict) or metadata.get("checked_by") != CHECKED_BY:
            return None
        blocked = _llm_execution_blocked()
        if blocked is None or not isinstance(error, blocked):
            return None
        return dict(_STOP_CLASSIFICATION, message=str(error)[:500])
    except Exception:  # noqa: BLE001 - never raise into Hermes
        return None


def _llm_execution_blocked() -> Any:
    try:
        from hermes_cli.middleware import LLMExecutionBlocked  # type: ignore[attr-defined]
    except Exception:
        return None
    return LLMExecutionBlocked if isinstance(LLMExecutionBlocked, type) else None


@functools.cache
def _record_type(name: str, fields: tuple[str, ...]) -> Any:
    return dataclasses.make_dataclass(name, fields)


def _record(**fields: Any) -> Any:
    """A dataclass instance with ``fields``: what crosses the plugin host's
    boundary as a record with attribute access (a ``SimpleNamespace`` would
    arrive as an opaque placeholder)."""
    return _record_type("HermesMeterStandIn", tuple(fields))(**fields)


def stand_in(api_mode: str | None, text: str, make: Any = _NS) -> Any:
    """A response of the provider's shape for ``api_mode``, with ``text`` as the
    assistant's answer, no tool calls, no usage and ``model`` BLOCKED_MODEL;
    its objects made by ``make`` (a namespace, or :func:`_record`)."""
    _NS = make  # noqa: N806 - the shape below reads as the provider's objects
    rid = f"hermes-meter-blocked-{int(time.time() * 1000)}"
    if api_mode == "anthropic_messages":
        return _NS(
            id=rid,
            type="message",
            role="assistant",
            model=BLOCKED_MODEL,
            content=[_NS(type="text", text=text)],
            stop_reason="end_turn",
            stop_sequence=None,
            usage=None,
        )
    if api_mode == "codex_responses":
        item = _NS(
            type="message",
            id=rid + "-msg",
            role="assistant",
            status="completed",
            content=[_NS(type="output_text", text=text, annotations=[])],
        )
        return _NS(
            id=rid,
            object="response",
            model=BLOCKED_MODEL,
            status="completed",
            output=[item],
            output_text=text,
            usage=None,
            error=None,
            incomplete_details=None,
        )
    # chat_completions (verified against Hermes 0.19.0), and bedrock_converse,
    # which also accepts a namespace with non-empty ``choices``.
    message = _NS(
        role="assistant",
        content=text,
        tool_calls=None,
        reasoning=None,
        reasoning_content=None,
        refusal=None,
    )
    return _NS(
        id=rid,
        object="chat.completion",
        created=int(time.time()),
        model=BLOCKED_MODEL,
        usage=None,
        choices=[_NS(index=0, message=message, finish_reason="stop")],
    )


def pause_cron_job(job_id: str, reason: str) -> bool:
    """Pause a cron job through Hermes (``cron.jobs.pause_job``). Returns whether
    Hermes found and paused it; never raises."""
    try:
        from cron import jobs  # Hermes's own module; absent outside Hermes.

        return jobs.pause_job(job_id, reason=reason) is not None
    except Exception:
        return False
