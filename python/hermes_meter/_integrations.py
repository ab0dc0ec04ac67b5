"""Every place the plugin reaches into Hermes beyond its hook API, with the
Hermes versions it applies to, checked at registration.

Each point says, for the running Hermes: ``active``, ``not needed`` (this
Hermes gives the same through a hook) or ``MISSING`` with what is not being
recorded because of it. :func:`check` is what ``register`` logs (a WARNING
per missing point, once) and what ``hermes meter status`` and ``/meter
status`` print, so a Hermes that changed under the plugin never costs spend
silently.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from typing import Any

ACTIVE = "active"
NOT_NEEDED = "not needed"
MISSING = "MISSING"

_log = logging.getLogger("hermes_meter")


@dataclass(frozen=True)
class Point:
    """One integration point and its state on the running Hermes."""

    name: str
    #: The Hermes versions it applies to, as read from their source.
    versions: str
    state: str
    #: What is not recorded while it is MISSING, or a note.
    detail: str

    def line(self) -> str:
        text = f"{self.name} (Hermes {self.versions}): {self.state}"
        return f"{text}: {self.detail}" if self.detail else text


def _attr(module: str, *path: str) -> Any:
    """``module.path...`` or None; never raises."""
    try:
        obj: Any = importlib.import_module(module)
        for name in path:
            obj = getattr(obj, name)
        return obj
    except Exception:  # noqa: BLE001 - absent is an answer
        return None


def _needed(name: str, versions: str, present: bool, missing: str) -> Point:
    """A point this Hermes must have: active, or MISSING with ``missing``."""
    return Point(name, versions, ACTIVE if present else MISSING, "" if present else missing)


def _hermes_present() -> bool:
    return _attr("hermes_cli") is not None


def check(
    known_hooks: frozenset[str] | None, *, enforce: bool, has_middleware: bool, tool_gate: bool = True
) -> list[Point]:
    """The state of every integration point on the running Hermes."""
    if not _hermes_present():
        return []
    points = []
    aux_hook = known_hooks is not None and "post_auxiliary_call" in known_hooks
    if aux_hook:
        points.append(Point("agent.aux_accounting.record_aux_usage", "0.19.0 - 0.21.x", NOT_NEEDED, ""))
    else:
        record = _attr("agent.aux_accounting", "record_aux_usage")
        context = _attr("agent.aux_accounting", "get_accounting_context")
        if record is None:
            points.append(
                Point(
                    "agent.aux_accounting.record_aux_usage",
                    "0.19.0 - 0.21.x",
                    MISSING,
                    "auxiliary LLM calls (titles, compression, vision, approval review) are not recorded",
                )
            )
        elif context is None:
            # Kept only for compatibility on main (compat_manifest.json).
            points.append(
                Point(
                    "agent.aux_accounting.get_accounting_context",
                    "0.19.0 - 0.21.x",
                    MISSING,
                    "auxiliary calls are counted against the session of the last turn started",
                )
            )
        else:
            points.append(Point("agent.aux_accounting.record_aux_usage", "0.19.0 - 0.21.x", ACTIVE, ""))
    # Read at 00067189dfecf833d4d009c2dd977ae85cf800e0 (hermes_constants.py,
    # Hermes 0.21.3): the profile a task runs in, under a multi-profile
    # gateway (a ContextVar override; HERMES_HOME is never changed).
    home = _attr("hermes_constants", "get_hermes_home")
    points.append(
        Point(
            "hermes_constants.get_hermes_home",
            "0.21.0 - 0.23.x",
            ACTIVE if callable(home) else NOT_NEEDED,
            "auxiliary calls are recorded for the profile they are made in, if it enabled the plugin"
            if callable(home)
            else "one profile per process",
        )
    )
    points.append(
        _needed(
            "run_agent.AIAgent._usage_summary_for_api_request_hook",
            "0.19.0 - 0.23.x",
            _attr("run_agent", "AIAgent", "_usage_summary_for_api_request_hook") is not None,
            "the cost a provider bills (OpenRouter's usage.cost) is not recorded",
        )
    )
    if aux_hook:
        points.append(
            _needed(
                "agent.auxiliary_hooks._usage_summary",
                "0.21.5 - 0.23.x",
                _attr("agent.auxiliary_hooks", "_usage_summary") is not None,
                "the cost a provider bills for auxiliary calls is not recorded; estimates are used",
            )
        )
    points.append(
        _needed(
            "agent.model_metadata endpoint prices",
            "0.19.0 - 0.23.x",
            _attr("agent.model_metadata", "_endpoint_model_metadata_cache") is not None,
            "prices Hermes fetched for custom endpoints are not used (such calls cost $0)",
        )
    )
    bounded = _attr("hermes_cli.plugins_dispatch", "_HOOK_TIMEOUT_BOUNDED_HOOKS")
    points.append(
        Point(
            "hermes_cli.plugins skipped hook calls",
            "0.21.0 - 0.23.x",
            ACTIVE if bounded is not None else NOT_NEEDED,
            "calls Hermes skips are recorded from its dispatcher and counted" if bounded is not None else "",
        )
    )
    if enforce and not tool_gate:
        points.append(
            Point(
                "pre_tool_call",
                "0.21.x",
                NOT_NEEDED,
                "not registered: this Hermes blocks a tool whose pre_tool_call overlaps another's;"
                " budgets stop LLM calls here, not tool calls",
            )
        )
    if enforce and _attr("hermes_cli.middleware", "LLMExecutionBlocked") is not None:
        classifies = known_hooks is not None and "transform_api_error_classification" in known_hooks
        points.append(
            _needed(
                "transform_api_error_classification",
                "0.20.2 - 0.23.x",
                classifies,
                "a budget stop is retried by Hermes as an API error (no spend, extra attempts)",
            )
        )
    if enforce:
        points.append(
            _needed(
                "llm_execution middleware",
                "0.19.0 - 0.23.x",
                has_middleware,
                "budgets cannot stop an LLM call before the provider (hooks only observe)",
            )
        )
        points.append(
            _needed(
                "llm_request middleware",
                "0.19.0 - 0.23.x",
                has_middleware,
                "a [downgrade] in the budget file cannot route calls to its cheaper model",
            )
        )
    from . import _deliver

    target = _deliver.target_from_env()
    if target is not None:
        points.append(
            _needed(
                "tools.send_message_tool._send_to_platform",
                "0.19.0 - 0.23.x",
                _deliver.sender() is not None,
                f"alerts are not delivered through Hermes to {target.platform} ({_deliver.ENV});"
                " they wait in the store",
            )
        )
    return points


_points: list[Point] = []
#: The missing points logged so far (each profile of a gateway registers).
_logged: set[str] = set()


def record(points: list[Point]) -> None:
    """Keeps what registration found and logs each missing point once."""
    global _points
    _points = points
    for p in points:
        if p.state == MISSING and p.line() not in _logged:
            _logged.add(p.line())
            _log.warning("hermes-meter: %s", p.line())


def lines(*, only_trouble: bool = False) -> list[str]:
    """What registration found, one line a point, for status; with
    ``only_trouble``, only what costs records (MISSING points, lost calls)."""
    from . import _skips

    out = [p.line() for p in _points if not only_trouble or p.state == MISSING]
    watch = _skips.watch()
    if watch is not None:
        recorded, lost = watch.totals()
        if lost or (recorded and not only_trouble):
            out.append(f"hook calls Hermes skipped in this process: {recorded} recorded anyway, {lost} lost")
    return out
