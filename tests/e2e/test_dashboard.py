"""The viewer as a tab of Hermes 0.19.0's own web dashboard.

tests/e2e/dashboard_probe.py starts `hermes dashboard` from the venv with the
wheel, in a loopback-only network namespace, over a store holding the
delegate_sync fixture, and reports what the dashboard served and what
headless Chromium rendered at /meter. The screenshot is kept in
target/ui-screenshots/dashboard-meter.png.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from conftest import KIT, NEW_LINE, ROOT

FIXTURE = ROOT / "tests" / "fixtures" / "delegate_sync.jsonl"
SESSION = "20261130_013759_e4a976"
SUBAGENT = "20261130_013800_5b8baf"

# Said in every report line it appears in (-rs), never skipped silently.
pytestmark = pytest.mark.skipif(
    NEW_LINE, reason="runs in the Hermes 0.19 suite only: the Python 3.14 chroot carries no Chromium"
)


def test_the_dashboard_shows_the_viewer_in_its_otel_tab(hermes_bin: Path) -> None:
    out = Path(tempfile.mkdtemp(prefix="hermes-meter-dashboard-"))
    probe = Path(__file__).with_name("dashboard_probe.py")
    python = hermes_bin.parent / "python"
    p = subprocess.run(
        ["bash", str(KIT / "netns-run.sh"), str(python), str(probe), str(hermes_bin), str(out), str(FIXTURE)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    log = (out / "dashboard.log").read_text(errors="replace") if (out / "dashboard.log").exists() else ""
    assert p.returncode == 0, f"{p.stderr}\n{log}"
    facts = json.loads(p.stdout.strip().splitlines()[-1])

    # register() put the tab where the dashboard scans, and the dashboard lists it.
    assert facts["tab_installed"]
    assert facts["plugins_status"] == 200, facts["plugins"]
    tab = next(t for t in facts["plugins"] if t["name"] == "hermes-meter")
    assert tab["tab"]["path"] == "/meter" and tab["has_api"], tab
    assert facts["asset_status"] == 200
    # The backend route sits behind the dashboard's own authentication.
    assert facts["viewer_without_token"] == 401
    assert facts["viewer_status"] == 200
    assert facts["viewer_url"].startswith("http://127.0.0.1:")
    # The viewer it started reads the plugin's store: the same pages as `hermes-meter ui`.
    assert f'href="/session/{SESSION}"' in facts["viewer_index"]
    assert SESSION in [s["session_id"] for s in facts["viewer_session_ids"]]
    # The dashboard's single-page app rendered the tab with the viewer in it.
    assert (
        f'<iframe id="hermes-meter-viewer" title="hermes-meter" src="{facts["viewer_url"]}"' in facts["dom"]
    )
    assert facts["console"] == [], facts["console"]
    assert facts["screenshot"], "screenshot written"
    # Loading the dashboard's pages recorded no session of its own: only
    # the fixture's session and its subagent are in the store.
    assert facts["runs_after"] == sorted({SESSION, SUBAGENT}), facts["runs_after"]
    shots = ROOT / "target" / "ui-screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(facts["screenshot"], shots / "dashboard-meter.png")
