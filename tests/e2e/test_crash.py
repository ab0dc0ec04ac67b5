"""kill -9 of a real Hermes in the middle of a model call loses nothing.

The kit's ``custom`` scenario (``tests/e2e/scripts/kill_mid_call.sh``) starts a turn
whose model calls the mock delays (``SLOW``) and kills Hermes with SIGKILL
while its second model call is in flight. Then:

- every hook call the probe recorded (but possibly the last, which may have
  reached the probe before our hook: plugins run in turn) is in our store
  once the next process (``hermes-meter serve``) recovered the dead process's
  spool;
- ``serve`` closes the spans the dead process left open after the idle
  timeout (1 s here, ``HERMES_METER_IDLE_TIMEOUT_SECONDS``), marks them with
  ``hermes.span.close_reason = idle_timeout`` and exports them (the console
  exporter, one JSON line per span, read back here).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import time
from collections import Counter
from pathlib import Path

from conftest import KIT, ROOT, _run

OUR_HOOKS = {
    "on_session_start",
    "pre_llm_call",
    "pre_api_request",
    "post_api_request",
    "api_request_error",
    "pre_tool_call",
    "post_tool_call",
    "post_llm_call",
    "subagent_start",
    "subagent_stop",
    "on_session_end",
    "on_session_finalize",
}


def test_a_hermes_killed_mid_call_loses_no_returned_hook_and_its_spans_are_closed_and_exported(
    hermes_bin: Path, tmp_path: Path
) -> None:
    out = tmp_path / "crash"
    store_dir = out / "meter"
    env = dict(os.environ, HERMES_BIN=str(hermes_bin))
    script = ROOT / "tests" / "e2e" / "scripts" / "kill_mid_call.sh"
    cmd = ["bash", str(KIT / "run-scenario.sh"), "custom", str(out), "--probe"]
    cmd += ["--enable", "hermes-meter", "--env", f"HERMES_METER_HOME={store_dir}", "--script", str(script)]
    _run(cmd, env=env)
    assert (out / "killed_rc").read_text().strip() == "137", "hermes was killed by SIGKILL"

    probe = [json.loads(line) for line in (out / "hooks.jsonl").read_text().splitlines() if line.strip()]
    probe.sort(key=lambda r: (r["t"], r["pid"], r["seq"]))
    ours = [r for r in probe if r["hook"] in OUR_HOOKS]
    assert [r["hook"] for r in ours].count("pre_api_request") >= 2, ours

    # The dead process's spool is there, its events not necessarily committed.
    spools = list((store_dir / "spool").glob("*.jsonl"))
    assert spools, "the killed process left its spool"

    hermes_meter = Path(hermes_bin).parent / "hermes-meter"
    time.sleep(1.5)  # past the 1 s idle timeout of the test
    serve_env = dict(
        os.environ,
        HERMES_METER_HOME=str(store_dir),
        HERMES_METER_IDLE_TIMEOUT_SECONDS="1",
        OTEL_TRACES_EXPORTER="console",
        OTEL_METRICS_EXPORTER="none",
    )
    served = subprocess.run(
        [str(hermes_meter), "serve", "--drain", "--poll-ms", "50"],
        env=serve_env,
        text=True,
        capture_output=True,
        timeout=120,
    )
    assert served.returncode == 0, served.stdout + served.stderr
    assert "spool file(s) of ended processes" in served.stderr, served.stderr
    assert not list((store_dir / "spool").glob("*.jsonl")), "recovered spools are deleted"

    conn = sqlite3.connect(f"file:{store_dir / 'hermes-meter.db'}?mode=ro", uri=True)
    try:
        journal = Counter(h for (h,) in conn.execute("SELECT hook FROM journal"))
        (status,) = conn.execute("SELECT status FROM runs").fetchone()
    finally:
        conn.close()
    returned = Counter(r["hook"] for r in ours[:-1])
    missing = returned - journal
    assert not missing, f"hook calls that returned before the kill but are not in the store: {missing}"
    assert status == "abandoned"

    spans = [json.loads(line) for line in served.stdout.splitlines() if line.startswith("{")]
    closed = [s for s in spans if s["attributes"].get("hermes.span.close_reason") == "idle_timeout"]
    names = sorted(s["name"] for s in closed)
    assert closed, served.stdout
    # The session, its turn and the model call in flight were left open.
    assert any(s["attributes"].get("gen_ai.operation.name") == "chat" for s in closed), names
    assert any(s["attributes"].get("gen_ai.operation.name") == "invoke_agent" for s in closed), names
    # The finished model call and the tool call are exported too, not marked.
    assert any(s["attributes"].get("gen_ai.operation.name") == "execute_tool" for s in spans), spans
