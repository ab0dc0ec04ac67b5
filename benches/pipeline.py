"""Through the real Collector and Jaeger: how soon a span is visible after its
hook, and how fast a backlog drains after an outage.

    python benches/pipeline.py [--tools target/tools/bin] [--sessions 300] [--rate 4]
                               [--spans 1000000] [--only latency|backlog]

Run it with a Python that has the hermes-meter wheel and its console script
(``target/py/hermes-venv/bin/python`` after ``scripts/test-python.sh``), and
the Collector and Jaeger that ``scripts/build-otel-tools.sh`` builds. Both
start here on loopback: the Collector with the shipped
``collector-config/otelcol.yaml`` (only Jaeger's address, its queue
directory and its own telemetry port changed), Jaeger v2 with memory
storage.

1. **Latency, steady state, the plugin's defaults.** The plugin is
   registered as Hermes registers it, with only
   ``OTEL_EXPORTER_OTLP_ENDPOINT`` set; sessions of the recorded ``readfile``
   fixture (one turn: two chat calls and a tool call, 5 spans) are played
   through its hooks at ``--rate`` sessions a second. A span's latency is
   the time from its session's last hook to the first time Jaeger's query
   API (polled every 100 ms) returns it. Prints p50 / p99 / max and any span
   that never showed.

2. **Catch-up after an outage.** ``--spans`` worth of ``readfile`` sessions
   (a 100-agent hour is about 1,000,000 spans) are recorded into a store
   while no collector runs, as agents record during an outage
   (``hermes-meter replay``, their large texts cut: content is not
   exported by default); then the Collector and Jaeger start and
   ``hermes-meter serve --drain`` sends the backlog with the defaults.
   Prints when the store had handed everything to the Collector, when
   Jaeger had written every span (its own count), the rate of each, and
   whether any span was lost or refused on the way.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "readfile.jsonl"
FIXTURE_SESSION = "20261130_013735_bf4b63"
SPANS_PER_SESSION = 5
JAEGER_QUERY = "127.0.0.1:16686"
JAEGER_OTLP = "127.0.0.1:14317"
JAEGER_METRICS = 18888
COLLECTOR_METRICS = 18889
SERVICE = "hermes-agent"

JAEGER_CONFIG = f"""
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    resource:
      service.name: jaeger
    metrics:
      level: basic
      readers:
        - pull:
            exporter:
              prometheus:
                host: 127.0.0.1
                port: {JAEGER_METRICS}
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: {JAEGER_QUERY}
    grpc:
      endpoint: 127.0.0.1:16685
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 1000000
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: {JAEGER_OTLP}
processors:
  batch:
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
"""


def _get(url: str, timeout: float = 10.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def _wait_for(url: str, what: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            _get(url, timeout=2)
            return
        except (OSError, urllib.error.URLError):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not come up at {url}") from None
            time.sleep(0.2)


def _counter(port: int, name: str, **labels: str) -> float:
    """Sum of a counter in a component's own Prometheus telemetry."""
    text = _get(f"http://127.0.0.1:{port}/metrics").decode()
    total = 0.0
    for line in text.splitlines():
        m = re.match(rf"^{name}(?:_total)?\{{([^}}]*)\}} (\S+)", line)
        if not m:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(m.group(2))
    return total


class Stack:
    """Jaeger and the Collector, started on loopback, stopped on exit."""

    def __init__(self, tools: Path, work: Path) -> None:
        self.tools, self.work = tools, work
        self.procs: list[subprocess.Popen] = []

    def start(self) -> None:
        jaeger_yaml = self.work / "jaeger.yaml"
        jaeger_yaml.write_text(JAEGER_CONFIG)
        self._run([str(self.tools / "jaeger"), "--config", str(jaeger_yaml)], "jaeger.log")
        _wait_for(f"http://{JAEGER_QUERY}/api/v3/services", "Jaeger")
        overrides = [
            f"yaml:exporters::otlp/jaeger::endpoint: {JAEGER_OTLP}",
            f"yaml:extensions::file_storage::directory: {self.work / 'otelcol-queue'}",
            "yaml:service::telemetry::metrics::readers: "
            f"[{{pull: {{exporter: {{prometheus: {{host: 127.0.0.1, port: {COLLECTOR_METRICS}}}}}}}}}]",
        ]
        cmd = [
            str(self.tools / "otelcol-hermes-meter"),
            "--config",
            str(ROOT / "collector-config" / "otelcol.yaml"),
        ]
        for o in overrides:
            cmd += ["--config", o]
        self._run(cmd, "collector.log")
        _wait_for("http://127.0.0.1:13133/", "the Collector")

    def _run(self, cmd: list[str], log: str) -> None:
        out = (self.work / log).open("ab")
        self.procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT))

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []


def _fixture_lines() -> list[dict]:
    """The fixture's hook calls in order, their large texts cut."""
    recs = [json.loads(x) for x in FIXTURE.read_text().splitlines() if x.strip()]
    recs.sort(key=lambda r: (r["t"], r["pid"], r["seq"]))
    for r in recs:
        r.pop("kw_types", None)
        kw = r["kwargs"]
        for k, v in list(kw.items()):
            if isinstance(v, list) and len(json.dumps(v)) > 256:
                kw[k] = []
            elif isinstance(v, dict) and k != "usage" and len(json.dumps(v)) > 1024:
                kw[k] = {}
            elif isinstance(v, str) and len(v) > 256:
                kw[k] = v[:256]
    return recs


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def latency(stack: Stack, work: Path, sessions: int, rate: float) -> None:
    os.environ["HERMES_METER_HOME"] = str(work / "latency-meter")
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:4317"
    import hermes_meter  # noqa: PLC0415 - after the environment it reads

    class Ctx:
        hooks: dict = {}

        def register_hook(self, name, cb):
            self.hooks[name] = cb

        def __getattr__(self, name):
            return lambda *a, **k: None

    ctx = Ctx()
    hermes_meter.register(ctx)
    recs = _fixture_lines()
    ended: dict[str, float] = {}
    seen: dict[str, float] = {}
    started = time.time()
    stop = threading.Event()

    def poll() -> None:
        fmt = "%Y-%m-%dT%H:%M:%S.%fZ"
        t_min = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(started - 60))
        while not stop.is_set():
            t_max = time.strftime(fmt.replace(".%f", ".000000"), time.gmtime(time.time() + 300))
            q = urllib.parse.urlencode(
                {
                    "query.service_name": SERVICE,
                    "query.start_time_min": t_min,
                    "query.start_time_max": t_max,
                    "query.num_traces": str(sessions * 2),
                    "query.raw_traces": "true",
                }
            )
            try:
                data = json.loads(_get(f"http://{JAEGER_QUERY}/api/v3/traces?{q}", timeout=30))
            except urllib.error.HTTPError:
                data = {"result": {"resourceSpans": []}}
            now = time.time()
            for rs in data["result"]["resourceSpans"]:
                for ss in rs["scopeSpans"]:
                    for s in ss["spans"]:
                        seen.setdefault(s["spanId"] + "|" + s["traceId"], now)
            stop.wait(0.1)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    by_trace: dict[str, str] = {}
    for n in range(sessions):
        sid = f"{FIXTURE_SESSION}-lat{n:05d}"
        t0 = time.monotonic()
        for r in recs:
            kwargs = json.loads(json.dumps(r["kwargs"]).replace(FIXTURE_SESSION, sid))
            cb = ctx.hooks.get(r["hook"])
            if cb is not None:
                cb(**kwargs)
        ended[sid] = time.time()
        time.sleep(max(0.0, 1.0 / rate - (time.monotonic() - t0)))
    deadline = time.time() + 60
    while len(seen) < sessions * SPANS_PER_SESSION and time.time() < deadline:
        time.sleep(0.2)
    stop.set()
    poller.join()
    # Each trace is one session's; which one, from its root's conversation id.
    fmt_q = urllib.parse.urlencode(
        {
            "query.service_name": SERVICE,
            "query.start_time_min": time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(started - 60)),
            "query.start_time_max": time.strftime(
                "%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(time.time() + 300)
            ),
            "query.num_traces": str(sessions * 2),
            "query.raw_traces": "true",
        }
    )
    data = json.loads(_get(f"http://{JAEGER_QUERY}/api/v3/traces?{fmt_q}", timeout=60))
    for rs in data["result"]["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for s in ss["spans"]:
                attrs = {a["key"]: next(iter(a["value"].values())) for a in s.get("attributes", [])}
                if "gen_ai.conversation.id" in attrs and not s.get("parentSpanId"):
                    by_trace[s["traceId"]] = attrs["gen_ai.conversation.id"]
    lat = []
    for key, t in seen.items():
        sid = by_trace.get(key.split("|")[1])
        if sid in ended:
            lat.append(t - ended[sid])
    expected = sessions * SPANS_PER_SESSION
    print(f"latency: {sessions} sessions at {rate}/s, {expected} spans; {len(lat)} seen in Jaeger")
    if lat:
        print(
            f"  session's last hook -> span in Jaeger's query API: p50 {statistics.median(lat):.2f} s, "
            f"p99 {_pct(lat, 0.99):.2f} s, max {max(lat):.2f} s"
        )
    if len(lat) < expected:
        print(f"  NOT SEEN within 60 s of the last session: {expected - len(lat)} spans")
    hermes_meter._native.flush(10.0)


def backlog(stack: Stack, work: Path, spans: int) -> None:
    cli = Path(sys.executable).parent / "hermes-meter"
    home = work / "backlog-meter"
    sessions = spans // SPANS_PER_SESSION
    recs = _fixture_lines()
    jsonl = work / "backlog.jsonl"
    with jsonl.open("w") as f:
        for n in range(sessions):
            sid = f"{FIXTURE_SESSION}-bl{n:07d}"
            for r in recs:
                f.write(json.dumps(r).replace(FIXTURE_SESSION, sid) + "\n")
    t0 = time.monotonic()
    subprocess.run(
        [str(cli), "--home", str(home), "replay", str(jsonl)], check=True, stdout=subprocess.DEVNULL
    )
    jsonl.unlink()
    print(f"backlog: {sessions} sessions recorded during the outage in {time.monotonic() - t0:.0f} s")
    status = json.loads(
        subprocess.run(
            [str(cli), "--home", str(home), "status", "--json"], check=True, capture_output=True, text=True
        ).stdout
    )
    pending = int(status["export"]["pending"])
    stack.start()
    env = dict(os.environ, OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:4317", HERMES_METER_HOME=str(home))
    t_start = time.monotonic()
    drain = subprocess.Popen(
        [str(cli), "serve", "--drain", "--drain-timeout-seconds", "1800"],
        env=env,
        stdout=(work / "drain.log").open("ab"),
        stderr=subprocess.STDOUT,
    )
    samples = []
    t_drained = None
    while True:
        now = time.monotonic() - t_start
        accepted = _counter(COLLECTOR_METRICS, "otelcol_receiver_accepted_spans")
        refused = _counter(COLLECTOR_METRICS, "otelcol_receiver_refused_spans")
        stored = _counter(JAEGER_METRICS, "otelcol_exporter_sent_spans", exporter="jaeger_storage_exporter")
        samples.append((now, accepted, refused, stored))
        if t_drained is None and drain.poll() is not None:
            t_drained = now
        if t_drained is not None and stored >= pending:
            break
        if now > 1800:
            print("  gave up after 30 minutes")
            break
        time.sleep(1.0)
    t_stored = samples[-1][0]
    _, accepted, refused, stored = samples[-1]
    print(
        f"  store -> Collector: every span handed over after {t_drained:.1f} s (drain rc {drain.returncode})"
    )
    print(f"  Collector -> Jaeger: {stored:.0f} of {pending} spans written after {t_stored:.1f} s")
    print(
        f"  rates: {accepted / max(t_drained, 1e-9):,.0f} spans/s into the Collector, "
        f"{stored / max(t_stored, 1e-9):,.0f} spans/s into Jaeger; "
        f"refused by the Collector {refused:.0f} (sent again), pending at start {pending}"
    )
    (work / "backlog-samples.json").write_text(json.dumps(samples))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tools", type=Path, default=ROOT / "target" / "tools" / "bin")
    ap.add_argument("--sessions", type=int, default=300)
    ap.add_argument("--rate", type=float, default=4.0)
    ap.add_argument("--spans", type=int, default=1_000_000)
    ap.add_argument("--only", choices=("latency", "backlog"))
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hermes-meter-pipeline-bench-"))
    try:
        if args.only != "backlog":
            stack = Stack(args.tools, work / "latency")
            (work / "latency").mkdir()
            stack.start()
            try:
                latency(stack, work, args.sessions, args.rate)
            finally:
                stack.stop()
        if args.only != "latency":
            (work / "backlog").mkdir()
            stack = Stack(args.tools, work / "backlog")
            try:
                backlog(stack, work / "backlog", args.spans)
            finally:
                stack.stop()
    finally:
        if os.environ.get("KEEP") != "1":
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept {work}")


if __name__ == "__main__":
    main()
