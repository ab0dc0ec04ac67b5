"""The Hermes profiles this process registered the plugin for, and which
of them a call is made in.

Hermes 0.21 and later can serve several profiles from one gateway process
(``gateway.multiplex_profiles``). It never changes ``HERMES_HOME`` in the
environment for that: ``hermes_constants.get_hermes_home()`` honours a
per-task ``ContextVar`` override (``hermes_constants.py`` read at
00067189dfecf833d4d009c2dd977ae85cf800e0, Hermes 0.21.3), and each resolved
home gets its own ``PluginManager``, so ``register(ctx)`` runs once per
profile that enabled the plugin, in that profile's scope. Hooks are bound to
their profile when they are made (``_native.Hook(name, profile=...)``);
what the package patches into Hermes is process-wide and runs in whatever
profile's task calls it, so it asks here whose call it is, and records
nothing for a profile that never enabled the plugin.

One store serves every profile of a process: the profile is a column of
the runs, not a separate store.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Generic, TypeVar

T = TypeVar("T")

#: The home key where Hermes cannot say which profile a call is in
#: (no ``hermes_constants.get_hermes_home``): such a Hermes serves one
#: profile per process.
UNKNOWN_HOME = ""

# Resolved keys by the path string given, as Hermes's own
# ``hermes_home_key`` keeps them: resolving is a filesystem call, and a
# process only ever sees a handful of homes.
_keys: dict[str, str] = {}


def home_key() -> str:
    """The Hermes home of the calling context, as a comparable key, or
    :data:`UNKNOWN_HOME`. Never raises."""
    try:
        from hermes_constants import get_hermes_home
    except Exception:  # noqa: BLE001 - before multi-profile gateways
        return UNKNOWN_HOME
    try:
        raw = str(get_hermes_home())
    except Exception:  # noqa: BLE001 - a home Hermes cannot resolve is no profile we know
        return UNKNOWN_HOME
    key = _keys.get(raw)
    if key is None:
        try:
            key = os.path.normcase(str(Path(raw).expanduser().resolve(strict=False)))
        except (OSError, RuntimeError, ValueError):
            key = raw
        _keys[raw] = key
    return key


class PerProfile(Generic[T]):
    """One value for each profile that registered the plugin, keyed by the
    profile's Hermes home at its ``register``, found for the calling one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: home key -> value; replaced whole, so readers need no lock.
        self._by_home: dict[str, T] = {}

    def set(self, key: str, value: T) -> None:
        """The value of the profile at home ``key`` (a profile registered
        again replaces its own)."""
        with self._lock:
            self._by_home = {**self._by_home, key: value}

    def calling(self) -> T | None:
        """The value of the profile the calling context is in; ``None`` for
        a profile that never registered the plugin. Where Hermes cannot say
        (or could not at registration), the first profile registered."""
        by_home = self._by_home
        if not by_home:
            return None
        key = home_key()
        found = by_home.get(key)
        if found is not None:
            return found
        if key == UNKNOWN_HOME or UNKNOWN_HOME in by_home:
            return next(iter(by_home.values()))
        return None


def name_of(ctx: Any) -> str | None:
    """The profile name ``register`` was called for (``ctx.profile_name``,
    which Hermes falls back to ``"default"`` itself); ``None`` on contexts
    too old to say."""
    try:
        name = getattr(ctx, "profile_name", None)
    except Exception:  # noqa: BLE001 - a property that raises names nothing
        return None
    return name if isinstance(name, str) and name else None
