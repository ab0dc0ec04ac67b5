"""Wrapping one of Hermes's functions in place, once per process.

The package reads a few things Hermes computes but hands no plugin
(auxiliary calls on 0.19.0, the provider's billed cost): it wraps the
function that has them, Hermes's own code running first and unchanged.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


def wrap(owner: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> bool:
    """Replaces ``owner.name`` (a module's function or a class's method)
    with ``make(original)``; returns whether it did. Never wraps twice (a
    plugin registered again in the same process) nor what is missing."""
    original = getattr(owner, name, None) if owner is not None else None
    if original is None or getattr(original, "_hermes_meter", False):
        return False
    wrapper = functools.wraps(original)(make(original))
    wrapper._hermes_meter = True  # type: ignore[attr-defined]
    setattr(owner, name, wrapper)
    return True


def is_wrapped(owner: Any, name: str) -> bool:
    """Whether ``owner.name`` is a wrapper of ours."""
    return bool(getattr(getattr(owner, name, None), "_hermes_meter", False))
