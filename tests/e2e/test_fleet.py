"""Fleet budgets in the real Hermes 0.19.0: two hosts (two stores) share one
budget through a real PostgreSQL, and host B's LLM call is stopped before the
provider because of host A's spend.

PostgreSQL is Debian's, started here in a temporary directory and listening
only on a Unix socket there (nothing leaves the machine; the kit's network
namespace does not hide a socket file). It refuses to run as root, so as root
the cluster belongs to ``nobody`` and runs through ``setpriv``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import NEW_LINE
from test_budgets import EXIT_BUDGET_STOPPED, _chat_posts, _hooks, _scenario, _steps

# Said in every report line it appears in (-rs), never skipped silently.
pytestmark = pytest.mark.skipif(
    NEW_LINE, reason="runs in the Hermes 0.19 suite only: the Python 3.14 chroot carries no PostgreSQL"
)


PG_BIN = Path(os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"))
NOBODY = 65534


def _pg(program: str) -> list[str]:
    path = str(PG_BIN / program)
    if os.geteuid() == 0:
        return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", path]
    return [path]


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL on a Unix socket; its libpq URL."""
    root = Path(tempfile.mkdtemp(prefix="hermes-meter-pg"))
    if os.geteuid() == 0:
        os.chown(root, NOBODY, NOBODY)
    data = root / "data"
    init = subprocess.run(
        [*_pg("initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"],
        capture_output=True,
        text=True,
    )
    assert init.returncode == 0, init.stderr
    with open(root / "server.log", "wb") as log:
        server = subprocess.Popen(
            [*_pg("postgres"), "-D", str(data), "-c", "listen_addresses=", "-k", str(root)],
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    try:
        deadline = time.monotonic() + 60
        while subprocess.run([*_pg("pg_isready"), "-h", str(root), "-U", "postgres", "-q"]).returncode != 0:
            assert server.poll() is None, (root / "server.log").read_text()
            assert time.monotonic() < deadline, "postgres did not start"
            time.sleep(0.05)
        yield f"postgresql://postgres@/postgres?host={root}&port=5432"
    finally:
        server.terminate()
        server.wait(timeout=60)
        shutil.rmtree(root, ignore_errors=True)


def test_host_b_is_stopped_by_host_a_spend(hermes_bin, tmp_path, postgres_url) -> None:
    # Host B ran Hermes before (one call, under the limit) and runs
    # `hermes-meter serve` (as a gateway host runs something all the time),
    # which keeps its store synced with the fleet. Host A then spends with a
    # one-shot `hermes -z`, which pushes its spend as it exits. B's own spend
    # alone is under the limit; with A's it is over, and B's next LLM call is
    # stopped before the provider.
    out = _scenario(
        hermes_bin,
        tmp_path,
        """
        A="$OUTDIR/meter-a"; B="$OUTDIR/meter-b"
        step set env HERMES_METER_HOME="$A" "$BUDGET" budget set global daily 0.004
        step b1 env HERMES_METER_HOME="$B" "$HERMES" -z "plain question"
        HERMES_METER_HOME="$B" setsid "$BUDGET" serve --prometheus 127.0.0.1:0 >"$OUTDIR/serve-b.log" 2>&1 &
        PIDS+=($!)
        # NAME PATTERN: polls until host B's `budget list --json` has PATTERN.
        POLL='until HERMES_METER_HOME="$0" "$1" budget list --json | grep -q "$2"; do sleep 0.1; done'
        b_until() { step "$1" bash -c "$POLL" "$B" "$BUDGET" "$2"; }
        b_until b_synced '"this_host_usd"'
        step a env HERMES_METER_HOME="$A" "$HERMES" -z "another plain question"
        b_until b_sees_a '"verdict": "hard"'
        step b2 env HERMES_METER_HOME="$B" "$HERMES" -z "a third plain question"
        step list_b env HERMES_METER_HOME="$B" "$BUDGET" budget list --json
        step status_b env HERMES_METER_HOME="$B" "$BUDGET" status
        """,
        env={"HERMES_METER_FLEET_URL": postgres_url},
    )
    steps = _steps(out)
    for name in ("set", "b1", "b_synced", "a", "b_sees_a", "list_b", "status_b"):
        assert steps[name][0] == 0, (name, steps[name], (out / "serve-b.log").read_text())
    # The run the fleet's budget stopped says so in its exit code.
    assert steps["b2"][0] == EXIT_BUDGET_STOPPED, steps["b2"]
    # B's first call and A's went to the provider; B's second was answered
    # with the stand-in.
    assert "BUDGET-EXCEEDED" not in steps["b1"][1], steps["b1"]
    assert "BUDGET-EXCEEDED" not in steps["a"][1], steps["a"]
    assert "BUDGET-EXCEEDED" in steps["b2"][1], steps["b2"]
    assert _chat_posts(out) == 2, "host B's second run did not reach the provider"
    posts = [h for h in _hooks(out) if h["hook"] == "post_api_request"]
    assert posts[-1]["kwargs"]["response_model"] == "hermes-meter/budget-blocked"
    # B's list: the fleet's spend (A's and B's), B's part alone under the
    # limit, the verdict hard.
    budgets = json.loads(steps["list_b"][1])["budgets"]
    row = next(b for b in budgets if b["scope"] == "global" and b["window"] == "daily")
    assert row["verdict"] == "hard", row
    assert 0 < row["this_host_usd"] < row["limit_usd"] <= row["spend_usd"], row
    assert "fleet sync" in steps["status_b"][1], steps["status_b"]
