"""Drive one gateway conversation through Hermes's API server platform.

Starts ``hermes gateway run`` with the api_server platform on 127.0.0.1,
waits for /health, sends two chat completions in one session (header
X-Hermes-Session-Id), waits PAUSE seconds after the first, stops the gateway
with SIGTERM and waits for it to exit. Writes ``gateway_times.json`` (when
each turn was sent and answered) beside the gateway's log in --out.

With ``--outage SECONDS`` (the pipeline sidecar's control files in --out):
after the first turn the Collector is stopped, a second turn is answered
while it is down, it is started again after SECONDS, a third turn follows,
and the gateway is stopped only once Jaeger (its query API)
holds the chat spans of all three turns: what the plugin kept while the
Collector was down went out while the gateway still ran.

With ``--cron-job ID`` no chat is sent: the gateway runs until its own cron
scheduler (a tick at start, then one a minute) has run that job and saved
its output, then it is stopped the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from pipeline_control import control, wait_for_chats

PORT = 8642
KEY = "e2e-gateway-loopback-test-key-6f1c2a9b8d7e"
PAUSE = 3.0


def _get(path: str) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{PORT}{path}", timeout=5) as r:
        return r.status


def _chat(text: str) -> dict:
    body = json.dumps({"model": "hermes-agent", "messages": [{"role": "user", "content": text}]}).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{PORT}/v1/chat/completions",
        data=body,
        headers={
            "Content-Type": "application/json",
            "Authorization": f"Bearer {KEY}",
            "X-Hermes-Session-Id": "e2e-gateway-conversation",
        },
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def _wait_for_cron_run(job: str, times: dict[str, float], gw: subprocess.Popen) -> int:
    """Until the scheduler saved the job's output (a run done), at most
    three of its ticks."""
    output = Path(os.environ["HERMES_HOME"]) / "cron" / "output" / job
    deadline = time.time() + 200
    while not (output.is_dir() and any(output.iterdir())):
        if gw.poll() is not None or time.time() > deadline:
            print(f"gateway_session: the scheduler never ran cron job {job}", file=sys.stderr)
            return 1
        time.sleep(0.5)
    times["cron_output"] = time.time()
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hermes", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--outage", type=float, default=0.0)
    ap.add_argument("--cron-job", default="")
    a = ap.parse_args()
    out = Path(a.out)
    env = dict(
        os.environ,
        API_SERVER_ENABLED="1",
        API_SERVER_KEY=KEY,
        API_SERVER_HOST="127.0.0.1",
        API_SERVER_PORT=str(PORT),
    )
    log = (out / "gateway.log").open("w")
    gw = subprocess.Popen([a.hermes, "gateway", "run", "--force"], env=env, stdout=log, stderr=log)
    times: dict[str, float] = {}
    rc = 0
    try:
        deadline = time.time() + 90
        while True:
            try:
                if _get("/health") == 200:
                    break
            except OSError:
                pass
            if gw.poll() is not None or time.time() > deadline:
                print("gateway_session: the API server never came up", file=sys.stderr)
                return 1
            time.sleep(0.2)
        if a.cron_job:
            return _wait_for_cron_run(a.cron_job, times, gw)
        turns = ["First turn, plain answer please", "Second turn, plain answer please"]
        if a.outage:
            turns.append("Third turn, plain answer please")
        for n, text in enumerate(turns, 1):
            times[f"turn{n}_sent"] = time.time()
            reply = _chat(text)
            times[f"turn{n}_answered"] = time.time()
            if not reply.get("choices"):
                print(f"gateway_session: no answer to turn {n}: {reply}", file=sys.stderr)
                rc = 1
            if n == 1 and a.outage:
                times["collector_stopped"] = control(out, "collector.stop")
            elif n == 1:
                time.sleep(PAUSE)
            if n == 2 and a.outage:
                time.sleep(max(0.0, times["collector_stopped"] + a.outage - time.time()))
                times["collector_started"] = control(out, "collector.start")
        if a.outage:
            # Every turn's chat span delivered while the gateway runs (the
            # exporter's backoff is at most 30 s).
            times["jaeger_chats"] = wait_for_chats(len(turns), seconds=90)
            times["jaeger_checked"] = time.time()
    finally:
        times["sigterm"] = time.time()
        gw.send_signal(signal.SIGTERM)
        try:
            gw.wait(timeout=60)
        except subprocess.TimeoutExpired:
            gw.kill()
            gw.wait()
            rc = 1
        times["exited"] = time.time()
        (out / "gateway_times.json").write_text(json.dumps(times))
    return rc


if __name__ == "__main__":
    sys.exit(main())
