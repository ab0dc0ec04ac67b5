"""The registry of Hermes integration points (``_integrations.py``): what
``register`` may touch, when the wraps go in, their shape checks, and the
report ``status`` reads from the store's health record.

The real Hermes 0.22 runs the same in ``tests/e2e`` (``hermes -z`` and
``cron run``, where the main thread imports ``run_agent`` while plugin
discovery runs ``register``); here a loader shaped after Hermes 0.22's
(``hermes_cli/plugins_loader.py``, ``run_with_load_deadline``) holds it
in-process.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from conftest import run_python

# A Hermes whose main thread imports `run_agent`, whose import waits for
# plugin discovery (model_tools joins it), which runs `register` on another
# thread under a deadline, as Hermes 0.22 does in `hermes -z` and `cron run`.
RUN_AGENT = textwrap.dedent(
    """
    import threading, time
    import fake_hermes
    done = {}
    def discover():
        t0 = time.perf_counter()
        import hermes_meter
        hermes_meter.register(fake_hermes.CTX)
        done["ms"] = (time.perf_counter() - t0) * 1000
    worker = threading.Thread(target=discover, name="plugin-load:hermes-meter", daemon=True)
    worker.start()
    worker.join(fake_hermes.LOAD_TIMEOUT_SECONDS)
    ABANDONED = worker.is_alive()
    if ABANDONED:
        fake_hermes.CTX._load_abandoned = True

    class AIAgent:
        def _usage_summary_for_api_request_hook(self, response):
            return {"input_tokens": 7}
    """
)

FAKE_HERMES = textwrap.dedent(
    """
    import sys, types
    LOAD_TIMEOUT_SECONDS = 5.0
    plugins = types.ModuleType("hermes_cli.plugins")
    plugins.VALID_HOOKS = {"on_session_start", "pre_llm_call", "pre_api_request", "post_api_request",
                           "api_request_error", "pre_tool_call", "post_tool_call", "post_llm_call",
                           "on_session_end", "on_session_finalize"}
    sys.modules["hermes_cli"] = types.ModuleType("hermes_cli")
    sys.modules["hermes_cli.plugins"] = plugins
    class Ctx:
        _load_abandoned = False
        def __init__(self):
            self.hooks = {}
        def register_hook(self, name, cb):
            if not self._load_abandoned:
                self.hooks[name] = cb
        def register_middleware(self, kind, cb): pass
        def register_cli_command(self, *a, **k): pass
        def register_command(self, *a, **k): pass
        def register_tool(self, *a, **k): pass
    CTX = Ctx()
    """
)


def _hermes(tmp_path: Path, body: str, **env: str) -> dict:
    (tmp_path / "run_agent.py").write_text(RUN_AGENT)
    (tmp_path / "fake_hermes.py").write_text(FAKE_HERMES)
    code = f"import sys\nsys.path.insert(0, {str(tmp_path)!r})\n" + textwrap.dedent(body)
    p = run_python(code, HERMES_METER_HOME=str(tmp_path / "meter"), **env)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def _health(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "meter" / "health.json").read_text())


def test_register_on_the_discovery_thread_returns_while_the_main_thread_imports_the_agent(tmp_path) -> None:
    out = _hermes(
        tmp_path,
        """
        import run_agent, fake_hermes
        from hermes_meter import _native
        summary = run_agent.AIAgent._usage_summary_for_api_request_hook
        wrapped_before = getattr(summary, "_hermes_meter", False)
        # The agent runs: its first hook call settles the points.
        fake_hermes.CTX.hooks["on_session_start"](session_id="s-late", platform="cli")
        summary = run_agent.AIAgent._usage_summary_for_api_request_hook
        assert _native.flush(5.0)
        print(json.dumps({"abandoned": run_agent.ABANDONED, "ms": run_agent.done.get("ms"),
                          "hooks": sorted(fake_hermes.CTX.hooks), "before": wrapped_before,
                          "after": getattr(summary, "_hermes_meter", False)}))
        """.replace("import run_agent", "import json, run_agent", 1),
    )
    assert not out["abandoned"], "register imported something the main thread was importing"
    assert out["ms"] < 1000, out["ms"]
    assert "on_session_start" in out["hooks"] and "pre_api_request" in out["hooks"]
    assert not out["before"], "register wraps nothing of Hermes"
    assert out["after"], "the first hook call put the provider-cost wrap in"
    report = _health(tmp_path)["hermes"][-1]
    assert report["load"] == "ok" and report["register_ms"] < 1000
    states = {p["name"]: p["state"] for p in report["points"]}
    assert states["run_agent.AIAgent._usage_summary_for_api_request_hook"] == "active"


def test_a_load_hermes_abandoned_is_written_where_status_reads_it(tmp_path) -> None:
    out = _hermes(
        tmp_path,
        """
        import json, fake_hermes
        fake_hermes.CTX._load_abandoned = True
        import hermes_meter
        from hermes_meter import _native
        hermes_meter.register(fake_hermes.CTX)
        assert _native.flush(5.0)
        print(json.dumps({"hooks": sorted(fake_hermes.CTX.hooks)}))
        """,
    )
    assert out["hooks"] == []
    report = _health(tmp_path)["hermes"][-1]
    assert report["load"] == "abandoned"


def test_a_point_whose_shape_changed_is_missing_with_what_changed(tmp_path) -> None:
    out = _hermes(
        tmp_path,
        """
        import json, sys, types, fake_hermes
        # run_agent loaded, its summary method taking another parameter name.
        ra = types.ModuleType("run_agent")
        class AIAgent:
            def _usage_summary_for_api_request_hook(self, reply):
                return {}
        ra.AIAgent = AIAgent
        sys.modules["run_agent"] = ra
        import hermes_meter
        from hermes_meter import _integrations
        hermes_meter.register(fake_hermes.CTX)
        _integrations.first_hook()
        print(json.dumps({"lines": _integrations.lines()}))
        """,
    )
    name = "run_agent.AIAgent._usage_summary_for_api_request_hook"
    line = next(x for x in out["lines"] if x.startswith(name))
    assert "MISSING" in line and "no longer takes 'response'" in line, line


def test_versions_compare_with_the_running_hermes() -> None:
    from hermes_meter import _integrations as i

    assert i.parse_version("0.22.2.post1") == (0, 22, 2)
    assert i.parse_version("v0.19.0") == (0, 19, 0)
    assert i.parse_version("") is None and i.parse_version("dev") is None
    v = i.Versions((0, 19, 0), (0, 23))
    assert v.covers((0, 19, 0)) and v.covers((0, 23, 9)) and v.covers((0, 22, 2))
    assert not v.covers((0, 18, 4)) and not v.covers((0, 24, 0))
    assert str(v) == "0.19.0 - 0.23.x"


def test_register_imports_no_module_it_does_not_find_loaded(tmp_path) -> None:
    out = _hermes(
        tmp_path,
        """
        import json, sys, fake_hermes
        before = set(sys.modules)
        import hermes_meter
        hermes_meter.register(fake_hermes.CTX)
        new = sorted(m for m in set(sys.modules) - before if not m.startswith(("hermes_meter", "encodings")))
        print(json.dumps({"new": new}))
        """,
    )
    hermes = [m for m in out["new"] if m.split(".")[0] in ("run_agent", "agent", "tools", "cron", "gateway")]
    assert hermes == [], hermes
