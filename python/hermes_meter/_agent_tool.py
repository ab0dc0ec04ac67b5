"""The agent's read-only ``meter_spend`` tool: this session's and today's
spend, each budget's headroom and when its window resets, the costliest
recent sessions and most used tools, as JSON from the ledger (the answer
is made in Rust: ``crates/hermes-meter-runtime/src/agent_tool.rs``).

On unless ``HERMES_METER_AGENT_TOOL=off``; Hermes's own ``hermes tools``
can switch its toolset (``hermes-meter``) off per platform too. Registered
through ``ctx.register_tool``, Hermes's public plugin API (0.13 and later).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from . import _native

#: The toolset Hermes lists the tool under.
TOOLSET = "hermes-meter"

_log = logging.getLogger("hermes_meter")


def register(ctx: Any) -> bool | None:
    """Registers the tool: True when registered, False when this Hermes
    could not take it, None when it is turned off. Never raises: the tool
    is a convenience."""
    try:
        if not _native.agent_tool_enabled():
            return None
        if not hasattr(ctx, "register_tool"):
            return False
        schema = json.loads(_native.agent_tool_schema())
        ctx.register_tool(
            name=schema["name"],
            toolset=TOOLSET,
            schema=schema,
            handler=meter_spend,
            description=schema["description"],
            emoji="🧾",
        )
        return True
    except Exception:  # noqa: BLE001 - a missing tool must not break the plugin
        _log.debug("the meter_spend tool was not registered", exc_info=True)
        return False


def meter_spend(args: Any = None, **kwargs: Any) -> str:
    """The tool's handler: Hermes passes the calling session's id. Never
    raises; a failure is an ``{"error": ...}`` the model reads."""
    try:
        session_id = kwargs.get("session_id")
        return _native.meter_spend(session_id if isinstance(session_id, str) and session_id else None)
    except Exception as e:  # noqa: BLE001 - a tool answers, it does not raise
        return json.dumps({"error": f"hermes-meter could not answer: {type(e).__name__}"})
