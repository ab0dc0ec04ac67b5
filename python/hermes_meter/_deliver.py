"""Alerts delivered to a person as a message through Hermes itself.

With ``HERMES_METER_ALERT_DELIVER`` set to a platform Hermes's gateway is
configured for (``telegram``: its home channel) or to
``platform:chat_id[:thread_id]``, a daemon thread of each Hermes process
takes the alerts the store holds (budget notices, runaway loops, a model
that started costing money or went away) and sends each through Hermes's
own sender, the one cron jobs deliver their results with
(``tools.send_message_tool._send_to_platform``, read in Hermes 0.19.0 to
0.23.x). Each alert is claimed in the store before it is sent, so two
processes never send it twice; a failed send is tried again after a
backoff, and an alert waits in the store until some Hermes process sends
it. Never from a hook thread, and nothing here raises into Hermes.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass
from typing import Any

from . import _native

ENV = "HERMES_METER_ALERT_DELIVER"
#: Seconds between two looks at the store.
_INTERVAL = 5.0
#: Alerts sent in one look at the most.
_PER_LOOK = 5

_log = logging.getLogger("hermes_meter")
_started = False
_lock = threading.Lock()


@dataclass(frozen=True)
class Target:
    """Where alerts go: a platform and, unless its home channel, a chat."""

    platform: str
    chat_id: str | None = None
    thread_id: str | None = None

    @staticmethod
    def parse(value: str) -> Target | None:
        parts = [p.strip() for p in value.strip().split(":", 2)]
        if not parts[0]:
            return None
        chat = parts[1] if len(parts) > 1 and parts[1] else None
        thread = parts[2] if len(parts) > 2 and parts[2] else None
        return Target(parts[0].lower(), chat, thread)


def target_from_env() -> Target | None:
    """``ENV`` as the configuration reads it (the environment, then
    ``$HERMES_HOME/.env``): the command line's ``status`` reads the same."""
    value = _native.alert_deliver_target()
    return Target.parse(value) if value else None


def sender() -> Any:
    """Hermes's sender, or None when this Hermes has none."""
    try:
        from tools.send_message_tool import _send_to_platform

        return _send_to_platform
    except Exception:  # noqa: BLE001 - absent is an answer
        return None


def send(target: Target, text: str) -> str | None:
    """Sends ``text`` to ``target`` through Hermes: None when its sender took
    it, else why it did not."""
    send_to_platform = sender()
    if send_to_platform is None:
        return "this Hermes has no tools.send_message_tool._send_to_platform"
    try:
        from gateway.config import Platform, load_gateway_config

        platform = Platform(target.platform)
        pconfig = load_gateway_config().platforms.get(platform)
        if pconfig is None or not pconfig.enabled:
            return f"platform {target.platform!r} is not configured or not enabled in Hermes's gateway"
        chat_id, thread_id = target.chat_id, target.thread_id
        if chat_id is None:
            home = pconfig.home_channel
            if home is None or not home.chat_id:
                return (
                    f"platform {target.platform!r} has no home channel; set {ENV}={target.platform}:<chat id>"
                )
            chat_id, thread_id = home.chat_id, thread_id or home.thread_id
        result = asyncio.run(send_to_platform(platform, pconfig, chat_id, text, thread_id=thread_id))
    except Exception as e:  # noqa: BLE001 - a failed send is retried, never raised
        return f"{type(e).__name__}: {e}"
    if isinstance(result, dict) and result.get("error"):
        return str(result["error"])
    return None


def deliver_due(target: Target) -> int:
    """Sends the alerts due now; returns how many Hermes took. Stops at the
    first failure (a platform that is down is not asked five times)."""
    sent = 0
    # One claimed at a time, just before its send: one this look does not
    # reach stays free for the next look, in any process.
    while sent < _PER_LOOK:
        claimed = _native.claim_alert_deliveries(1)
        if not claimed:
            break
        kind, key, text = claimed[0]
        error = send(target, f"[hermes-meter] {text}")
        _native.alert_delivery_done(kind, key, error)
        if error is not None:
            _log.warning("hermes-meter: alert not delivered through Hermes (%s); it is tried again", error)
            break
        sent += 1
    return sent


#: How often a look that found Hermes importing tries again, seconds.
_IMPORT_WAIT = 0.1

#: Held while a look sends: the exit waits for a send in flight.
_sending = threading.Lock()


def _loop(target: Target, stop: threading.Event) -> None:
    # A look at once: what an earlier process (a `hermes -z` that ended
    # before its thread looked) left goes out with this one. Hermes's
    # sender is imported from this thread, so never while another thread
    # is importing (Hermes starting up: see _integrations.importing).
    from ._integrations import importing

    while True:
        if importing():
            if stop.wait(_IMPORT_WAIT):
                return
            continue
        try:
            with _sending:
                if stop.is_set():
                    return
                deliver_due(target)
        except Exception:  # noqa: BLE001 - the thread must outlive any failure
            _log.debug("hermes-meter: alert delivery step failed", exc_info=True)
        if stop.wait(_INTERVAL):
            return


_stop: threading.Event | None = None


def finish(timeout: float) -> None:
    """At exit: no new look, and a send in flight gets ``timeout`` seconds
    to finish (its alert is marked sent, not left claimed)."""
    if _stop is None:
        return
    _stop.set()
    if _sending.acquire(timeout=timeout):
        _sending.release()


def start() -> threading.Event | None:
    """Starts the delivery thread once per process when ``ENV`` is set;
    returns its stop event (None when not started). Never raises."""
    global _started
    try:
        target = target_from_env()
        if target is None:
            return None
        with _lock:
            if _started:
                return None
            _started = True
        global _stop
        stop = _stop = threading.Event()
        threading.Thread(target=_loop, args=(target, stop), name="hermes-meter-deliver", daemon=True).start()
        return stop
    except Exception:  # noqa: BLE001
        _log.debug("hermes-meter: alert delivery not started", exc_info=True)
        return None
