"""The real pipeline: Hermes 0.19.0 with the plugin → the OpenTelemetry
Collector running the shipped ``collector-config/otelcol.yaml`` → Jaeger v2,
read back through Jaeger's query API.

Both are built from their Go modules by ``scripts/build-otel-tools.sh``
(``HERMES_METER_OTELCOL``, ``HERMES_METER_JAEGER`` name other builds) and run
by ``pipeline_sidecar.py`` inside the scenario's loopback-only namespace.
Each run is one kit scenario over one transport: every scenario over gRPC
with the plugin's defaults (no variable set at all), then HTTP/protobuf with
gzip, gRPC and HTTP with mutual TLS, a gateway whose Collector stops for
30 s, a Collector restarted while its on-disk queue holds what Jaeger,
stopped, has not taken, one whose full queue refuses requests, and one
over its memory limit (RESOURCE_EXHAUSTED over gRPC, 429 over HTTP).
Jaeger must hold every span the store's own ``hermes-meter trace`` shows,
once, with the same ids, parents and names.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import grafana_panels
import pytest
from conftest import KIT, PLUGIN_KEY, ROOT, SCENARIOS

TOOLS = ROOT / "target" / "tools" / "bin"
OTELCOL = Path(os.environ.get("HERMES_METER_OTELCOL", TOOLS / "otelcol-hermes-meter"))
JAEGER = Path(os.environ.get("HERMES_METER_JAEGER", TOOLS / "jaeger"))
SIDECAR = Path(__file__).parent / "pipeline_sidecar.py"
CLI = Path(sys.executable).parent / "hermes-meter"


def _certs(d: Path) -> dict[str, Path]:
    """A CA, a server certificate for localhost and 127.0.0.1, and a client
    certificate, all signed by the CA."""
    d.mkdir(parents=True, exist_ok=True)

    def ossl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d)

    ossl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=e2e-ca",
         "-keyout", "ca.key", "-out", "ca.pem")  # fmt: skip
    for name, ext in [
        ("server", "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth"),
        ("client", "extendedKeyUsage=clientAuth"),
    ]:
        (d / f"{name}.ext").write_text(ext + "\n")
        ossl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", f"{name}.key",
             "-out", f"{name}.csr")  # fmt: skip
        ossl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.pem")  # fmt: skip
    return {n: d / n for n in ("ca.pem", "server.pem", "server.key", "client.pem", "client.key")}


# The memory_limiter extension as the OTLP receiver's middleware (gRPC and
# HTTP), with a limit below what any Collector uses: from its first check
# (every 100 ms) it refuses every request. The limiter answers gRPC with
# RESOURCE_EXHAUSTED and no RetryInfo, HTTP with 429 and no Retry-After
# (core's memorylimiterextension, memorylimiter.go).
MEMORY_LIMITED = [
    "yaml:extensions::memory_limiter::check_interval: 100ms",
    "yaml:extensions::memory_limiter::limit_mib: 1",
    "yaml:service::extensions: [health_check, file_storage, memory_limiter]",
    "yaml:receivers::otlp::protocols::grpc::middlewares: [{id: memory_limiter}]",
    "yaml:receivers::otlp::protocols::http::middlewares: [{id: memory_limiter}]",
]


def _transports(certs: dict[str, Path]) -> dict[str, tuple[list[str], list[str], list[str]]]:
    """name: (the plugin's environment, the Collector's config overrides,
    overrides of its first start only)."""
    server_tls = json.dumps(
        {
            "cert_file": str(certs["server.pem"]),
            "key_file": str(certs["server.key"]),
            "client_ca_file": str(certs["ca.pem"]),
        }
    )
    client_tls = [
        f"OTEL_EXPORTER_OTLP_CERTIFICATE={certs['ca.pem']}",
        f"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE={certs['client.pem']}",
        f"OTEL_EXPORTER_OTLP_CLIENT_KEY={certs['client.key']}",
    ]
    return {
        # A user's one setting: the endpoint (gRPC, the default protocol).
        "grpc": (["OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4317"], [], []),
        "http_gzip": (
            [
                "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
                "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318",
                "OTEL_EXPORTER_OTLP_COMPRESSION=gzip",
            ],
            [],
            [],
        ),
        # One span per request into a Collector whose exporter queue takes one
        # request beside the one its single consumer retries.
        "grpc_queue1": (
            ["OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4317", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE=1"],
            [
                "yaml:exporters::otlp/jaeger::sending_queue::queue_size: 1",
                "yaml:exporters::otlp/jaeger::sending_queue::num_consumers: 1",
            ],
            [],
        ),
        # Over its memory limit until it is restarted; the plugin's defaults.
        "grpc_memory_limited": (["OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4317"], [], MEMORY_LIMITED),
        "http_memory_limited": (
            [
                "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
                "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318",
            ],
            [],
            MEMORY_LIMITED,
        ),
        "grpc_mtls": (
            ["OTEL_EXPORTER_OTLP_ENDPOINT=https://localhost:4317", *client_tls],
            [f"yaml:receivers::otlp::protocols::grpc::tls: {server_tls}"],
            [],
        ),
        "https_mtls": (
            [
                "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
                "OTEL_EXPORTER_OTLP_ENDPOINT=https://localhost:4318",
                "OTEL_EXPORTER_OTLP_COMPRESSION=gzip",
                *client_tls,
            ],
            [f"yaml:receivers::otlp::protocols::http::tls: {server_tls}"],
            [],
        ),
    }


# Scenarios whose Hermes run fails on purpose (every attempt fails, or the
# model does not exist): no call succeeds, Hermes exits 1.
FAILING = ("failalways", "model404")

# (run name, scenario, transport): every kit scenario over the plugin's
# defaults, then the other transports and the outage.
RUNS = [(f"grpc_{s}", s, "grpc") for s in SCENARIOS] + [
    ("http_gzip_readfile", "readfile", "http_gzip"),
    ("grpc_mtls_readfile", "readfile", "grpc_mtls"),
    ("https_mtls_readfile", "readfile", "https_mtls"),
    # `hermes -z`, as a script or system cron job runs it.
    ("grpc_oneshot", "custom:oneshot.sh", "grpc"),
    # `chat -q` exiting while Hermes still asks the model for the session's
    # title (answered 3 s late): the run's metrics must hold that call too.
    ("grpc_slow_title", "custom:slow_title.sh", "grpc"),
    # A budget at its hard line and a cost spike over a quiet day, for the
    # shipped alert rules.
    ("grpc_alerts", "custom:alerts.sh", "grpc"),
    # The gateway, with the Collector stopped for 30 s after its first turn.
    ("grpc_gateway_outage", "custom:gateway_outage.sh", "grpc"),
    # The Collector restarted while its queue holds what Jaeger has not taken.
    ("grpc_collector_restart", "custom:collector_restart.sh", "grpc"),
    # The Collector's queue full while Jaeger is down (it refuses requests),
    # then the Collector restarted with it.
    ("grpc_queue_full", "custom:collector_queue_full.sh", "grpc_queue1"),
    # The Collector over its memory limit refuses everything (gRPC
    # RESOURCE_EXHAUSTED, HTTP 429) while Hermes runs, then is restarted
    # without the limit.
    ("grpc_memory_limited", "custom:collector_memory_limited.sh", "grpc_memory_limited"),
    ("http_memory_limited", "custom:collector_memory_limited.sh", "http_memory_limited"),
]


# HERMES_METER_E2E_PIPELINE_RUNS=name,name runs only those (while working on
# one; the tests of the others are skipped).
_ONLY = {n for n in os.environ.get("HERMES_METER_E2E_PIPELINE_RUNS", "").split(",") if n}
if _ONLY:
    RUNS = [r for r in RUNS if r[0] in _ONLY]


def _run(pipeline_runs: dict[str, Path], name: str) -> Path:
    """The output of run ``name``; skipped when the runs were narrowed."""
    if name not in pipeline_runs:
        pytest.skip(f"{name} not among HERMES_METER_E2E_PIPELINE_RUNS")
    return pipeline_runs[name]


@pytest.fixture(scope="module")
def pipeline_runs(hermes_bin: Path, tmp_path_factory) -> dict[str, Path]:
    for tool in (OTELCOL, JAEGER):
        assert tool.is_file(), f"{tool} missing: run scripts/build-otel-tools.sh"
    root = tmp_path_factory.mktemp("pipeline")
    transports = _transports(_certs(root / "certs"))

    def one(run: tuple[str, str, str]) -> tuple[str, Path, subprocess.CompletedProcess]:
        name, scenario, transport = run
        env_vars, collector_config, collector_first = transports[transport]
        outdir = root / name
        # Priced (examples/pricing.toml prices the mock's model), so costs
        # are compared too.
        meter = _meter(outdir)
        meter.mkdir(mode=0o700)
        shutil.copy(ROOT / "examples" / "pricing.toml", meter / "pricing.toml")
        env = dict(
            os.environ,
            HERMES_BIN=str(hermes_bin),
            E2E_PYTHON=sys.executable,
            E2E_SIDECAR_READY="pipeline.ready",
            HERMES_METER_OTELCOL=str(OTELCOL),
            HERMES_METER_JAEGER=str(JAEGER),
            PIPELINE_COLLECTOR_CONFIG=json.dumps(collector_config),
            PIPELINE_COLLECTOR_CONFIG_FIRST=json.dumps(collector_first),
            PIPELINE_METER_CLI=str(CLI),
        )
        script = []
        if scenario.startswith("custom:"):
            script = ["--script", str(Path(__file__).parent / "scripts" / scenario.split(":", 1)[1])]
            scenario = "custom"
        cmd = ["bash", str(KIT / "run-scenario.sh"), scenario, str(outdir), "--enable", PLUGIN_KEY, *script]
        # Hermes 0.22's failalways waits out its recovery cycles (~5 min).
        cmd += ["--timeout", "600"]
        cmd += ["--env", f"HERMES_METER_HOME={meter}"]
        for kv in env_vars:
            cmd += ["--env", kv]
        cmd += ["--sidecar", f'"$E2E_PYTHON" {SIDECAR}']
        return name, outdir, subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)

    # Each run has a network namespace of its own, so they share no port.
    # The outage run (the longest) first.
    jobs = int(os.environ.get("HERMES_METER_E2E_JOBS", "4"))
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        done = list(pool.map(one, sorted(RUNS, key=lambda r: "outage" not in r[0])))
    for name, _, p in done:
        assert p.returncode == 0, f"{name}: {p.stderr}"
    return {name: outdir for name, outdir, _ in done}


def _meter(outdir: Path) -> Path:
    """The run's store directory (beside OUTDIR: the kit wants it empty)."""
    return outdir.parent / f"{outdir.name}-meter"


def _jaeger_spans(outdir: Path) -> list[dict]:
    data = json.loads((outdir / "jaeger" / "traces.json").read_text())
    spans = []
    for rs in data["result"]["resourceSpans"]:
        resource = _attrs(rs["resource"])
        for ss in rs["scopeSpans"]:
            for s in ss["spans"]:
                s["_resource"] = resource
                spans.append(s)
    return spans


def _attrs(span: dict) -> dict:
    out = {}
    for a in span.get("attributes", []):
        v = a["value"]
        out[a["key"]] = next(iter(v.values())) if v else None
    return out


def _is_aux(span: dict) -> bool:
    """An auxiliary call's chat span (Hermes 0.22 titles every chat)."""
    return "hermes.llm.aux_task" in _attrs(span)


def _hex(span_or_trace_id: str) -> str:
    # OTLP/JSON carries ids as hex; `hermes-meter trace` prints lower case.
    return span_or_trace_id.lower()


def _store_spans(outdir: Path) -> dict[str, tuple[str, str | None, str]]:
    conn = sqlite3.connect(f"file:{_meter(outdir) / 'hermes-meter.db'}?mode=ro", uri=True)
    try:
        sessions = [r[0] for r in conn.execute("SELECT DISTINCT session_id FROM runs")]
    finally:
        conn.close()
    env = dict(os.environ, HERMES_METER_HOME=str(_meter(outdir)))
    spans: dict[str, tuple[str, str | None, str]] = {}

    def walk(node: dict) -> None:
        spans[node["span_id"]] = (node["trace_id"], node["parent_span_id"], node["name"])
        for child in node.get("children", []):
            walk(child)

    for sid in sessions:
        p = subprocess.run([str(CLI), "trace", sid, "--json"], env=env, capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        walk(json.loads(p.stdout)["root"])
    return spans


@pytest.mark.parametrize("name", [r[0] for r in RUNS])
def test_jaeger_holds_each_trace_whole_once_as_the_store_has_it(pipeline_runs, name):
    outdir = pipeline_runs[name]
    if not any(name.endswith(f) for f in FAILING):
        assert (outdir / "rc").read_text().strip() == "0", (outdir / "stderr").read_text()[-2000:]
    assert (outdir / "collector.rc").read_text().strip() == "0", (outdir / "collector.log").read_text()[
        -3000:
    ]
    spans = _jaeger_spans(outdir)
    assert spans, (outdir / "collector.log").read_text()[-3000:]
    # Each span once (raw traces: Jaeger dedupes nothing).
    ids = Counter(_hex(s["spanId"]) for s in spans)
    assert [i for i, n in ids.items() if n > 1] == []
    # Every trace whole: one root, every parent in the same trace.
    by_trace: dict[str, dict[str, dict]] = {}
    for s in spans:
        by_trace.setdefault(_hex(s["traceId"]), {})[_hex(s["spanId"])] = s
    for trace_id, members in by_trace.items():
        roots = [s for s in members.values() if not s.get("parentSpanId")]
        assert len(roots) == 1, (trace_id, [s["name"] for s in roots])
        orphans = [s["name"] for s in members.values() if s.get("parentSpanId") and
                   _hex(s["parentSpanId"]) not in members]  # fmt: skip
        assert orphans == [], trace_id
    # Span for span what `hermes-meter trace` shows from the store.
    jaeger = {
        _hex(s["spanId"]): (
            _hex(s["traceId"]),
            _hex(s["parentSpanId"]) if s.get("parentSpanId") else None,
            s["name"],
        )
        for s in spans
    }
    assert jaeger == _store_spans(outdir)
    assert {s["_resource"]["service.name"] for s in spans} == {"hermes-agent"}


@pytest.mark.parametrize("name", [r[0] for r in RUNS])
def test_span_names_and_genai_attributes_are_the_documented_ones(pipeline_runs, name):
    spans = _jaeger_spans(pipeline_runs[name])
    names = Counter(s["name"] for s in spans)
    assert names["hermes.session"] >= 1 and names["invoke_agent hermes"] >= 1
    chats = [s for s in spans if s["name"].startswith("chat ")]
    assert chats
    for s in chats:
        a = _attrs(s)
        assert a["gen_ai.operation.name"] == "chat"
        assert s["name"] == f"chat {a['gen_ai.request.model']}"
        assert "gen_ai.provider.name" in a
        if s.get("status", {}).get("code") in (2, "STATUS_CODE_ERROR"):
            # A failed attempt: its error, and no usage.
            assert a["error.type"]
        elif "hermes.span.close_reason" in a:
            # Cut off (the process exited mid-call): closed, no usage known.
            pass
        else:
            assert int(a["gen_ai.usage.input_tokens"]) > 0 and int(a["gen_ai.usage.output_tokens"]) > 0
    for s in spans:
        a = _attrs(s)
        if s["name"].startswith("execute_tool "):
            assert a["gen_ai.operation.name"] == "execute_tool"
            assert s["name"] == f"execute_tool {a['gen_ai.tool.name']}"
        if s["name"] == "invoke_agent hermes":
            assert a["gen_ai.operation.name"] == "invoke_agent" and a["gen_ai.agent.name"] == "hermes"
        if s["name"] == "hermes.session":
            assert "gen_ai.operation.name" not in a and a["gen_ai.conversation.id"]
            assert not [k for k in a if k.startswith("gen_ai.usage.")], (
                "a session's totals are hermes.usage.*"
            )
    # A consumer that adds gen_ai.usage.* over a trace's spans (as a Jaeger
    # proposal does) counts each token once: only chat spans carry them.
    added = sum(int(_attrs(s).get("gen_ai.usage.output_tokens", 0)) for s in spans)
    assert added == _report(pipeline_runs[name])["totals"]["output_tokens"]


def test_a_subagent_hangs_under_the_delegate_task_call_that_started_it(pipeline_runs):
    spans = {_hex(s["spanId"]): s for s in _jaeger_spans(_run(pipeline_runs, "grpc_delegate_sync"))}
    agents = [s for s in spans.values() if s["name"] == "hermes.session" and s.get("parentSpanId")]
    assert agents, "no subagent session span"
    for s in agents:
        parent = spans[_hex(s["parentSpanId"])]
        assert parent["name"] == "execute_tool delegate_task"
        assert parent["traceId"] == s["traceId"]


def test_what_waited_out_a_collector_outage_went_out_once_while_the_gateway_ran(pipeline_runs):
    outdir = _run(pipeline_runs, "grpc_gateway_outage")
    times = json.loads((outdir / "gateway_times.json").read_text())
    # The second turn was answered while the Collector was down.
    assert (
        times["collector_stopped"]
        < times["turn2_sent"]
        < times["turn2_answered"]
        < times["collector_started"]
    )
    assert times["collector_started"] - times["collector_stopped"] >= 30
    # All three turns' chat spans reached Jaeger before the gateway was stopped.
    assert times["jaeger_chats"] == 3 and times["jaeger_checked"] < times["sigterm"]
    spans = _jaeger_spans(outdir)
    assert Counter(s["name"] for s in spans)["invoke_agent hermes"] == 3
    # (Whole and once: the parametrized tests above hold this run too.)


def _collector_log_records(outdir: Path) -> list[dict]:
    """The log records the Collector's debug exporter (``detailed``) wrote
    to collector.log: each record's fields and attributes by name."""
    records = []
    for chunk in (outdir / "collector.log").read_text().split("LogRecord #")[1:]:
        record: dict = {"attributes": {}}
        for line in chunk.splitlines()[1:]:
            if line.startswith("     -> "):
                key, _, value = line[len("     -> ") :].partition(": ")
                record["attributes"][key] = value
            elif ": " in line and not line.startswith((" ", "\t")):
                key, _, value = line.partition(": ")
                record.setdefault(key, value)
            if line.startswith("Flags:"):
                break
        records.append(record)
    return records


@pytest.mark.parametrize("name", [f"grpc_{s}" for s in FAILING])
def test_failed_api_calls_reach_the_collector_once_as_log_records_in_their_spans(pipeline_runs, name):
    outdir = _run(pipeline_runs, name)
    records = [r for r in _collector_log_records(outdir) if r.get("EventName") == "hermes.api.error"]
    db = f"file:{_meter(outdir) / 'hermes-meter.db'}?mode=ro"
    conn = sqlite3.connect(db, uri=True)
    try:
        (errors,) = conn.execute("SELECT COUNT(*) FROM llm_call_errors").fetchone()
        (waiting,) = conn.execute("SELECT COUNT(*) FROM log_outbox").fetchone()
    finally:
        conn.close()
    assert errors > 0
    # One record per failed attempt, each once (its uid), none left behind.
    assert len(records) == errors, (outdir / "collector.log").read_text()[-3000:]
    assert len({r["attributes"]["log.record.uid"] for r in records}) == errors
    assert waiting == 0
    # Each in the attempt span Jaeger holds, in that span's trace.
    jaeger = {(_hex(s["traceId"]), _hex(s["spanId"])): s["name"] for s in _jaeger_spans(outdir)}
    for r in records:
        assert jaeger.get((r["Trace ID"].lower(), r["Span ID"].lower()), "").startswith("chat "), r
        assert r["SeverityText"] in ("WARN", "ERROR")
        assert r["attributes"]["hermes.api.retry_count"].startswith("Int(")
    # The run ends on an attempt Hermes does not retry: an error.
    assert any(r["SeverityText"] == "ERROR" for r in records)


def test_a_collector_with_a_full_queue_refuses_and_what_it_refused_reaches_jaeger_once(pipeline_runs):
    outdir = _run(pipeline_runs, "grpc_queue_full")
    env = dict(os.environ, HERMES_METER_HOME=str(_meter(outdir)))
    p = subprocess.run([str(CLI), "status", "--json"], env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    export = json.loads(p.stdout)["export"]
    # The real Collector refused some requests, and said why.
    assert export["failed"] >= 1, export
    assert "sending queue is full" in export["last_error"], export
    assert "cannot take them now" in export["last_error"], export
    # Nothing waits, nothing was dropped: every span went out in the end
    # (each once, whole: the parametrized Jaeger tests above hold this run).
    assert (export["pending"], export["dropped"]) == (0, 0), export
    assert export["exported"] == len(_jaeger_spans(outdir))


def _steps(outdir: Path) -> dict[str, tuple[int, float, float]]:
    """The kit's steps.tsv: name -> (rc, started, ended)."""
    steps = {}
    for line in (outdir / "steps.tsv").read_text().splitlines()[1:]:
        _, name, rc, _, _, started, ended = line.split("\t")
        steps[name] = (int(rc), float(started), float(ended))
    return steps


@pytest.mark.parametrize(
    ("name", "answer", "worded"),
    [
        # No RetryInfo: not retryable for the OTLP specification; the plugin
        # keeps the spans and retries at its slowest pace.
        ("grpc_memory_limited", "ResourceExhausted: RESOURCE_EXHAUSTED", "out of a resource"),
        # 429 is retryable; no Retry-After, so the plugin's own backoff.
        ("http_memory_limited", "status 429", "cannot take them now"),
    ],
)
def test_a_collector_over_its_memory_limit_refuses_and_what_it_refused_reaches_jaeger_once(
    pipeline_runs, name, answer, worded
):
    outdir = _run(pipeline_runs, name)
    steps = _steps(outdir)
    assert all(rc == 0 for rc, _, _ in steps.values()), steps
    times = json.loads((outdir / "control_times.json").read_text())
    # Hermes ran, and exited, while the limiter refused (it said so first);
    # the Collector without the limit came up only after.
    assert times["collector_log"] <= steps["chat"][1] < steps["chat"][2] < times["collector.stop"]
    assert "Refusing data" in (outdir / "collector.log").read_text()
    env = dict(os.environ, HERMES_METER_HOME=str(_meter(outdir)))
    p = subprocess.run([str(CLI), "status", "--json"], env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    export = json.loads(p.stdout)["export"]
    # The plugin saw the real Collector's refusal, worded as what it is.
    assert export["failed"] >= 1, export
    assert answer in export["last_error"], export
    assert worded in export["last_error"], export
    # Nothing waits, nothing was dropped: every span went out once in the
    # end (whole and once in Jaeger: the parametrized tests above).
    assert (export["pending"], export["dropped"], export["rejected"]) == (0, 0, 0), export
    assert export["exported"] == len(_jaeger_spans(outdir))


def _report(outdir: Path) -> dict:
    env = dict(os.environ, HERMES_METER_HOME=str(_meter(outdir)))
    p = subprocess.run([str(CLI), "report", "--json"], env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.mark.parametrize("name", [r[0] for r in RUNS])
def test_metrics_through_the_collector_into_prometheus_equal_the_report(pipeline_runs, name):
    outdir = pipeline_runs[name]
    assert (outdir / "drain.rc").read_text().strip() == "0", (outdir / "drain.log").read_text()[-2000:]
    prom = json.loads((outdir / "prometheus.json").read_text())
    report = _report(outdir)
    totals = report["totals"]
    # No series of a counter is no event (a run with no answered call, or no tool).
    values = {k: v or 0 for k, v in prom["values"].items()}
    if not any(name.endswith(f) for f in FAILING):
        assert totals["llm_calls"] > 0 and totals["cost_usd"] > 0
    assert values["input_tokens"] == totals["input_tokens"]
    assert values["output_tokens"] == totals["output_tokens"]
    assert values["llm_calls"] == totals["llm_calls"]
    assert values["tool_calls"] == totals["tool_calls"]
    assert values["cost_usd"] == pytest.approx(totals["cost_usd"], abs=1e-9)
    # The dashboard's totals over a range in which every series was born
    # (increase() would count none of a series pushed once). Not for the
    # alerts run: its Prometheus was given a day of history in which the
    # first chat's series already existed, so that chat is, to Prometheus,
    # older than the range.
    if name != "grpc_alerts":
        assert grafana_panels.mismatches(prom["dashboard"], grafana_panels.expected(report)) == [], prom[
            "dashboard"
        ]
    # The shipped alert rules were loaded and evaluated on that data.
    groups = prom["rules"]["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert rules, "no rule loaded"
    bad = [(r["name"], r.get("lastError")) for r in rules if r.get("health") != "ok"]
    assert bad == []


# Runs whose Collector refuses or is away when a Hermes process exits: their
# last series reach Prometheus through the next exporter (the drain), as the
# test above holds; every other run's must be there when its process ended.
COLLECTOR_TROUBLE = ("outage", "restart", "queue_full", "memory_limited")


@pytest.mark.parametrize("name", [r[0] for r in RUNS if not any(t in r[0] for t in COLLECTOR_TROUBLE)])
def test_a_runs_metrics_reach_prometheus_before_it_ends_with_the_defaults(pipeline_runs, name):
    # No serve, no drain, no export interval set: only the Hermes processes
    # of the run had pushed when Prometheus was read.
    outdir = _run(pipeline_runs, name)
    prom = json.loads((outdir / "prometheus-at-exit.json").read_text())
    totals = _report(outdir)["totals"]
    values = {k: v or 0 for k, v in prom["values"].items()}
    assert values["input_tokens"] == totals["input_tokens"], (values, totals)
    assert values["output_tokens"] == totals["output_tokens"]
    assert values["llm_calls"] == totals["llm_calls"]
    assert values["tool_calls"] == totals["tool_calls"]
    assert values["cost_usd"] == pytest.approx(totals["cost_usd"], abs=1e-9)


def _alerts(rules: dict, name: str) -> tuple[str, list[dict]]:
    rule = next(r for g in rules["groups"] for r in g["rules"] if r["name"] == name)
    return rule["state"], rule.get("alerts", [])


def test_the_shipped_alert_rules_fire_on_real_runs_in_a_real_prometheus(pipeline_runs):
    # Evaluated by Prometheus itself (every second) on what real Hermes runs
    # pushed through the Collector, not by `promtool test rules`.
    outdir = _run(pipeline_runs, "grpc_alerts")
    steps = {}
    for row in (outdir / "steps.tsv").read_text().splitlines()[1:]:
        _n, step, rc, *_ = row.split("\t")
        steps[step] = int(rc)
    # The dear run was stopped by the budget: its `chat -q` exits 3.
    assert steps == {"cheap": 0, "history": 0, "budget": 0, "dear": 3}, steps
    rules = json.loads((outdir / "prometheus-at-exit.json").read_text())["rules"]
    # The budget at its hard line: no `for`, firing at once.
    state, alerts = _alerts(rules, "HermesBudgetHardBurn")
    assert state == "firing", rules
    assert [a["labels"]["hermes_budget_scope"] for a in alerts] == ["global"], alerts
    assert float(alerts[0]["value"]) >= 1.0
    # The spike over the quiet day: the expression holds (pending); it fires
    # after its `for: 5m`, which Prometheus counts, not this test.
    state, alerts = _alerts(rules, "HermesCostSpike")
    assert state in ("pending", "firing"), rules
    assert len(alerts) == 1 and float(alerts[0]["value"]) > 1.0, alerts
    # Neither fires on the other runs (a fresh Prometheus, cents of spend).
    quiet = json.loads((_run(pipeline_runs, "grpc_readfile") / "prometheus.json").read_text())["rules"]
    assert _alerts(quiet, "HermesBudgetHardBurn")[0] == "inactive"
    assert _alerts(quiet, "HermesCostSpike")[0] == "inactive"


def test_the_shipped_collector_config_validates_with_the_real_collector():
    p = subprocess.run(
        [str(OTELCOL), "validate", "--config", str(ROOT / "collector-config" / "otelcol.yaml")],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr


def test_a_collector_restarted_with_a_queue_jaeger_had_not_taken_loses_none_of_it(pipeline_runs):
    outdir = _run(pipeline_runs, "grpc_collector_restart")
    times = json.loads((outdir / "control_times.json").read_text())
    steps = _steps(outdir)
    assert all(rc == 0 for rc, _, _ in steps.values()), steps
    # Jaeger was down from before Hermes ran until after the Collector
    # came back: the spans can only have come from the Collector's queue.
    assert times["jaeger.stop"] < steps["chat"][1] < steps["chat"][2] < times["collector.stop"]
    assert times["collector.stop"] < times["collector.start"] < times["jaeger.start"]
    log = (outdir / "collector.log").read_text()
    assert "Exporting failed" in log, log[-3000:]
    # Nothing left in the plugin's store, and Jaeger held both chat spans
    # before any process but the restarted Collector could have sent them
    # (Hermes had exited; the sidecar drains only after this step).
    conn = sqlite3.connect(f"file:{_meter(outdir) / 'hermes-meter.db'}?mode=ro", uri=True)
    try:
        (unsent,) = conn.execute("SELECT COUNT(*) FROM outbox").fetchone()
    finally:
        conn.close()
    assert unsent == 0
    # Both chat spans (and, by the tests above, every span once) in Jaeger.
    assert times["jaeger_chats"] == 2
    turn_calls = [s for s in _jaeger_spans(outdir) if s["name"] == "chat mock-model" and not _is_aux(s)]
    assert len(turn_calls) == 2
