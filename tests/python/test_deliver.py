"""Alerts delivered through Hermes itself (``_deliver``): the target
setting, a send that fails without raising, and one failure stopping a
look. (The real Hermes 0.19.0 run with its Signal sender on loopback is
tests/e2e/test_budgets.py.)"""

from __future__ import annotations

import sys
import types

import pytest
from hermes_meter import _deliver


def test_the_target_is_a_platform_or_a_chat_of_one() -> None:
    assert _deliver.Target.parse("Telegram") == _deliver.Target("telegram")
    assert _deliver.Target.parse("signal:+1555") == _deliver.Target("signal", "+1555")
    assert _deliver.Target.parse("slack:C123:1700.1") == _deliver.Target("slack", "C123", "1700.1")
    assert _deliver.Target.parse(" :x") is None


def test_a_send_through_a_hermes_without_its_sender_says_why_and_raises_nothing(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "tools.send_message_tool", types.ModuleType("tools.send_message_tool"))
    error = _deliver.send(_deliver.Target("telegram"), "text")
    assert error is not None and "_send_to_platform" in error


def test_a_failed_send_is_recorded_and_ends_the_look(monkeypatch) -> None:
    due = [("runaway", "a", "A"), ("runaway", "b", "B")]
    claimed: list = []
    done: list = []

    def claim(limit: int) -> list:
        # The store's claim: alerts not sent and not claimed in this look.
        sent = {key for key, error in done if error is None}
        left = [d for d in due if d[1] not in sent and d not in claimed][:limit]
        claimed.extend(left)
        return left

    monkeypatch.setattr(_deliver._native, "claim_alert_deliveries", claim)
    monkeypatch.setattr(
        _deliver._native, "alert_delivery_done", lambda kind, key, error: done.append((key, error))
    )
    monkeypatch.setattr(_deliver, "send", lambda target, text: "platform down")
    assert _deliver.deliver_due(_deliver.Target("telegram")) == 0
    assert done == [("a", "platform down")]
    assert [c[1] for c in claimed] == ["a"], "the second alert is not claimed: it waits for a later look"
    monkeypatch.setattr(_deliver, "send", lambda target, text: None)
    claimed.clear()
    done.clear()
    assert _deliver.deliver_due(_deliver.Target("telegram")) == 2
    assert done == [("a", None), ("b", None)]


@pytest.mark.parametrize("value", ["", "   "])
def test_no_thread_starts_without_a_target(monkeypatch, value) -> None:
    monkeypatch.setenv(_deliver.ENV, value)
    assert _deliver.start() is None
