"""A plugin Hermes dropped is never silent. Hermes 0.21 and later abandon a
plugin whose load outlives ``plugins.load_timeout_seconds`` and throw away
everything it registered: that process records nothing. Here the deadline
is set below what any load takes, so Hermes really drops the plugin in a
real ``hermes -z`` run, the plugin's first run on the machine (no store was
ever made; ``-z`` sets up no log file either). The next ``hermes-meter
status`` must say so in its first lines, naming the session it did not
record.
"""

from __future__ import annotations

import json
import time

import pytest
from conftest import NEW_LINE
from test_budgets import _scenario, _steps

pytestmark = pytest.mark.skipif(not NEW_LINE, reason="Hermes 0.19 has no plugin load deadline")


def test_a_load_hermes_abandoned_is_said_first_by_status(hermes_bin, tmp_path) -> None:
    out = _scenario(
        hermes_bin,
        tmp_path,
        """
        step deadline "$HERMES" config set plugins.load_timeout_seconds 0.001
        step oneshot "$HERMES" -z "plain question please"
        # status compares Hermes's sessions older than its 10 s grace.
        sleep 11
        step status "$BUDGET" status
        step json "$BUDGET" status --json
        """,
    )
    steps = _steps(out)
    # Hermes answered without the plugin: nothing of that run was recorded.
    assert steps["oneshot"][0] == 0 and "MOCK-FINAL-ANSWER" in steps["oneshot"][1], steps["oneshot"]
    # The first lines of status say it, before anything else (exit 1).
    assert steps["status"][0] == 1, steps["status"]
    lines = steps["status"][1].splitlines()
    assert lines[0].startswith("summary         PROBLEMS: "), lines[:6]
    problems = [line for line in lines if line.startswith("PROBLEM ")]
    assert lines[1 : 1 + len(problems)] == problems, lines[:6]
    assert f"{len(problems)} Hermes problem(s)" in lines[0], lines[:6]
    assert problems[0].startswith("PROBLEM         Hermes ran 1 session(s)"), lines[:6]
    assert "did not record" in problems[0], lines[:6]
    missing = json.loads(steps["json"][1])["hermes"]["sessions"]["missing"]
    assert len(missing) == 1 and time.time() - missing[0]["started_at"] < 600, missing
    if (out / "meter").exists():
        # Hermes gave up waiting before register() ended, and register()
        # still ran to its end on Hermes's discovery thread: it reported
        # the abandoned load, and recorded nothing.
        assert len(problems) == 2, lines[:6]
        assert problems[1].startswith(
            "PROBLEM         Hermes abandoned loading the plugin in 1 process(es)"
        ), lines
        assert "journal         0 events" in lines and "runs            0" in lines, lines
    else:
        # Hermes gave up before register() ran: nothing was made in the
        # plugin's name, and status says so.
        assert lines[0].startswith("summary         PROBLEMS: no store yet"), lines[:6]
        assert len(problems) == 1, lines[:6]
