"""hermes-meter's tab in Hermes's web dashboard: the backend half.

Hermes mounts ``router`` under ``/api/plugins/hermes-meter/`` (behind the
dashboard's own authentication). ``GET /viewer`` starts the Rust viewer
(``hermes-meter ui``, the same code and pages as the standalone command) on a
thread of this process, once, on a free loopback port, and answers where
it is. The tab shows that address in a frame, so the
browser must be on this machine (the dashboard's default, loopback).

This file is copied into ``$HERMES_HOME/plugins/hermes-meter/dashboard/`` by
the plugin (``hermes_meter._dashboard``); it imports the installed package.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

router = APIRouter()


@router.get("/viewer")
def viewer() -> dict[str, Any]:
    from hermes_meter import _dashboard

    return {"url": _dashboard.viewer_url()}
