"""Hook calls Hermes skipped, recorded anyway and counted.

Hermes 0.21 and later run most hooks on a worker thread with a time cap
(``hermes_cli/plugins_dispatch.py``, ``_run_hook_callback_bounded``), and
skip a call of a callback while another call of it with the same key is
still running: the key is ``(hook, callback)`` in 0.21.x, so two tools of
one parallel batch collide; later it adds the call's ``tool_call_id`` or
``turn_id``, so auxiliary calls of one turn, turn-less calls and concurrent
gateway sessions' ``on_session_start`` still can. A skipped call never
reaches the plugin; Hermes only logs a WARNING
("Hook '%s' callback %s skipped after previous timeout or while still
running") on ``hermes_cli.plugins``, on the thread that made the call, while
its dispatcher still holds the call's kwargs.

:class:`SkipWatch` is a filter on that logger. For a skip of one of our
callbacks it finds the dispatcher's frame (its ``cb`` is one of ours: a
multi-profile gateway registers the plugin once per profile, and every
registration's callbacks are watched), records the
call from its ``kwargs`` there and then, without waiting for anything (the
dispatcher holds its lock; no verdict of ours is read any more), and
counts it. Hermes's WARNING is replaced by our own count: the call was not
lost. A skip it cannot recover (no dispatcher frame of the shape it knows)
is counted as lost, and Hermes's WARNING goes through. Applies to the
dispatchers of Hermes 0.21.0 - 0.23.x (read at the commits named in
``tests/python/hermes_main_dispatch.py``); on 0.19 no hook is ever skipped.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

#: The logger Hermes's dispatcher logs its skips on.
HERMES_PLUGINS_LOGGER = "hermes_cli.plugins"
#: The start shared by every skip message of the dispatcher (a skip while
#: running or suppressed after a timeout, and a skip for too many abandoned
#: workers); each names the hook and the callback first.
_SKIP_PREFIX = "Hook '%s' callback %s"
#: What Hermes's dispatcher says when it stops waiting for a call
#: ("Hook '%s' callback %s timed out after %.0fs").
_TIMED_OUT = "timed out after"
#: How many frames above the logging call the dispatcher's frame may be
#: (logging's own frames, then ``_run_hook_callback_bounded``).
_MAX_FRAMES = 16


#: One of our callbacks and what records a call of it Hermes skipped (the
#: ``record_skipped`` of a hook of the same profile).
Watched = tuple[Callable[..., Any], Callable[..., bool]]


class SkipWatch(logging.Filter):
    """Records and counts the calls of our hooks Hermes skipped."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        #: registration -> hook name -> what is watched of it.
        self._registrations: dict[str, dict[str, Watched]] = {}
        #: hook name -> our callbacks of every registration; replaced whole
        #: (under the lock), so the filter reads it without one.
        self._ours: dict[str, list[Watched]] = {}
        #: hook name -> [recorded, lost]
        self.counts: dict[str, list[int]] = {}

    def watch(
        self,
        registration: str,
        ours: dict[str, Callable[..., Any]],
        recorders: dict[str, Callable[..., bool]],
    ) -> None:
        """Watches the callbacks of one registration as well (the same
        registration again replaces its own: a plugin reloaded)."""
        with self._lock:
            self._registrations[registration] = {name: (cb, recorders[name]) for name, cb in ours.items()}
            by_hook: dict[str, list[Watched]] = {}
            for watched in self._registrations.values():
                for name, pair in watched.items():
                    by_hook.setdefault(name, []).append(pair)
            self._ours = by_hook

    #: The level the logger had, where it was above WARNING: records below
    #: it are dropped as they would have been.
    below = logging.NOTSET

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            keep = self._filter(record)
        except Exception:  # noqa: BLE001 - a log line of Hermes must never fail because of us
            keep = True
        return keep and record.levelno >= self.below

    def _filter(self, record: logging.LogRecord) -> bool:
        msg = record.msg
        if not (isinstance(msg, str) and msg.startswith(_SKIP_PREFIX)):
            return True
        args = record.args
        if not isinstance(args, tuple) or not args or not isinstance(args[0], str):
            return True
        hook_name = args[0]
        ours = self._ours.get(hook_name)
        if not ours:
            return True
        if _TIMED_OUT in msg:
            # Hermes stopped waiting for a call of ours; the call goes on
            # (and is recorded), but Hermes skips the callback for a while.
            if len(args) > 1 and any(args[1] == getattr(cb, "__name__", None) for cb, _ in ours):
                from . import _native

                _native.note_hermes_timeout()
            return True
        if "skipped" not in msg:
            return True
        found = _dispatched_kwargs(ours, hook_name)
        if found is None:
            # Not our callback's skip (another plugin's), or a dispatcher
            # this does not know: count ours only when the name says so.
            if len(args) > 1 and any(args[1] == getattr(cb, "__name__", None) for cb, _ in ours):
                self._count(hook_name, recorded=False, after_timeout=False)
            return True
        kwargs, recorder, after_timeout = found
        recorded = recorder(**kwargs)
        self._count(hook_name, recorded=recorded, after_timeout=after_timeout)
        return not recorded

    def _count(self, hook_name: str, *, recorded: bool, after_timeout: bool) -> None:
        with self._lock:
            counts = self.counts.setdefault(hook_name, [0, 0])
            counts[0 if recorded else 1] += 1
        # Into the store's health record, for `hermes-meter status`.
        from . import _native

        _native.note_hermes_skip(recorded, after_timeout)

    def totals(self) -> tuple[int, int]:
        """(recorded, lost) over every hook."""
        with self._lock:
            return (sum(c[0] for c in self.counts.values()), sum(c[1] for c in self.counts.values()))


def _dispatched_kwargs(
    ours: list[Watched], hook_name: str
) -> tuple[dict[str, Any], Callable[..., bool], bool] | None:
    """The kwargs of the call being skipped, read from the dispatcher's
    frame on this thread (the one whose ``cb`` is one of ``ours``), the
    recorder of that callback, and whether the skip follows a timeout (the
    frame's ``suppressed_until`` is still ahead; 0.22's dispatcher)."""
    frame = sys._getframe(2)
    for _ in range(_MAX_FRAMES):
        if frame is None:
            return None
        local = frame.f_locals
        if local.get("hook_name") == hook_name:
            cb = local.get("cb")
            for callback, recorder in ours:
                if cb is callback:
                    kwargs = local.get("kwargs")
                    until = local.get("suppressed_until")
                    after_timeout = isinstance(until, float) and until > time.monotonic()
                    return (dict(kwargs), recorder, after_timeout) if isinstance(kwargs, dict) else None
        frame = frame.f_back
    return None


def bounded_dispatch() -> bool:
    """Whether the running Hermes runs hooks on time-capped workers and
    skips overlapping calls (0.21 and later). Never imports."""
    from ._integrations import loaded

    return hasattr(loaded("hermes_cli.plugins_dispatch"), "_HOOK_TIMEOUT_BOUNDED_HOOKS")


def coarse_single_flight() -> bool:
    """Whether the running Hermes skips a call of a callback while any other
    call of it runs (0.21.x: key ``(hook, callback)``), rather than only one
    for the same tool call or turn (later main: ``_hook_call_identity``).
    Read from the dispatcher ``hermes_cli.plugins`` imported, never imported
    here (``register`` must not import: see ``_integrations``)."""
    from ._integrations import loaded

    dispatch = loaded("hermes_cli.plugins_dispatch")
    if dispatch is None:
        return False
    return hasattr(dispatch, "_HOOK_TIMEOUT_BOUNDED_HOOKS") and not hasattr(dispatch, "_hook_call_identity")


_watch: SkipWatch | None = None


_install_lock = threading.Lock()


def install(
    ours: dict[str, Callable[..., Any]],
    recorders: dict[str, Callable[..., bool]],
    registration: str = "",
) -> SkipWatch:
    """Watches the callbacks of one ``register`` (``registration`` names
    it: its profile), putting the watch on Hermes's plugin logger the first
    time (once per process). Every profile's callbacks stay watched; the
    same registration again replaces its own."""
    global _watch
    with _install_lock:
        if _watch is None:
            watch = SkipWatch()
            logger = logging.getLogger(HERMES_PLUGINS_LOGGER)
            # A logger set above WARNING never makes the skip's record, so
            # the filter would never see it: let WARNING through to the
            # filter, which drops what the level the user set would have
            # dropped.
            level = logger.getEffectiveLevel()
            if level > logging.WARNING:
                watch.below = level
                logger.setLevel(logging.WARNING)
            logger.addFilter(watch)
            _watch = watch
        _watch.watch(registration, ours, recorders)
        return _watch


def watch() -> SkipWatch | None:
    """The installed watch, if any."""
    return _watch
