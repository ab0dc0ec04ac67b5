"""hermes-meter as a Hermes directory plugin.

This directory holds no code of the plugin: ``register`` is the one of the
``hermes_meter`` package (the ``hermes-meter`` wheel, with its native
part), imported when Hermes loads the plugin. Without the package it logs
what to install and registers nothing; it never raises into Hermes.
"""

from __future__ import annotations

import logging
from typing import Any

REQUIREMENT = "hermes-meter==0.1.0"

_log = logging.getLogger("hermes_meter")


def register(ctx: Any) -> None:
    try:
        from hermes_meter import register as register_package
    except ImportError as exc:
        _log.warning(
            "hermes-meter is not recording: the hermes-meter package is not installed in Hermes's "
            "Python (%s). Install it there with `pip install %s`, then restart Hermes.",
            exc,
            REQUIREMENT,
        )
        return None
    return register_package(ctx)
