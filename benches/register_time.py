"""How long `register()` takes, in a fresh process each time, the way Hermes
calls it: Hermes's own plugin module loaded first (`hermes_cli.plugins`),
then `hermes_meter.register(ctx)` timed on its own (the package import
aside, which Hermes times separately as the plugin's import). Each run
uses a store of its own, new (the first run of a machine) or already made.

    python benches/register_time.py [RUNS]     (with Hermes's Python)

Prints p50 / p99 / max in milliseconds for both cases; the figures go to
benches/results.tsv by hand.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, time
import hermes_cli.plugins  # what calls register() in Hermes
import hermes_meter
class Ctx:
    profile_name = "default"
    def register_hook(self, *a): pass
    def register_middleware(self, *a): pass
    def register_cli_command(self, *a, **k): pass
    def register_command(self, *a, **k): pass
t0 = time.perf_counter()
hermes_meter.register(Ctx())
print(json.dumps({"ms": (time.perf_counter() - t0) * 1000}))
"""


def run(store: str) -> float:
    env = {"HERMES_METER_HOME": store, "HERMES_HOME": store + "-home", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["ms"]


def summary(ms: list[float]) -> str:
    ms = sorted(ms)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    return f"p50 {statistics.median(ms):.1f} ms, p99 {p99:.1f} ms, max {ms[-1]:.1f} ms"


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    with tempfile.TemporaryDirectory() as d:
        fresh = [run(f"{d}/fresh{i}") for i in range(runs)]
        existing = [run(f"{d}/existing") for _ in range(runs)]
    print(f"register(), new store: {summary(fresh)}")
    print(f"register(), existing store: {summary(existing)}")


if __name__ == "__main__":
    main()
