"""What a loopback OTLP receiver got from a real Hermes run with our plugin.

The `readfile` scenario runs with an OTLP/HTTP receiver as the kit's sidecar
(tests/e2e/otlp_sidecar.py). The plugin's export thread sends the spans
when the session ends; the receiver saves the bodies, decoded here with
opentelemetry-proto and compared with the hook stream the probe recorded.
"""

from __future__ import annotations

import json

from conftest import EVENTS_RUN, NEW_LINE, OTLP_RUN, Run
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


def _bodies(run: Run, kind: str) -> list[bytes]:
    return [p.read_bytes() for p in sorted((run.outdir / "otlp").glob(f"*-{kind}.pb"))]


def _attrs(span) -> dict:
    out = {}
    for kv in span.attributes:
        v = kv.value
        out[kv.key] = getattr(v, v.WhichOneof("value")) if v.WhichOneof("value") else None
    return out


def test_the_receiver_got_the_session_as_genai_spans(runs: dict[str, Run]) -> None:
    run = runs[OTLP_RUN]
    assert run.harness_rc == 0, run.harness_log
    assert run.rc == 0, run.stdout
    spans = []
    for body in _bodies(run, "traces"):
        req = ExportTraceServiceRequest.FromString(body)
        for rs in req.resource_spans:
            for ss in rs.scope_spans:
                spans.extend(ss.spans)
    names = sorted(s.name for s in spans)
    # Hermes 0.22 titles every chat: one auxiliary call more.
    assert names == [
        *["chat mock-model"] * (3 if NEW_LINE else 2),
        "execute_tool read_file",
        "hermes.session",
        "invoke_agent hermes",
    ], names
    assert len({s.span_id for s in spans}) == len(spans), "each span once"
    assert len({s.trace_id for s in spans}) == 1, "one trace per CLI session"
    by_name = {s.name: s for s in spans}
    session, turn = by_name["hermes.session"], by_name["invoke_agent hermes"]
    assert not session.parent_span_id
    assert turn.parent_span_id == session.span_id
    for s in spans:
        if s.name.startswith(("chat ", "execute_tool ")) and "hermes.llm.aux_task" not in _attrs(s):
            assert s.parent_span_id == turn.span_id, s.name

    # Tokens on the chat spans: semconv input includes cached tokens.
    hooks = [
        json.loads(line) for line in (run.outdir / "hooks.jsonl").read_text().splitlines() if line.strip()
    ]
    # Every answered call: the turn's, and the auxiliary ones Hermes 0.22 reports.
    usages = [
        h["kwargs"]["usage"]
        for h in hooks
        if h["hook"] in ("post_api_request", "post_auxiliary_call") and h["kwargs"].get("usage")
    ]
    want_input = sorted(u["input_tokens"] + u["cache_read_tokens"] + u["cache_write_tokens"] for u in usages)
    chats = [_attrs(s) for s in spans if s.name.startswith("chat ")]
    assert sorted(a["gen_ai.usage.input_tokens"] for a in chats) == want_input
    assert sorted(a["gen_ai.usage.output_tokens"] for a in chats) == sorted(
        u["output_tokens"] for u in usages
    )
    assert all(a["gen_ai.operation.name"] == "chat" for a in chats)
    session_attrs = _attrs(session)
    assert session_attrs["gen_ai.conversation.id"] == hooks[0]["kwargs"]["session_id"]
    # No prompt text reaches the receiver without content capture.
    prompt = next(h["kwargs"]["user_message"] for h in hooks if h["hook"] == "pre_llm_call")
    for body in _bodies(run, "traces"):
        assert prompt.encode() not in body


def test_the_receiver_got_token_metrics_equal_to_the_hook_stream(runs: dict[str, Run]) -> None:
    run = runs[OTLP_RUN]
    bodies = _bodies(run, "metrics")
    assert bodies, "no metric push arrived"
    last = ExportMetricsServiceRequest.FromString(bodies[-1])
    total = 0.0
    for rm in last.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name != "gen_ai.client.inference.usage.input_tokens":
                    continue
                for p in m.sum.data_points:
                    total += p.as_int
    hooks = [
        json.loads(line) for line in (run.outdir / "hooks.jsonl").read_text().splitlines() if line.strip()
    ]
    usages = [
        h["kwargs"]["usage"]
        for h in hooks
        if h["hook"] in ("post_api_request", "post_auxiliary_call") and h["kwargs"].get("usage")
    ]
    assert total == sum(u["input_tokens"] + u["cache_read_tokens"] + u["cache_write_tokens"] for u in usages)


def test_event_only_sends_each_calls_content_as_a_content_event_in_its_chat_span(
    runs: dict[str, Run],
) -> None:
    run = runs[EVENTS_RUN]
    assert run.rc == 0, run.harness_log
    spans = [
        span
        for body in _bodies(run, "traces")
        for rs in ExportTraceServiceRequest.FromString(body).resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
    ]
    # The turn's calls (an auxiliary call's content is not captured).
    chats = {
        (s.trace_id, s.span_id): s
        for s in spans
        if s.name.startswith("chat ") and "hermes.llm.aux_task" not in _attrs(s)
    }
    assert chats, "no chat span"
    # No content on any span with EVENT_ONLY.
    content = {"gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions"}
    assert not [s.name for s in spans if content & set(_attrs(s))]
    records = [
        r
        for body in _bodies(run, "logs")
        for rl in ExportLogsServiceRequest.FromString(body).resource_logs
        for sl in rl.scope_logs
        for r in sl.log_records
    ]
    events = [r for r in records if r.event_name == "gen_ai.client.inference.operation.details"]
    # One per chat span, in it.
    assert sorted((r.trace_id, r.span_id) for r in events) == sorted(chats), records
    inputs = [_attrs(r).get("gen_ai.input.messages") or "" for r in events]
    assert all("READFILE" in i for i in inputs), inputs
    assert any(_attrs(r).get("gen_ai.output.messages") for r in events)
