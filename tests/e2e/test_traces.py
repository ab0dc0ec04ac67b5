"""Traces whole with the defaults, in the real Hermes 0.19.0.

Each ``otlp_*`` run (conftest.OTLP_RUNS) runs one way of using Hermes with
the plugin enabled as a user enables it and nothing set but the collector
endpoint: no grace or flush settings. A loopback OTLP/HTTP receiver (the
kit's sidecar) notes when each body arrived. For every run:

- every span arrived once (no span id twice), every trace has one root and
  every parent arrived (no orphan);
- every span arrived before the process that made it ended (the step of the
  kit that ran it), so nothing waits for a later process;
- one chat span per API attempt Hermes made, and turns show as AGENT and sessions as CHAIN.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass

import pytest
from conftest import NEW_LINE, OTLP_RUNS, Run
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


@dataclass
class Received:
    span: object
    arrived: float


def _attrs(span) -> dict:
    out = {}
    for kv in span.attributes:
        v = kv.value
        which = v.WhichOneof("value")
        out[kv.key] = getattr(v, which) if which else None
    return out


def _received(run: Run) -> list[Received]:
    otlp = run.outdir / "otlp"
    arrivals = {}
    for line in (otlp / "arrivals.tsv").read_text().splitlines():
        n, kind, at = line.split("\t")
        if kind == "traces":
            arrivals[n] = float(at)
    out = []
    for n, at in sorted(arrivals.items()):
        req = ExportTraceServiceRequest.FromString((otlp / f"{n}-traces.pb").read_bytes())
        for rs in req.resource_spans:
            for ss in rs.scope_spans:
                out.extend(Received(s, at) for s in ss.spans)
    return out


def _steps(run: Run) -> list[tuple[str, float, float]]:
    rows = (run.outdir / "steps.tsv").read_text().splitlines()[1:]
    out = []
    for row in rows:
        cols = row.split("\t")
        out.append((cols[1], float(cols[-2]), float(cols[-1])))
    return out


def _hooks(run: Run) -> list[dict]:
    lines = (run.outdir / "hooks.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


@pytest.fixture(params=sorted(OTLP_RUNS))
def traced(request, runs: dict[str, Run]) -> tuple[Run, list[Received]]:
    run = runs[request.param]
    assert run.harness_rc == 0, run.harness_log
    assert run.rc == 0, run.stdout
    return run, _received(run)


def test_every_span_arrives_once_in_one_tree_per_trace(traced) -> None:
    run, received = traced
    spans = [r.span for r in received]
    assert spans, f"{run.scenario}: nothing arrived"
    ids = Counter(s.span_id for s in spans)
    twice = [s.name for s in spans if ids[s.span_id] > 1]
    assert not twice, f"{run.scenario}: sent more than once: {twice}"
    roots = Counter(s.trace_id for s in spans if not s.parent_span_id)
    for trace in {s.trace_id for s in spans}:
        assert roots[trace] == 1, f"{run.scenario}: a trace has {roots[trace]} roots"
    for s in spans:
        if s.parent_span_id:
            assert s.parent_span_id in ids, f"{run.scenario}: {s.name}'s parent never arrived"


def test_every_span_arrives_before_its_process_ended(traced) -> None:
    run, received = traced
    steps = _steps(run)
    for r in received:
        end = r.span.end_time_unix_nano / 1e9
        made_by = [s for s in steps if s[1] - 1 <= end <= s[2] + 1]
        assert made_by, f"{run.scenario}: {r.span.name} ended outside every step"
        name, _, ended = made_by[0]
        late = r.arrived - ended
        assert late <= 0, (
            f"{run.scenario}: {r.span.name} arrived {late:.2f} s after its process ({name}) ended"
        )


def test_one_chat_span_per_attempt_and_turns_are_chains(traced) -> None:
    run, received = traced
    spans = [r.span for r in received]
    attempts = sum(1 for h in _hooks(run) if h["hook"] == "pre_api_request")
    chats = [s for s in spans if s.name.startswith("chat ") and "hermes.llm.aux_task" not in _attrs(s)]
    assert len(chats) == attempts, f"{run.scenario}: {len(chats)} chat spans for {attempts} attempts"
    # Auxiliary calls (a title in the REPL) are chat spans too, one each.
    aux_served = sum(
        1
        for line in (run.outdir / "requests.jsonl").read_text().splitlines()
        if line.strip()
        and json.loads(line).get("decision") == "AUX"
        and json.loads(line).get("status") == 200
    )
    aux = [s for s in spans if "hermes.llm.aux_task" in _attrs(s)]
    assert len(aux) == aux_served, run.scenario
    turns = [s for s in spans if s.name == "invoke_agent hermes"]
    assert turns, run.scenario
    assert all(_attrs(t).get("openinference.span.kind") == "AGENT" for t in turns)
    sessions = [s for s in spans if s.name == "hermes.session"]
    assert sessions and all(_attrs(s).get("openinference.span.kind") == "CHAIN" for s in sessions)


def _by_name(runs: dict[str, Run], name: str) -> list:
    return [r.span for r in _received(runs[name])]


def test_a_one_shot_run_sends_its_root_and_joins_the_subagent(runs: dict[str, Run]) -> None:
    spans = _by_name(runs, "otlp_oneshot")
    sessions = [s for s in spans if s.name == "hermes.session"]
    assert len(sessions) == 2, [s.name for s in spans]
    tool = next(s for s in spans if s.name == "execute_tool delegate_task")
    child = next(s for s in sessions if s.parent_span_id)
    assert child.parent_span_id == tool.span_id
    assert len({s.trace_id for s in spans}) == 1, "the subagent is in its parent's trace"


def test_a_resumed_session_continues_under_its_root(runs: dict[str, Run]) -> None:
    spans = _by_name(runs, "otlp_resume")
    sessions = [s for s in spans if s.name == "hermes.session"]
    assert sorted(_attrs(s)["hermes.session.continuation"] for s in sessions) == [0, 1]
    root = next(s for s in sessions if not s.parent_span_id)
    cont = next(s for s in sessions if s.parent_span_id)
    assert cont.parent_span_id == root.span_id
    # The turns' calls (Hermes 0.22 adds a title call, an auxiliary one).
    turn_calls = [s for s in spans if s.name.startswith("chat ") and "hermes.llm.aux_task" not in _attrs(s)]
    assert len(turn_calls) == 3


def test_a_repl_session_has_one_session_span_over_its_turns(runs: dict[str, Run]) -> None:
    spans = _by_name(runs, "otlp_repl")
    sessions = [s for s in spans if s.name == "hermes.session"]
    assert len(sessions) == 1
    turns = [s for s in spans if s.name == "invoke_agent hermes"]
    assert len(turns) == 2
    assert all(t.parent_span_id == sessions[0].span_id for t in turns)


def test_a_background_child_cut_off_by_the_exit_is_closed_and_sent(runs: dict[str, Run]) -> None:
    spans = _by_name(runs, "otlp_bg_orphan")
    children = [s for s in spans if s.name == "hermes.session" and s.parent_span_id]
    assert len(children) == 1
    if NEW_LINE:
        # Hermes 0.22 runs a delegation of `chat -q` in the foreground (in
        # the background only in the REPL): the child ends before the exit.
        assert _attrs(children[0]).get("hermes.session.status") == "ok", _attrs(children[0])
    else:
        assert _attrs(children[0]).get("hermes.span.close_reason") == "process_exit"


def test_a_gateway_conversation_sends_each_turn_within_seconds_and_its_session_at_shutdown(
    runs: dict[str, Run],
) -> None:
    run = runs["otlp_gateway"]
    times = json.loads((run.outdir / "gateway_times.json").read_text())
    received = _received(run)
    turns = sorted(
        (r for r in received if r.span.name == "invoke_agent hermes"),
        key=lambda r: r.span.start_time_unix_nano,
    )
    assert len(turns) == 2, [r.span.name for r in received]
    # The first turn's tree went out while the gateway kept running, within
    # seconds of its answer (before the second turn was even sent).
    assert turns[0].arrived < times["turn2_sent"]
    assert turns[0].arrived - times["turn1_answered"] < 3.0
    # Per-turn traces on gateway platforms; the session span went out at
    # the shutdown, once.
    assert len({r.span.trace_id for r in turns}) == 2
    sessions = [r for r in received if r.span.name == "hermes.session"]
    assert len(sessions) == 1
    assert times["sigterm"] <= sessions[0].arrived <= times["exited"]
