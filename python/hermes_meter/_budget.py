"""Budget enforcement on the Hermes side: the ``llm_execution`` middleware
that stops an LLM call (with ``LLMExecutionBlocked`` where Hermes has it,
else a stand-in response), the ``llm_request`` middleware that routes a
session's calls to a cheaper model (``[downgrade]``), and the cron pause.

The decisions are made in Rust (the budget gate, at ``pre_api_request`` and
the other gating hooks); this module only turns them into what Hermes
understands. Everything here fails open: an error lets the call go ahead.
"""

from __future__ import annotations

import time
from types import SimpleNamespace as _NS
from typing import Any

from . import _native

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
    if message is None and isinstance(request_id, str) and request_id.startswith(AUX_REQUEST_PREFIX):
        # An auxiliary call (Hermes main) fires no pre_api_request: it is
        # stopped while its session's last verdict is a hard breach.
        message = _native.session_stop(_aux_session(kwargs))
    if message is None:
        return next_call()
    return stop(kwargs.get("api_mode"), message)


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


def _aux_session(kwargs: dict[str, Any]) -> str | None:
    """The session of an auxiliary call: the middleware's ``session_id``
    where it passes one, else the turn it runs under, found as
    ``agent/auxiliary_hooks.py`` finds it (``agent.relay_runtime.current_turn()``,
    read at 7effdff81b7bbcdf0e441829030a7ee2d037a7f9). None outside a turn."""
    session = kwargs.get("session_id")
    if isinstance(session, str) and session:
        return session
    try:
        from agent.relay_runtime import current_turn

        turn = current_turn()
        session = getattr(getattr(turn, "lease", None), "session_id", None)
    except Exception:  # noqa: BLE001 - absent on older Hermes: no session known
        return None
    return session if isinstance(session, str) and session else None


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


def stand_in(api_mode: str | None, text: str) -> Any:
    """A response of the provider's shape for ``api_mode``, with ``text`` as the
    assistant's answer, no tool calls, no usage and ``model`` BLOCKED_MODEL."""
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
