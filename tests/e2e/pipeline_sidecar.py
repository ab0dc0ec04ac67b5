"""The real pipeline as an e2e kit --sidecar: Jaeger v2 (memory storage)
and the OpenTelemetry Collector running collector-config/otelcol.yaml, the
shipped file, inside the scenario's network namespace.

The Collector gets the shipped config unchanged plus overrides given as
further ``--config yaml:...`` arguments: the Jaeger address (``jaeger:4317``
in the file, a loopback port here), its queue directory (``otelcol-queue``
in ``$E2E_OUTDIR``, kept across its restarts), the debug exporter of the
logs pipeline at ``detailed`` (every log record in ``collector.log``), its
own telemetry off
(Jaeger's and its internal metrics would share :8888) and what
``PIPELINE_COLLECTOR_CONFIG`` adds (a JSON list of ``yaml:`` strings, e.g.
the receivers' TLS). ``PIPELINE_COLLECTOR_CONFIG_FIRST`` (the same form)
applies to its first start only: a restarted Collector runs without it.

A scenario script stops and starts the Collector or Jaeger through control
files in ``$E2E_OUTDIR`` (``collector.stop``, ``jaeger.start``, ...), each
answered by a file (``collector.stopped``, ``jaeger.started``, ...) once
done. A restarted Jaeger starts empty (memory storage).
``prometheus.backfill`` gives Prometheus a quiet day of history: every cost
series it holds, at its present value every 5 minutes from 25 hours ago to
10 minutes ago, written into its storage with ``promtool tsdb
create-blocks-from openmetrics`` while it is stopped (the rules that compare
with yesterday need a yesterday).

Debian's Prometheus scrapes the Collector's prometheus exporter every
second, with the shipped alert rules loaded.

When the kit stops the sidecar (SIGTERM, after Hermes has exited): what
Prometheus holds then is written to ``prometheus-at-exit.json`` (every
Hermes process pushes the series it counted as it exits); then
``hermes-meter serve --drain`` (``PIPELINE_METER_CLI``) pushes what the
store holds that no Hermes process could (a Collector that refused the last
push), as a host running short processes does; once Prometheus has scraped
what it pushed and evaluated the rules a few times, what it holds is written to
``prometheus.json`` (the series' values, the rules' state, and what the
Grafana dashboard's "(time range)" panels show over a range that begins
before this sidecar started, so every series is born in it); the Collector
is stopped, which makes it export what it holds; every trace
Jaeger has for service ``hermes-agent`` is written to ``jaeger/traces.json``
(OTLP JSON, raw: no dedupe or clock adjustment); then Jaeger and Prometheus
are stopped. Their logs are ``collector.log``, ``jaeger.log``,
``prometheus.log`` and ``drain.log`` in ``$E2E_OUTDIR``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grafana_panels

OUT = Path(os.environ["E2E_OUTDIR"])
STARTED = time.time()
ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "collector-config" / "otelcol.yaml"
JAEGER_OTLP = "127.0.0.1:14317"
JAEGER_QUERY = "127.0.0.1:16686"
SERVICE = os.environ.get("OTEL_SERVICE_NAME", "hermes-agent")
PROMETHEUS = "127.0.0.1:9090"
RULES = ROOT / "collector-config" / "prometheus" / "rules"
# The series the test compares with `hermes-meter report`.
PROM_QUERIES = {
    "input_tokens": 'sum(hermes_token_usage_total{hermes_token_type="input"})',
    "output_tokens": 'sum(hermes_token_usage_total{hermes_token_type="output"})',
    "cost_usd": "sum(gen_ai_client_operation_cost_sum)",
    "llm_calls": 'sum(gen_ai_client_inference_operation_output_tokens_count{error_type=""})',
    "tool_calls": "sum(hermes_tool_calls_total)",
}

PROMETHEUS_CONFIG = f"""
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - {RULES}/*.yaml
scrape_configs:
  - job_name: otel-collector
    honor_labels: true
    static_configs:
      - targets: ["127.0.0.1:8889"]
"""

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
      level: none
    logs:
      level: info
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
          max_traces: 100000
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: {JAEGER_OTLP}
processors:
  batch:
    timeout: 200ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
"""


def _get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def _wait_for(url: str, what: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            _get(url, timeout=2)
            return
        except Exception as exc:  # noqa: BLE001 - not up yet
            if time.monotonic() > deadline:
                sys.exit(f"pipeline: {what} did not come up at {url}: {exc}")
            time.sleep(0.1)


def _start(cmd: list[str], log: Path) -> subprocess.Popen:
    # A session of its own: the kit's stop signal goes to this sidecar's
    # process group, and the order of the two shutdowns is ours.
    return subprocess.Popen(cmd, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)


def _stop(p: subprocess.Popen, seconds: float = 30.0) -> None:
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(seconds)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _traces() -> dict:
    now = datetime.now(UTC)
    fmt = "%Y-%m-%dT%H:%M:%S.%fZ"
    query = (
        f"http://{JAEGER_QUERY}/api/v3/traces?query.service_name={SERVICE}"
        f"&query.start_time_min={(now - timedelta(hours=2)).strftime(fmt)}"
        f"&query.start_time_max={(now + timedelta(minutes=5)).strftime(fmt)}"
        "&query.raw_traces=true&query.num_traces=1000"
    )
    try:
        return json.loads(_get(query, timeout=30))
    except urllib.error.HTTPError as exc:
        # Jaeger answers 404 when it holds no trace of the service.
        if exc.code == 404:
            return {"result": {"resourceSpans": []}, "status": 404}
        raise


def _prometheus_state() -> dict:
    out: dict = {"values": {}}
    for name, q in PROM_QUERIES.items():
        url = f"http://{PROMETHEUS}/api/v1/query?" + urllib.parse.urlencode({"query": q})
        result = json.loads(_get(url))["data"]["result"]
        out["values"][name] = float(result[0]["value"][1]) if result else None
    out["rules"] = json.loads(_get(f"http://{PROMETHEUS}/api/v1/rules"))["data"]
    return out


def _when(text: str) -> float:
    """Unix seconds of Prometheus's RFC 3339 time (nanoseconds cut to
    microseconds, which is what datetime reads)."""
    head, _, frac = text.rstrip("Z").partition(".")
    return datetime.fromisoformat(f"{head}.{(frac or '0')[:6]}+00:00").timestamp()


def _scraped_and_evaluated_since(t0: float, seconds: float) -> None:
    """Waits until Prometheus has scraped every target after ``t0`` and then
    evaluated every rule group on what it scraped (at most ``seconds``): a
    fixed sleep is a race on a loaded machine."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        targets = json.loads(_get(f"http://{PROMETHEUS}/api/v1/targets"))["data"]["activeTargets"]
        groups = json.loads(_get(f"http://{PROMETHEUS}/api/v1/rules"))["data"]["groups"]
        scraped = [_when(t["lastScrape"]) for t in targets if t.get("lastScrape")]
        evaluated = [_when(g["lastEvaluation"]) for g in groups if g.get("lastEvaluation")]
        if scraped and evaluated and min(scraped) > t0 and min(evaluated) > max(scraped):
            return
        time.sleep(0.2)


def _dashboard_totals() -> dict:
    """The dashboard's "(time range)" panels over a range that begins a
    minute before this sidecar started."""

    def query(expr: str) -> list[dict]:
        url = f"http://{PROMETHEUS}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        return json.loads(_get(url))["data"]["result"]

    return grafana_panels.shown(query, int(time.time() - STARTED) + 60)


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _quiet_day() -> Path:
    """The OpenMetrics file of ``prometheus.backfill``: the cost series
    Prometheus holds (waiting a little for the last run's push to be
    scraped), each at its present value."""
    url = f"http://{PROMETHEUS}/api/v1/query?" + urllib.parse.urlencode(
        {"query": "gen_ai_client_operation_cost_sum"}
    )
    deadline = time.monotonic() + 15
    while not (series := json.loads(_get(url))["data"]["result"]):
        if time.monotonic() > deadline:
            raise RuntimeError("prometheus.backfill: Prometheus holds no cost series to give a history")
        time.sleep(0.5)
    now = int(time.time())
    lines = ["# TYPE gen_ai_client_operation_cost_sum unknown"]
    for s in series:
        labels = ",".join(
            f'{k}="{_escape_label(v)}"' for k, v in sorted(s["metric"].items()) if k != "__name__"
        )
        value = s["value"][1]
        lines += [
            f"gen_ai_client_operation_cost_sum{{{labels}}} {value} {t}"
            for t in range(now - 25 * 3600, now - 600, 300)
        ]
    lines.append("# EOF")
    om = OUT / "history.om"
    om.write_text("\n".join(lines) + "\n")
    return om


def main() -> None:
    (OUT / "jaeger").mkdir(parents=True, exist_ok=True)
    jaeger_yaml = OUT / "jaeger" / "config.yaml"
    jaeger_yaml.write_text(JAEGER_CONFIG)
    jaeger_cmd = [os.environ["HERMES_METER_JAEGER"], "--config", str(jaeger_yaml)]
    jaeger = _start(jaeger_cmd, OUT / "jaeger.log")
    _wait_for(f"http://{JAEGER_QUERY}/api/v3/services", "Jaeger")
    overrides = [
        f"yaml:exporters::otlp/jaeger::endpoint: {JAEGER_OTLP}",
        f"yaml:extensions::file_storage::directory: {OUT / 'otelcol-queue'}",
        "yaml:service::telemetry::metrics::level: none",
        # Every log record in collector.log, with its trace and span id.
        "yaml:exporters::debug::verbosity: detailed",
        *json.loads(os.environ.get("PIPELINE_COLLECTOR_CONFIG", "[]")),
    ]
    cmd = [os.environ["HERMES_METER_OTELCOL"], "--config", str(CONFIG)]
    for o in overrides:
        cmd += ["--config", o]
    first = [
        a
        for o in json.loads(os.environ.get("PIPELINE_COLLECTOR_CONFIG_FIRST", "[]"))
        for a in ("--config", o)
    ]
    collector = _start(cmd + first, OUT / "collector.log")
    _wait_for("http://127.0.0.1:13133/", "the Collector's health check")
    prom_yaml = OUT / "prometheus.yml"
    prom_yaml.write_text(PROMETHEUS_CONFIG)
    prom_data = OUT / "prometheus-data"
    prom_cmd = [
        os.environ.get("PROMETHEUS", "/usr/bin/prometheus"),
        f"--config.file={prom_yaml}",
        f"--storage.tsdb.path={prom_data}",
        f"--web.listen-address={PROMETHEUS}",
    ]
    prometheus = _start(prom_cmd, OUT / "prometheus.log")
    _wait_for(f"http://{PROMETHEUS}/-/ready", "Prometheus")
    (OUT / "pipeline.ready").write_text(f"{time.time()}\n")

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    # The scenario script's control files (see the module's docstring).
    def down(what: str) -> bool:
        return (OUT / f"{what}.stopped").exists() and not (OUT / f"{what}.started").exists()

    while not stop.wait(0.2):
        for what in ("collector", "jaeger"):
            for ask, answer in ((f"{what}.stop", f"{what}.stopped"), (f"{what}.start", f"{what}.started")):
                if not (OUT / ask).exists() or (OUT / answer).exists():
                    continue
                if ask == "collector.stop":
                    _stop(collector)
                elif ask == "collector.start":
                    collector = _start(cmd, OUT / "collector.log")
                    _wait_for("http://127.0.0.1:13133/", "the restarted Collector's health check")
                elif ask == "jaeger.stop":
                    _stop(jaeger)
                else:
                    jaeger = _start(jaeger_cmd, OUT / "jaeger.log")
                    _wait_for(f"http://{JAEGER_QUERY}/api/v3/services", "the restarted Jaeger")
                (OUT / answer).write_text(f"{time.time()}\n")
        if (OUT / "prometheus.backfill").exists() and not (OUT / "prometheus.backfilled").exists():
            om = _quiet_day()
            _stop(prometheus)
            subprocess.run(
                [os.environ.get("PROMTOOL", "promtool"), "tsdb", "create-blocks-from", "openmetrics", str(om),
                 str(prom_data)],
                stdout=(OUT / "promtool.log").open("ab"),
                stderr=subprocess.STDOUT,
                check=True,
                timeout=120,
            )  # fmt: skip
            prometheus = _start(prom_cmd, OUT / "prometheus.log")
            _wait_for(f"http://{PROMETHEUS}/-/ready", "the restarted Prometheus")
            (OUT / "prometheus.backfilled").write_text(f"{time.time()}\n")
        if (collector.poll() is not None and not down("collector")) or (
            jaeger.poll() is not None and not down("jaeger")
        ):
            break
    try:
        # What Prometheus holds once the runs ended, before anything else
        # pushes: each Hermes process pushes its own series as it exits.
        # The Collector has no batch processor on metrics; a few scrapes.
        ended = time.time()
        deadline = time.monotonic() + 15
        while _prometheus_state()["values"]["llm_calls"] is None and time.monotonic() < deadline:
            time.sleep(0.5)
        # A scrape after the last Hermes process exited, then the rules
        # evaluated on it; then a scrape interval more for the Collector.
        _scraped_and_evaluated_since(ended + 1.0, 20)
        (OUT / "prometheus-at-exit.json").write_text(json.dumps(_prometheus_state()))
        drain = subprocess.run(
            [os.environ["PIPELINE_METER_CLI"], "serve", "--drain", "--drain-timeout-seconds", "20"],
            stdout=(OUT / "drain.log").open("ab"),
            stderr=subprocess.STDOUT,
            timeout=60,
        )
        (OUT / "drain.rc").write_text(f"{drain.returncode}\n")
        # A few more scrapes and rule evaluations.
        drained = time.time()
        deadline = time.monotonic() + 30
        while _prometheus_state()["values"]["llm_calls"] is None and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(1.0)
        _scraped_and_evaluated_since(drained + 1.0, 30)
        (OUT / "prometheus.json").write_text(
            json.dumps(_prometheus_state() | {"dashboard": _dashboard_totals()})
        )
        _stop(collector)
        (OUT / "collector.rc").write_text(f"{collector.returncode}\n")
        # Jaeger's own batch (200 ms) into its memory store.
        time.sleep(1.0)
        (OUT / "jaeger" / "traces.json").write_text(json.dumps(_traces()))
    finally:
        _stop(jaeger)
        _stop(prometheus)


if __name__ == "__main__":
    main()
