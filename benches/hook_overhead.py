"""Hook overhead: each registered hermes-meter callable, timed from Python.

Replays every recorded fixture (tests/fixtures/*.jsonl) through the native
hook callables that ``hermes_meter.register`` hands Hermes, in the same run
as two baselines called with the same kwargs:

- ``noop``: a Python hook that returns None;
- ``jsonl``: a Python hook that appends one JSON line to a file (what a
  simple recording plugin such as the e2e kit's probe does).

Each round uses fresh session ids so every call is a real insert, not a
duplicate. Times include the store write as a hook makes it: the append to
the spool file, after which the event survives a crash; the writer thread
commits it to SQLite meanwhile (a gating hook that needs a verdict waits
for that commit, up to HERMES_METER_HOOK_WAIT_MS).

    python benches/hook_overhead.py [--rounds N] [--threads T] [--budget|--rolling|--rate|--caps]
        [--runaway-stop]

``--budget`` sets a global daily budget far above what the run spends, and
prices the fixtures' model (a budget over unpriced calls cannot be told
apart from no spend): gating hooks then get (quick) verdicts, and the
calls that wait for one or may carry spend are decoded on the hook thread,
so the gate sees them at once. ``--rolling`` sets the same budget as a
rolling 5-hour window and a 7-day one instead (what a plan meters), to be
compared with ``--budget``. ``--rate`` adds a global rate limit far above
the run's rate (``requests_per_minute``) to ``--budget``'s daily budget:
every request then waits for its verdict. ``--caps`` sets five budgets (global daily,
weekly and monthly, a per-model and a per-profile default) and caps on every
session (USD) and run (tool calls), all far from their limits.
``--runaway-stop`` adds ``[runaway] action = "stop"``: every tool call and
LLM request then waits for the runaway watch, i.e. for its commit.

Prints p50/p99 (microseconds) per hook kind and the RSS the plugin added.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Hermes's modules a running Hermes process has loaded when the plugin
#: registers (the agent, its auxiliary client and pricing, the plugin and
#: middleware machinery, cron, the sender).
HERMES_MODULES = (
    "run_agent",
    "agent.aux_accounting",
    "agent.auxiliary_client",
    "agent.model_metadata",
    "agent.usage_pricing",
    "hermes_cli.plugins",
    "hermes_cli.middleware",
    "hermes_constants",
    "cron.jobs",
    "tools.send_message_tool",
)


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def load_rounds(rounds: int) -> list[list[tuple[str, dict]]]:
    """`rounds` copies of all fixture records, each copy with its own ids."""
    texts = [p.read_text() for p in sorted((ROOT / "tests" / "fixtures").glob("*.jsonl"))]
    out = []
    for n in range(rounds):
        calls = []
        for text in texts:
            recs = [json.loads(line) for line in text.splitlines() if line.strip()]
            ids = {
                r["kwargs"][k]
                for r in recs
                for k in ("session_id", "parent_session_id", "child_session_id")
                if isinstance(r["kwargs"].get(k), str)
            }
            t = text
            for sid in sorted(ids, key=len, reverse=True):
                t = t.replace(sid, f"{sid}-b{n}")
            recs = [json.loads(line) for line in t.splitlines() if line.strip()]
            recs.sort(key=lambda r: (r["t"], r["pid"], r["seq"]))
            calls += [(r["hook"], r["kwargs"]) for r in recs]
        out.append(calls)
    return out


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--threads", type=int, default=1, help="call from this many threads at once")
    ap.add_argument("--budget", action="store_true", help="with a budget set (far from its limit)")
    ap.add_argument(
        "--rolling", action="store_true", help="with rolling 5h and 7d budgets set (far from their limits)"
    )
    ap.add_argument(
        "--rate", action="store_true", help="with a daily budget and a rate limit set (far from both)"
    )
    ap.add_argument("--caps", action="store_true", help="with five budgets and session/run caps set")
    ap.add_argument("--runaway-stop", action="store_true", help='with [runaway] action = "stop"')
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="hermes-meter-bench-", suffix=f"-{os.getpid()}"))
    os.environ.setdefault("HERMES_METER_HOME", str(tmp / "meter"))
    if args.budget or args.rolling or args.rate or args.caps or args.runaway_stop:
        home = Path(os.environ["HERMES_METER_HOME"])
        home.mkdir(parents=True, exist_ok=True)
        budgets = "[global]\ndaily = 1000000\n" if args.budget else ""
        if args.rolling:
            budgets = "[global]\n5h = 1000000\n7d = 5000000\n"
        if args.rate:
            budgets = "[global]\ndaily = 1000000\nrequests_per_minute = 100000000\n"
        if args.caps:
            budgets = (
                "[global]\ndaily = 1000000\nweekly = 5000000\nmonthly = 20000000\n"
                "[per_model.default]\ndaily = 1000000\n[per_profile.default]\ndaily = 1000000\n"
                "[per_session]\nusd = 1000000\n[per_run]\ntool_calls = 1000000\n"
            )
        if args.runaway_stop:
            budgets += '[runaway]\naction = "stop"\n'
        (home / "budgets.toml").write_text(budgets)
        (home / "pricing.toml").write_text('[models."mock-model"]\ninput = 1.0\noutput = 2.0\n')
    rounds = load_rounds(args.rounds)
    jsonl_file = open(tmp / "hooks.jsonl", "a")  # noqa: SIM115
    lock = threading.Lock()

    def noop(**kwargs):
        return None

    def jsonl(hook_name: str):
        def append(**kwargs):
            line = json.dumps({"hook": hook_name, "t": time.time(), "kwargs": kwargs}, default=repr)
            with lock:
                jsonl_file.write(line + "\n")
                jsonl_file.flush()

        return append

    # A running Hermes has its agent and these modules loaded before any
    # plugin registers; the plugin reads them (its integration check, the
    # auxiliary-call and pricing hooks), so importing them here first keeps
    # the RSS below what the plugin itself adds to a Hermes process, not
    # what Hermes weighs.
    for module in HERMES_MODULES:
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 - a module this Hermes lacks weighs nothing
            pass
    rss_before = rss_kib()
    import hermes_meter  # noqa: PLC0415 - measured: the import is part of the RSS added

    class Ctx:
        hooks: dict = {}

        def register_hook(self, name, cb):
            self.hooks[name] = cb

        def register_cli_command(self, *a, **k):
            pass

        def register_command(self, *a, **k):
            pass

    ctx = Ctx()
    hermes_meter.register(ctx)
    ours = ctx.hooks
    baselines = {name: jsonl(name) for name in ours}
    times: dict[tuple[str, str], list[float]] = defaultdict(list)
    clock = time.perf_counter_ns

    def worker(calls: list[tuple[str, dict]]) -> None:
        local: dict[tuple[str, str], list[float]] = defaultdict(list)
        for i, (hook, kwargs) in enumerate(calls):
            if hook not in ours:
                continue
            order = [("noop", noop), ("jsonl", baselines[hook]), ("hermes-meter", ours[hook])]
            # Rotate who goes first so no variant always gets the warm cache.
            order = order[i % 3 :] + order[: i % 3]
            for label, fn in order:
                t0 = clock()
                fn(**kwargs)
                local[(label, hook)].append((clock() - t0) / 1000.0)
        with lock:
            for k, v in local.items():
                times[k] += v

    started = time.time()
    chunks = [rounds[i :: args.threads] for i in range(args.threads)]
    threads = [threading.Thread(target=lambda c=c: [worker(r) for r in c]) for c in chunks if c]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.time() - started
    hermes_meter._native.flush(10.0)
    rss_after = rss_kib()

    stats = hermes_meter._native.stats()
    wait = os.environ.get("HERMES_METER_HOOK_WAIT_MS", "100 (default)")
    budget = "none"
    if args.caps:
        budget = "five and caps"
    elif args.budget:
        budget = "set"
    elif args.rolling:
        budget = "rolling 5h and 7d"
    elif args.rate:
        budget = "set, and a rate limit"
    if args.runaway_stop:
        budget += ", runaway action stop"
    print(
        f"hook overhead: {args.rounds} rounds of all fixtures, {args.threads} thread(s), "
        f"hook_wait_ms={wait}, budget {budget}, {elapsed:.1f} s"
    )
    print(
        f"store: {stats['committed']} events in {stats['batches']} transactions "
        f"(largest {stats['largest_batch']}), timed out {stats['timed_out']}"
    )
    print()
    header = f"{'hook':<22}{'calls':>7}  " + "  ".join(
        f"{label + ' p50/p99':>22}" for label in ("noop", "jsonl", "hermes-meter")
    )
    print(header)
    print("-" * len(header))
    all_ours = []
    for hook in ours:
        row = times.get(("hermes-meter", hook), [])
        if not row:
            continue
        all_ours += row
        cells = []
        for label in ("noop", "jsonl", "hermes-meter"):
            xs = times[(label, hook)]
            cells.append(f"{pct(xs, 0.5):>9.1f} /{pct(xs, 0.99):>9.1f} µs")
        print(f"{hook:<22}{len(row):>7}  " + "  ".join(f"{c:>22}" for c in cells))
    print("-" * len(header))
    print(
        f"{'all hooks':<22}{len(all_ours):>7}  hermes-meter p50 {pct(all_ours, 0.5):.1f} µs, "
        f"p99 {pct(all_ours, 0.99):.1f} µs, mean {statistics.fmean(all_ours):.1f} µs"
    )
    print(
        f"RSS added by import + register + the run: {(rss_after - rss_before) / 1024:.1f} MiB "
        f"({rss_before / 1024:.1f} -> {rss_after / 1024:.1f} MiB)"
    )


if __name__ == "__main__":
    try:
        main()
    finally:
        # The run's store and JSON-lines baseline (~280 MB): not worth keeping.
        for leftover in Path(tempfile.gettempdir()).glob(f"hermes-meter-bench-*-{os.getpid()}"):
            shutil.rmtree(leftover, ignore_errors=True)
