"""Drive the pipeline sidecar from a scenario: stop and start the Collector
or Jaeger through its control files, and count what Jaeger holds.

    pipeline_control.py --out OUTDIR [--collector-log TEXT] [--jaeger-chats N] ACTION...

With ``--collector-log TEXT``, it first waits up to a minute for the
Collector's log (``collector.log`` in OUTDIR) to hold TEXT, and notes when
it did. Each ACTION (``collector.stop``, ``collector.start``, ``jaeger.stop``,
``jaeger.start``, ``prometheus.backfill``) is asked for in turn and waited for; its time goes to
``control_times.json`` in OUTDIR. With ``--jaeger-chats N``, it then waits
up to three minutes for Jaeger's query API to hold N chat spans (the
Collector's retry backoff is at most 30 s) and notes the count and time.
Also imported by ``gateway_session.py``.
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.request
from pathlib import Path

JAEGER_QUERY = "127.0.0.1:16686"
ANSWERS = {"stop": "stopped", "start": "started", "backfill": "backfilled"}


def control(out: Path, action: str, seconds: float = 60.0) -> float:
    """Asks the sidecar for ``collector.stop`` (etc.), waits for its answer
    and returns when it came."""
    what, verb = action.split(".")
    done = out / f"{what}.{ANSWERS[verb]}"
    (out / action).write_text(f"{time.time()}\n")
    deadline = time.time() + seconds
    while not done.exists():
        if time.time() > deadline:
            raise RuntimeError(f"the sidecar did not answer {action}")
        time.sleep(0.1)
    return time.time()


def wait_for_log(out: Path, text: str, seconds: float = 60.0) -> float:
    """Waits until the Collector's log holds ``text``; returns when it did."""
    log = out / "collector.log"
    deadline = time.time() + seconds
    while not (log.exists() and text in log.read_text(errors="replace")):
        if time.time() > deadline:
            raise RuntimeError(f"the Collector's log did not say {text!r}")
        time.sleep(0.1)
    return time.time()


def jaeger_chats(jaeger: str = JAEGER_QUERY) -> int:
    """Chat spans Jaeger holds for hermes-agent (0 while it holds none or is down)."""
    now = time.time()
    fmt = "%Y-%m-%dT%H:%M:%SZ"
    query = (
        f"http://{jaeger}/api/v3/traces?query.service_name=hermes-agent"
        f"&query.start_time_min={time.strftime(fmt, time.gmtime(now - 3600))}"
        f"&query.start_time_max={time.strftime(fmt, time.gmtime(now + 300))}"
        "&query.raw_traces=true&query.num_traces=1000"
    )
    try:
        with urllib.request.urlopen(query, timeout=10) as r:
            data = json.loads(r.read())
    except OSError:
        return 0
    return sum(
        1
        for rs in data["result"]["resourceSpans"]
        for ss in rs["scopeSpans"]
        for span in ss["spans"]
        # The turns' calls: Hermes 0.22 adds an auxiliary title call.
        if span["name"].startswith("chat ")
        and not any(a["key"] == "hermes.llm.aux_task" for a in span.get("attributes", []))
    )


def wait_for_chats(n: int, seconds: float = 180.0) -> int:
    """Waits until Jaeger holds ``n`` chat spans; returns how many it holds."""
    deadline = time.time() + seconds
    while jaeger_chats() < n and time.time() < deadline:
        time.sleep(0.5)
    return jaeger_chats()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--collector-log")
    ap.add_argument("--jaeger-chats", type=int, default=0)
    ap.add_argument("actions", nargs="*")
    a = ap.parse_args()
    path = a.out / "control_times.json"
    times = json.loads(path.read_text()) if path.exists() else {}
    if a.collector_log:
        times["collector_log"] = wait_for_log(a.out, a.collector_log)
    for action in a.actions:
        times[action] = control(a.out, action)
    if a.jaeger_chats:
        times["jaeger_chats"] = wait_for_chats(a.jaeger_chats)
        times["jaeger_checked"] = time.time()
    path.write_text(json.dumps(times))
    return 0 if times.get("jaeger_chats", a.jaeger_chats) >= a.jaeger_chats else 1


if __name__ == "__main__":
    raise SystemExit(main())
