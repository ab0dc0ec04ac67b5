"""A hook dispatcher that behaves like Hermes git main's, for tests.

Main (0.21 - 0.23, Python 3.14) cannot run here; this is our own code,
written from reading ``NousResearch/hermes-agent``:

- ``hermes_cli/plugins_dispatch.py`` at c48c53f0d4d9f0df184ff98a1e8c2811ccd334de
  (0.21.x: the single-flight key is ``(hook, callback)``) and at
  006a5aebb4d134ba188ff60adf1a02f668312b5f (later main: the key adds the
  call's ``tool_call_id``, else its ``turn_id``; auxiliary hooks bounded;
  a ``pre_tool_call`` that raises blocks the tool);
- ``hermes_cli/plugins.py`` (``plugins.hook_callback_timeout``, 30 s).

What it keeps of theirs, because the plugin's behaviour depends on it: a
new daemon worker thread per call of a bounded hook, under a copy of the
caller's context; the wall-clock cap, after which the worker is abandoned
and the callback suppressed for 60 s; a call skipped while another call
with the same key runs, logged on ``hermes_cli.plugins`` with Hermes's own
message from inside ``_run_hook_callback_bounded`` (whose locals ``cb``,
``hook_name`` and ``kwargs`` the plugin reads); ``pre_tool_call`` failing
closed; kwargs sliced by the callback's signature; middleware called
directly with every kwarg.
"""

from __future__ import annotations

import contextvars
import inspect
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("hermes_cli.plugins")

V0_21 = "0.21"
MAIN = "main"

BOUNDED_HOOKS = {
    "post_tool_call",
    "transform_terminal_output",
    "transform_tool_result",
    "transform_llm_output",
    "pre_llm_call",
    "post_llm_call",
    "pre_api_request",
    "post_api_request",
    "api_request_error",
    "pre_verify",
    "on_session_start",
    "on_session_end",
}
MAIN_BOUNDED_HOOKS = BOUNDED_HOOKS | {"pre_auxiliary_call", "post_auxiliary_call"}
FAIL_CLOSED_HOOKS = {"pre_tool_call"}
CALLER_THREAD_HOOKS = {"subagent_stop"}
TIMEOUT_SUPPRESSION_SECONDS = 60.0
BLOCK_MESSAGE = "pre_tool_call plugin callback timed out or is still running"
OBSERVER_SCHEMA_VERSION = "hermes.observer.v1"
_SKIPPED = object()


def _call_identity(kwargs: dict[str, Any]) -> str | None:
    for key in ("tool_call_id", "turn_id"):
        value = kwargs.get(key)
        if isinstance(value, str) and value:
            return value
    return None


class Dispatcher:
    """``PluginManager``'s hook and middleware dispatch, per version."""

    def __init__(self, version: str = MAIN, timeout: float = 30.0) -> None:
        self.version = version
        self.timeout = timeout
        self._hooks: dict[str, list[Callable[..., Any]]] = {}
        self._middleware: dict[str, list[Callable[..., Any]]] = {}
        self._hook_running_callbacks: dict[tuple, object] = {}
        self._hook_timeout_suppressed_until: dict[tuple, float] = {}
        self._hook_timeout_lock = threading.Lock()
        self.bounded = MAIN_BOUNDED_HOOKS if version == MAIN else BOUNDED_HOOKS

    @staticmethod
    def _invoke_hook_callback(callback: Callable[..., Any], payload: dict[str, Any]) -> Any:
        try:
            parameters = inspect.signature(callback).parameters
        except (TypeError, ValueError):
            return callback(**payload)
        if any(p.kind == inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
            return callback(**payload)
        kinds = {inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY}
        return callback(
            **{k: v for k, v in payload.items() if k in parameters and parameters[k].kind in kinds}
        )

    def invoke_hook(self, hook_name: str, **kwargs: Any) -> list[Any]:
        kwargs.setdefault("telemetry_schema_version", OBSERVER_SCHEMA_VERSION)
        results: list[Any] = []
        use_timeout = (
            self.timeout > 0
            and hook_name not in CALLER_THREAD_HOOKS
            and (hook_name in self.bounded or hook_name in FAIL_CLOSED_HOOKS)
        )
        fail_closed = hook_name in FAIL_CLOSED_HOOKS
        for cb in self._hooks.get(hook_name, []):
            try:
                if use_timeout:
                    ret = self._run_hook_callback_bounded(hook_name, cb, kwargs, self.timeout)
                    if ret is _SKIPPED:
                        if fail_closed:
                            results.append({"action": "block", "message": BLOCK_MESSAGE})
                        continue
                else:
                    ret = self._invoke_hook_callback(cb, kwargs)
                if ret is not None:
                    results.append(ret)
            except Exception as exc:
                logger.warning(
                    "Hook '%s' callback %s raised: %s", hook_name, getattr(cb, "__name__", cb), exc
                )
                if fail_closed and self.version == MAIN:
                    results.append({"action": "block", "message": f"{hook_name} plugin callback raised"})
        return results

    def gate_key(self, hook_name: str, cb: Callable[..., Any], kwargs: dict[str, Any]) -> tuple:
        """The key a second call must not share with a running one."""
        if self.version == MAIN:
            return (hook_name, id(cb), _call_identity(kwargs))
        return (hook_name, id(cb))

    def _run_hook_callback_bounded(
        self, hook_name: str, cb: Callable[..., Any], kwargs: dict[str, Any], timeout: float
    ) -> Any:
        callback_name = getattr(cb, "__name__", repr(cb))
        suppression_key = (hook_name, id(cb))
        gate_key = self.gate_key(hook_name, cb, kwargs)
        token = object()
        with self._hook_timeout_lock:
            suppressed_until = self._hook_timeout_suppressed_until.get(suppression_key)
            if gate_key in self._hook_running_callbacks or (
                suppressed_until is not None and suppressed_until > time.monotonic()
            ):
                logger.warning(
                    "Hook '%s' callback %s skipped after previous timeout or while still running",
                    hook_name,
                    callback_name,
                )
                return _SKIPPED
            if suppressed_until is not None:
                self._hook_timeout_suppressed_until.pop(suppression_key, None)
            self._hook_running_callbacks[gate_key] = token

        context = contextvars.copy_context()
        done = threading.Event()
        outcome: dict[str, Any] = {}
        failure: dict[str, Exception] = {}

        def _runner() -> None:
            try:
                outcome["value"] = context.run(self._invoke_hook_callback, cb, kwargs)
            except Exception as exc:
                failure["exc"] = exc
            finally:
                with self._hook_timeout_lock:
                    if self._hook_running_callbacks.get(gate_key) is token:
                        self._hook_running_callbacks.pop(gate_key, None)
                done.set()

        thread = threading.Thread(target=_runner, name=f"hermes-hook-{callback_name}"[:40], daemon=True)
        thread.start()
        if not done.wait(timeout=timeout):
            with self._hook_timeout_lock:
                self._hook_timeout_suppressed_until[suppression_key] = (
                    time.monotonic() + TIMEOUT_SUPPRESSION_SECONDS
                )
            logger.warning(
                "Hook '%s' callback %s timed out after %gs — skipping", hook_name, callback_name, timeout
            )
            return _SKIPPED
        if "exc" in failure:
            raise failure["exc"]
        return outcome.get("value")

    def invoke_middleware(self, kind: str, **kwargs: Any) -> list[Any]:
        return [r for cb in self._middleware.get(kind, []) if (r := cb(**kwargs)) is not None]


class Context:
    """The ``PluginContext`` calls ``register`` makes, onto a Dispatcher."""

    profile_name = "default"

    def __init__(self, dispatcher: Dispatcher) -> None:
        self._dispatcher = dispatcher
        self.commands: dict[str, Any] = {}
        self.tools: dict[str, Any] = {}

    def register_hook(self, name: str, callback: Callable[..., Any]) -> None:
        self._dispatcher._hooks.setdefault(name, []).append(callback)

    def register_middleware(self, kind: str, callback: Callable[..., Any]) -> None:
        self._dispatcher._middleware.setdefault(kind, []).append(callback)

    def register_cli_command(self, name: str, **kwargs: Any) -> None:
        pass

    def register_tool(self, name: str, toolset: str, schema: dict, handler: Any, **kwargs: Any) -> None:
        self.tools[name] = handler

    def register_command(self, name: str, handler: Any, description: str = "", args_hint: str = "") -> None:
        self.commands[name] = handler


class LLMExecutionBlocked(Exception):
    """``hermes_cli/middleware.py``'s: raised by an ``llm_execution``
    callback to stop the call; ``str(exc)`` is the reason."""

    def __init__(self, reason: str, *, metadata: dict[str, Any] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.metadata = metadata or {}


# The hooks of main's VALID_HOOKS the plugin may use.
VALID_HOOKS = {
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
    "pre_approval_request",
    "post_approval_response",
    "pre_auxiliary_call",
    "post_auxiliary_call",
    "transform_api_error_classification",
    "pre_gateway_dispatch",
}


def install_modules(version: str) -> None:
    """Puts the ``hermes_cli`` modules the plugin imports in sys.modules,
    with what tells one version of the dispatcher from another."""
    import sys
    import types

    root = types.ModuleType("hermes_cli")
    plugins = types.ModuleType("hermes_cli.plugins")
    plugins.VALID_HOOKS = set(VALID_HOOKS)
    dispatch = types.ModuleType("hermes_cli.plugins_dispatch")
    dispatch._HOOK_TIMEOUT_BOUNDED_HOOKS = MAIN_BOUNDED_HOOKS if version == MAIN else BOUNDED_HOOKS
    # Where _skips reads a skipped call's kwargs (its frame's locals).
    dispatch.PluginDispatchMixin = Dispatcher
    if version == MAIN:
        dispatch._hook_call_identity = _call_identity
    else:
        plugins.VALID_HOOKS -= {"pre_auxiliary_call", "post_auxiliary_call"}
    middleware = types.ModuleType("hermes_cli.middleware")
    middleware.LLMExecutionBlocked = LLMExecutionBlocked
    sys.modules.update(
        {
            "hermes_cli": root,
            "hermes_cli.plugins": plugins,
            "hermes_cli.plugins_dispatch": dispatch,
            "hermes_cli.middleware": middleware,
        }
    )


def run_llm_execution(
    d: Dispatcher, request: dict[str, Any], provider_call: Callable[[], Any], **ids: Any
) -> Any:
    """``run_llm_execution_middleware``: each callback wraps the next; a
    block is re-raised with ``checked_by`` set."""
    chain = list(d._middleware.get("llm_execution", []))

    def call(i: int) -> Any:
        if i == len(chain):
            return provider_call()
        cb = chain[i]
        try:
            return cb(request=request, next_call=lambda: call(i + 1), original_request=request, **ids)
        except LLMExecutionBlocked as exc:
            exc.metadata.setdefault("checked_by", getattr(cb, "__name__", "?"))
            raise

    return call(0)


def call_api_with_retries(
    d: Dispatcher,
    provider_call: Callable[[], Any],
    *,
    max_retries: int = 3,
    fallback: Callable[[], Any] | None = None,
    **ids: Any,
) -> tuple[Any, list[dict[str, Any]]]:
    """One API call of a turn through main's retry loop
    (``agent/turn_api_error.py`` at 1db06b67296488ed5601420154b6549016622320,
    ``handle_api_error``): an exception is classified (plugins first, else
    ``unknown``, retryable), ``api_request_error`` fires, and a retryable
    error is retried; a final one moves to the fallback model where one is
    configured (``settle_unrecovered_error`` does for a client error, and
    whether it reads ``should_fallback`` was not read: the worse is
    assumed), else ends the call.
    Returns the response (or None) and the classifications made."""
    classifications = []
    retry_count = 0
    while True:
        try:
            return run_llm_execution(d, {"messages": []}, provider_call, **ids), classifications
        except Exception as api_error:
            found = [
                r
                for r in d.invoke_hook(
                    "transform_api_error_classification",
                    error=api_error,
                    error_type=type(api_error).__name__,
                    error_message=str(api_error),
                )
                if isinstance(r, dict) and r.get("reason")
            ]
            classified = found[0] if found else {"reason": "unknown", "retryable": True}
            classifications.append(classified)
            d.invoke_hook(
                "api_request_error",
                error={"type": type(api_error).__name__, "message": str(api_error)},
                retry_count=retry_count,
                max_retries=max_retries,
                retryable=classified.get("retryable", True),
                reason=classified["reason"],
                **ids,
            )
            retry_count += 1
            if not classified.get("retryable", True):
                if fallback is not None:
                    provider_call, fallback = fallback, None
                    continue
                return None, classifications
            if retry_count >= max_retries:
                return None, classifications
