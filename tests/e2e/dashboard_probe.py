"""Hermes's own web dashboard with the plugin's tab, driven for real.

    dashboard_probe.py HERMES_BIN OUTDIR FIXTURE.jsonl

Run inside a loopback-only network namespace (tests/e2e/kit/netns-run.sh).
Makes a Hermes home whose config.yaml enables hermes-meter, replays FIXTURE
into the plugin's store with the wheel's `hermes-meter`, starts `hermes
dashboard` (the plugin's register() installs the tab), then asks the
dashboard what a browser would and loads its /meter page in headless
Chromium. Prints one JSON object of what it saw; OUTDIR keeps the logs and
a screenshot.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

TOKEN = "e2e-dashboard-session-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str, token: bool = True) -> tuple[int, str]:
    req = urllib.request.Request(url, headers={"X-Hermes-Session-Token": TOKEN} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def chromium(url: str, mode: str, profile: Path) -> tuple[str, list[str]]:
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or os.environ.get("CHROMIUM")
    if not exe:
        raise SystemExit("chromium is required (apt-get install chromium)")
    args = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-extensions", "--enable-logging=stderr", "--v=0", "--window-size=1400,1000",
            "--virtual-time-budget=8000", f"--user-data-dir={profile}", mode, url]  # fmt: skip
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)
    # Chromium's own chrome:// pages log too (headless, no network); only the
    # pages under test count.
    console = [
        line
        for line in p.stderr.splitlines()
        if (":CONSOLE" in line or "Uncaught" in line) and "source: chrome://" not in line
    ]
    return p.stdout, console


def main() -> None:
    hermes_bin, out, fixture = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    out.mkdir(parents=True, exist_ok=True)
    home, store = out / "hermes-home", out / "meter"
    home.mkdir(exist_ok=True)
    (home / "config.yaml").write_text("plugins:\n  enabled:\n    - hermes-meter\n")
    env = dict(os.environ, HERMES_HOME=str(home), HERMES_METER_HOME=str(store),
               HERMES_DASHBOARD_SESSION_TOKEN=TOKEN, BROWSER="true")  # fmt: skip
    cli = hermes_bin.parent / "hermes-meter"
    subprocess.run([str(cli), "replay", str(fixture)], env=env, check=True, capture_output=True)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = (out / "dashboard.log").open("w")
    dash = subprocess.Popen(
        [str(hermes_bin), "dashboard", "--port", str(port), "--skip-build"],
        env=env, stdout=log, stderr=subprocess.STDOUT, cwd=out,
    )  # fmt: skip
    facts: dict = {}
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or dash.poll() is not None:
                    raise SystemExit("the dashboard did not start; see dashboard.log") from None
                time.sleep(0.2)
        facts["tab_installed"] = (home / "plugins" / "hermes-meter" / "dashboard" / "manifest.json").is_file()
        status, body = get(f"{base}/api/dashboard/plugins")
        facts["plugins_status"] = status
        facts["plugins"] = json.loads(body) if status == 200 else body
        facts["asset_status"] = get(f"{base}/dashboard-plugins/hermes-meter/dist/index.js", token=False)[0]
        facts["viewer_without_token"] = get(f"{base}/api/plugins/hermes-meter/viewer", token=False)[0]
        status, body = get(f"{base}/api/plugins/hermes-meter/viewer")
        facts["viewer_status"] = status
        url = json.loads(body)["url"] if status == 200 else ""
        facts["viewer_url"] = url
        if url:
            facts["viewer_index"] = get(url, token=False)[1]
            facts["viewer_session_ids"] = json.loads(get(url + "api/sessions", token=False)[1])["sessions"]
        profile = out / "chromium-profile"
        dom, console = chromium(f"{base}/meter", "--dump-dom", profile)
        facts["dom"], facts["console"] = dom, console
        shot = out / "dashboard-meter.png"
        _, console = chromium(f"{base}/meter", f"--screenshot={shot}", profile)
        facts["screenshot_console"] = console
        facts["screenshot"] = str(shot) if shot.is_file() else None
    finally:
        dash.terminate()
        try:
            dash.wait(timeout=20)
        except subprocess.TimeoutExpired:
            dash.kill()
        log.close()
    # What the store holds once the dashboard, its pages and its chat
    # connections are gone.
    with sqlite3.connect(f"file:{store / 'hermes-meter.db'}?mode=ro", uri=True) as db:
        facts["runs_after"] = sorted(r[0] for r in db.execute("SELECT session_id FROM runs"))
    print(json.dumps(facts))


if __name__ == "__main__":
    main()
