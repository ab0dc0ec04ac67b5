"""The hermes_meter package: registration, hooks into the store, never raising."""

from __future__ import annotations

import argparse
import gc
import json
import os
import shlex
import subprocess
import sys
import textwrap
import time
import uuid

import hermes_meter
import pytest
from conftest import FIXTURES, STORE_DIR, fixture_records, query, run_python
from hermes_meter import _native

ALL_HOOKS = [
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
    "pre_approval_request",
    "post_approval_response",
    # Registered where Hermes cannot say which hooks it knows (here: no
    # hermes_cli); see test_auxiliary_calls_* below.
    "post_auxiliary_call",
]


class FakeContext:
    """Records what register() asks of Hermes's PluginContext."""

    def __init__(self) -> None:
        self.hooks: dict[str, object] = {}
        self.cli: dict[str, dict] = {}
        self.commands: dict[str, dict] = {}
        self.tools: dict[str, dict] = {}

    def register_hook(self, name, callback):
        assert name not in self.hooks, f"{name} registered twice"
        self.hooks[name] = callback

    def register_tool(self, name, toolset, schema, handler, check_fn=None, requires_env=None, is_async=False,
                      description="", emoji="", override=False):  # fmt: skip
        assert name not in self.tools and not override
        self.tools[name] = {"toolset": toolset, "schema": schema, "handler": handler}

    def register_cli_command(self, name, help, setup_fn, handler_fn=None, description=""):
        self.cli[name] = {"setup_fn": setup_fn, "handler_fn": handler_fn}

    def register_command(self, name, handler, description="", args_hint=""):
        self.commands[name] = {"handler": handler, "description": description}


def replay(records: list[dict], hooks: dict) -> list:
    return [hooks[r["hook"]](**r["kwargs"]) for r in records if r["hook"] in hooks]


def test_register_wires_every_ledger_hook_the_cli_and_the_slash_command() -> None:
    ctx = FakeContext()
    hermes_meter.register(ctx)
    assert list(ctx.hooks) == [*ALL_HOOKS, "pre_gateway_dispatch"]
    native = {name: cb for name, cb in ctx.hooks.items() if name in ALL_HOOKS}
    # pre_llm_call and post_auxiliary_call are wrapped (the last turn's
    # session, for auxiliary calls outside a turn); the rest are native.
    assert all(
        repr(getattr(cb, "__wrapped__", cb)) == f"<hermes_meter hook {name}>" for name, cb in native.items()
    )
    assert "meter" in ctx.cli and callable(ctx.cli["meter"]["handler_fn"])
    assert "meter" in ctx.commands


def test_observe_mode_does_not_register_the_gating_tool_hook() -> None:
    code = textwrap.dedent(
        """
        import hermes_meter
        hooks = []
        class Ctx:
            def register_hook(self, name, cb): hooks.append(name)
            def register_cli_command(self, *a, **k): pass
            def register_command(self, *a, **k): pass
        hermes_meter.register(Ctx())
        print(",".join(hooks))
        """
    )
    p = run_python(code, HERMES_METER_BUDGET_MODE="observe")
    assert p.returncode == 0, p.stderr
    names = p.stdout.strip().split(",")
    assert "pre_tool_call" not in names and len(names) == len(ALL_HOOKS)


def test_the_agent_asks_its_spend_through_its_tool_and_a_setting_turns_it_off() -> None:
    ctx = FakeContext()
    hermes_meter.register(ctx)
    tool = ctx.tools["meter_spend"]
    assert tool["toolset"] == "hermes-meter" and tool["schema"]["name"] == "meter_spend"
    assert tool["schema"]["parameters"]["properties"] == {}
    recs = fixture_records("delegate_sync")
    replay(recs, ctx.hooks)
    session = recs[0]["kwargs"]["session_id"]
    answer = json.loads(tool["handler"]({}, session_id=session, task_id="t"))
    assert answer["schema"] == "hermes-meter.agent.v1", answer
    # What the ledger holds for that session and its subagent.
    assert answer["session"]["session_id"] == session and answer["session"]["subagents"] == 1, answer
    assert answer["session"]["llm_calls"] == sum(1 for r in recs if r["hook"] == "post_api_request")
    # No session from Hermes: still an answer, never an exception.
    assert json.loads(tool["handler"]({}))["session"] is None

    code = textwrap.dedent(
        """
        import hermes_meter
        tools = []
        class Ctx:
            def register_hook(self, name, cb): pass
            def register_cli_command(self, *a, **k): pass
            def register_command(self, *a, **k): pass
            def register_tool(self, name, *a, **k): tools.append(name)
        hermes_meter.register(Ctx())
        print(",".join(tools) or "none")
        """
    )
    p = run_python(code, HERMES_METER_AGENT_TOOL="off")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "none"


@pytest.mark.parametrize(
    "fixture",
    [
        "readfile",
        "parallel",
        "delegate_sync",
        "terminal_fail",
        "tool_error",
        "failonce",
        "bigcache",
        "nousage",
    ],
)
def test_fixture_hooks_land_in_the_store_as_the_rust_replay_puts_them(fixture: str, tmp_path) -> None:
    ctx = FakeContext()
    hermes_meter.register(ctx)
    recs = fixture_records(fixture)
    results = replay(recs, ctx.hooks)
    assert all(r is None for r in results)
    assert _native.flush(5.0)

    # The same records through `hermes-meter replay` into another store.
    replay_file = tmp_path / "recs.jsonl"
    replay_file.write_text("\n".join(json.dumps(r) for r in recs))
    other = tmp_path / "replayed"
    assert _native.cli_main(["hermes-meter", "--home", str(other), "replay", str(replay_file)]) == 0

    sessions = sorted({r["kwargs"]["session_id"] for r in recs if "session_id" in r["kwargs"]})
    marks = ",".join("?" * len(sessions))
    sql = (
        "SELECT session_id, status, llm_calls, input_tokens, output_tokens, cache_read_tokens,"
        " cache_write_tokens, reasoning_tokens, api_errors, tool_calls, tool_failures,"
        f" parent_session_id FROM runs WHERE session_id IN ({marks}) ORDER BY session_id"
    )
    ours = query(sql, *sessions)
    theirs = query(sql, *sessions, store_dir=other)
    assert ours and ours == theirs
    journal = query(f"SELECT COUNT(*) FROM journal WHERE session_id IN ({marks})", *sessions)[0][0]
    assert journal == sum(1 for r in recs if r["hook"] in ALL_HOOKS)


ALL_FIXTURES = sorted(p.stem for p in FIXTURES.glob("*.jsonl"))


def hostile_kwargs() -> dict:
    deep: list = []
    for _ in range(40):
        deep = [deep]
    return {
        "session_id": 'h\ud800\u00e9"quoted"\n',
        "turn_id": ("tuple", 1, None),
        "api_request_id": 10**30,
        "model": b"bytes",
        "provider": True,
        "api_call_count": -(2**63),
        "started_at": float("nan"),
        "ended_at": float("inf"),
        "api_duration": 1e-320,
        "usage": {"input_tokens": 2**64, "nested": {"deep": deep}, 7: "non-string key", "none": None},
        "error": {"type": "RateLimit", "message": "token sk-abcdefabcdefabcdefabcdef leaked"},
        "result": '{"exit_code": 1, "error": null, "output": "x"}',
        "args": {"path": "/etc/passwd", "list": [1.5, None, Exploding()]},
        "status": Exploding(),
        "assistant_message": {"content": "ok"},
        "user_message": "Bearer abcdefghijklmnopqrstuvwxyz0123456789",
        "request_messages": [{"role": "user", "content": "x" * 20000}],
    }


@pytest.mark.parametrize("capture", [False, True])
def test_the_record_written_from_the_kwargs_equals_the_one_from_their_copies(capture: bool) -> None:
    # The binding writes every call's spool record straight from the Python
    # kwargs, and decodes from that line (the gate on the hook thread, the
    # writer, a replay). It must carry what plain copies of the kwargs hold,
    # or every one of them would decode another event than Hermes passed.
    calls = [(r["hook"], r["kwargs"]) for f in ALL_FIXTURES for r in fixture_records(f)]
    calls += [(hook, hostile_kwargs()) for hook in ALL_HOOKS]
    calls += [("api_request_error", {"session_id": "s", "error": "a plain message"})]
    calls += [("post_tool_call", {"session_id": "s", "tool_call_id": "c", "result": "plain text"})]
    checked = 0
    for hook, kwargs in calls:
        if hook not in ALL_HOOKS:
            continue
        direct, copied = _native._spool_records(hook, kwargs, capture)
        assert direct.endswith("\n") and copied.endswith("\n")
        assert json.loads(direct) == json.loads(copied), (hook, direct, copied)
        checked += 1
    assert checked > 200


def test_a_tool_calls_arguments_leave_only_a_digest_uncaptured() -> None:
    # The runaway watch compares tool calls by their arguments' digest; with
    # capture off that digest is all the record keeps, and a megabyte of
    # write_file content is not copied whole for it.
    def record(args: dict) -> dict:
        kwargs = {"session_id": "s", "tool_call_id": "c", "tool_name": "write_file", "args": args}
        direct, _ = _native._spool_records("pre_tool_call", kwargs, False)
        return json.loads(direct)

    big = {"path": "out.txt", "content": "y" * 1_000_000}
    first, again = record(big), record(dict(big))
    assert "args" not in first["kwargs"], first
    assert len(json.dumps(first)) < 1000
    assert first["kwargs"]["args_digest"] == again["kwargs"]["args_digest"]
    longer = record({"path": "out.txt", "content": "y" * 1_000_001})
    other = record({"path": "other.txt", "content": "y" * 1_000_000})
    digests = {
        first["kwargs"]["args_digest"],
        longer["kwargs"]["args_digest"],
        other["kwargs"]["args_digest"],
    }
    assert len(digests) == 3, digests


def test_content_stays_out_of_the_store_unless_capture_is_on(fresh_store) -> None:
    code = textwrap.dedent(
        """
        from hermes_meter import _native
        _native.Hook("pre_llm_call")(session_id="sc", turn_id="sc:t", user_message="SECRET-PROMPT",
                                     conversation_history=[{"content": "SECRET-HISTORY"}])
        _native.Hook("post_tool_call")(session_id="sc", tool_call_id="c1", tool_name="read_file",
                                       args={"path": "SECRET-ARGS"}, result='{"content": "SECRET-RESULT"}')
        assert _native.flush(5.0)
        """
    )
    for capture, expect in [("false", False), ("true", True)]:
        home = fresh_store / capture
        p = run_python(
            code, HERMES_METER_HOME=str(home), OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=capture
        )
        assert p.returncode == 0, p.stderr
        payload = " ".join(r[0] for r in query("SELECT payload FROM journal", store_dir=home))
        content = " ".join(r[0] for r in query("SELECT value FROM span_content", store_dir=home))
        # Captured content lives in span_content only, under its retention;
        # the journal keeps events without it.
        for secret in ("SECRET-ARGS", "SECRET-RESULT"):
            assert (secret in content) is expect, (capture, secret, content)
        for secret in ("SECRET-PROMPT", "SECRET-ARGS", "SECRET-RESULT"):
            assert secret not in payload, (capture, secret, payload)
        # History is never copied, capture or not.
        assert "SECRET-HISTORY" not in payload + content


class Exploding:
    """An object whose every attribute read raises."""

    def __getattr__(self, name):
        raise RuntimeError(f"no {name} for you")


@pytest.mark.parametrize("name", ALL_HOOKS)
def test_a_hook_never_raises_whatever_it_is_given(name: str) -> None:
    hook = _native.Hook(name)
    deep: list = []
    for _ in range(200):
        deep = [deep]
    weird = [
        {},
        {"session_id": None},
        {"session_id": 12, "turn_id": 3.5, "api_request_id": b"bytes", "tool_call_id": ["x"]},
        {
            "session_id": "w",
            "turn_id": "w:t",
            "api_request_id": "w:t:api:1",
            "tool_call_id": "c",
            "usage": {"input_tokens": 10**30, "output_tokens": float("nan")},
            "assistant_message": Exploding(),
            "result": Exploding(),
            "error": Exploding(),
            "duration_ms": -5,
            "is_first_turn": "maybe",
            "args": deep,
            "model": Exploding(),
            7: "non-string key",
        },
    ]
    for kwargs in weird:
        clean = {k: v for k, v in kwargs.items() if isinstance(k, str)}
        assert hook(**clean) is None
        assert hook("positional", **clean) is None


def test_a_panic_on_the_rust_path_never_reaches_the_caller(fresh_store) -> None:
    code = textwrap.dedent(
        """
        import logging, sys
        logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(name)s %(message)s")
        from hermes_meter import _native
        try:
            r = _native.Hook("post_tool_call")(session_id="p", tool_call_id="c", tool_name="t")
        except BaseException as e:
            print("ESCAPED", type(e).__name__)
            raise SystemExit(3)
        print("RETURNED", r)
        # The other hooks go on working.
        print("OTHER", _native.Hook("on_session_start")(session_id="p"))
        print("FLUSHED", _native.flush(5.0))
        """
    )
    p = run_python(code, HERMES_METER_HOME=str(fresh_store), HERMES_METER_TEST_PANIC="post_tool_call")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "RETURNED None" in p.stdout
    assert "hermes_meter Hook.Panicked: post_tool_call hook panicked" in p.stdout
    assert "OTHER None" in p.stdout and "FLUSHED True" in p.stdout
    assert query("SELECT hook FROM journal", store_dir=fresh_store) == [("on_session_start",)]


#: A script's start: the plugin registered with a stand-in for Hermes's
#: context, its hooks in ``ctx.hooks``.
REGISTERED = """
import hermes_meter
class Ctx:
    def __init__(self): self.hooks = {}
    def register_hook(self, name, cb): self.hooks[name] = cb
    def register_cli_command(self, *a, **k): pass
    def register_command(self, *a, **k): pass
ctx = Ctx()
hermes_meter.register(ctx)
"""


def test_os_exit_commits_first_and_a_forked_child_exits_at_once(fresh_store) -> None:
    # Hermes ends `hermes -z`, kanban workers and the gateway with os._exit,
    # which skips atexit; hooks do not flush, the exit does.
    code = REGISTERED + textwrap.dedent(
        """
        import os, time
        ctx.hooks["on_session_start"](session_id="ex", platform="cli", model="gpt-4o")
        ctx.hooks["post_tool_call"](session_id="ex", tool_call_id="c1", tool_name="read_file", result="{}")
        ctx.hooks["on_session_end"](session_id="ex", turn_id="ex:t", completed=True, interrupted=False)
        # A forked child inherits the wrapper, not the writer thread.
        t0 = time.monotonic()
        child = os.fork()
        if child == 0:
            os._exit(5)
        _, status = os.waitpid(child, 0)
        print("CHILD", os.waitstatus_to_exitcode(status), time.monotonic() - t0 < 1.0, flush=True)
        os._exit(7)
        """
    )
    p = run_python(code, HERMES_METER_HOME=str(fresh_store))
    assert p.returncode == 7, p.stdout + p.stderr
    assert "CHILD 5 True" in p.stdout, p.stdout
    # Read without replaying the spool: the exit committed it all, and
    # emptied the spool, so the next process has nothing to recover.
    hooks = query("SELECT hook FROM journal WHERE session_id = 'ex' ORDER BY seq", store_dir=fresh_store)
    assert [h for (h,) in hooks] == ["on_session_start", "post_tool_call", "on_session_end"]
    assert query("SELECT status FROM runs WHERE session_id = 'ex'", store_dir=fresh_store) == [("ok",)]
    spooled = [f.stat().st_size for f in (fresh_store / "spool").glob("*.jsonl")]
    assert sum(spooled) == 0, spooled


def test_daemon_threads_calling_hooks_while_the_process_exits_never_crash_it(tmp_path) -> None:
    # Hermes's background review runs on a daemon thread that keeps calling
    # hooks while the main thread exits. CPython < 3.14 ends such a thread
    # with pthread_exit when it takes the GIL back during finalization,
    # which kills the process if that happens inside a hook (SIGSEGV).
    # Runaway stop makes every pre_tool_call wait for its verdict.
    code = REGISTERED + textwrap.dedent(
        """
        import threading, time
        calls = [0, 0]
        def loop(i, hook):
            n = 0
            while True:
                n += 1
                ctx.hooks[hook](session_id=f"d{i}", tool_call_id=f"c{n}", tool_name="terminal",
                                args={"command": f"step {n}"}, result="{}")
                calls[i] = n
        for i, hook in enumerate(["post_tool_call", "pre_tool_call"]):
            threading.Thread(target=loop, args=(i, hook), daemon=True).start()
        time.sleep(0.15)
        print("CALLS", calls[0], calls[1], flush=True)
        """
    )
    for run in range(3):
        store = tmp_path / f"meter{run}"
        store.mkdir()
        (store / "budgets.toml").write_text('[runaway]\naction = "stop"\n')
        p = run_python(code, HERMES_METER_HOME=str(store))
        assert p.returncode == 0, (run, p.returncode, p.stderr[-2000:])
        assert "Fatal Python error" not in p.stderr, p.stderr[-2000:]
        made = [int(n) for n in p.stdout.split()[1:3]]
        assert min(made) > 0, p.stdout
        # Every call that returned before the count was printed is in the
        # store or its spool (which the next process replays).
        recovered = run_python(
            "from hermes_meter import _native; _native.Hook('on_session_start')(session_id='r'); "
            "print(_native.flush(60.0))",
            HERMES_METER_HOME=str(store),
        )
        assert recovered.stdout.strip() == "True", recovered.stderr
        for i, hook in enumerate(["post_tool_call", "pre_tool_call"]):
            (count,) = query(
                "SELECT COUNT(*) FROM journal WHERE session_id = ? AND hook = ?",
                f"d{i}",
                hook,
                store_dir=store,
            )[0]
            assert count >= made[i], (run, hook, count, made[i])


def test_a_store_that_cannot_be_opened_is_reported_once_and_hooks_do_not_wait(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    code = textwrap.dedent(
        """
        import logging, sys, time
        fmt = "%(levelname)s %(name)s %(message)s"
        logging.basicConfig(stream=sys.stdout, level=logging.INFO, format=fmt)
        from hermes_meter import _native
        print("REASON", _native.start())
        t0 = time.monotonic()
        for _ in range(3):
            assert _native.Hook("on_session_start")(session_id="d") is None
        print("FLUSHED", _native.flush(1.0))
        print("FAST", time.monotonic() - t0 < 0.5)
        """
    )
    p = run_python(code, HERMES_METER_HOME=str(blocker / "meter"))
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"REASON the store {blocker / 'meter' / 'hermes-meter.db'} is unusable" in p.stdout
    assert p.stdout.count("ERROR hermes_meter Store.Fault") == 1, p.stdout
    assert "FLUSHED False" in p.stdout and "FAST True" in p.stdout, p.stdout


def test_an_export_failure_is_logged_to_the_hermes_meter_logger_naming_the_endpoint(tmp_path) -> None:
    import socket

    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    code = textwrap.dedent(
        """
        import logging, sys
        fmt = "%(levelname)s %(name)s %(message)s"
        logging.basicConfig(stream=sys.stdout, level=logging.INFO, format=fmt)
        from hermes_meter import _native
        _native.start()
        _native.Hook("on_session_start")(session_id="s", platform="cli")
        _native.Hook("on_session_finalize")(session_id="s")
        _native.flush(2.0)
        """
    )
    p = run_python(
        code,
        HERMES_METER_HOME=str(tmp_path / "meter"),
        OTEL_EXPORTER_OTLP_ENDPOINT=dead,
        HERMES_METER_SESSION_GRACE_SECONDS="0",
    )
    assert p.returncode == 0, p.stdout + p.stderr
    lines = [line for line in p.stdout.splitlines() if " hermes_meter Export.Failed: " in line]
    assert lines, p.stdout + p.stderr
    assert lines[0].startswith("WARNING hermes_meter Export.Failed: traces to " + dead), lines
    assert "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" in lines[0], lines


def test_no_reference_to_a_hermes_object_is_kept() -> None:
    class Response:
        content = "hello"

    usage = {"input_tokens": 5, "output_tokens": 1}
    msg = Response()
    before = (sys.getrefcount(usage), sys.getrefcount(msg))
    for n in range(50):
        _native.Hook("post_api_request")(
            session_id="refs", api_request_id=f"refs:api:{n}", usage=usage, assistant_message=msg
        )
    gc.collect()
    assert (sys.getrefcount(usage), sys.getrefcount(msg)) == before


def test_the_slash_command_shows_session_cost_and_today(tmp_path) -> None:
    ctx = FakeContext()
    hermes_meter.register(ctx)
    recs = fixture_records("bigcache")
    replay(recs, ctx.hooks)
    session = recs[0]["kwargs"]["session_id"]
    text = _native.meter_command("", session)
    assert f"session   {session}" in text
    assert "input 5000 · output 3000 · cache read 100000 · cache write 15000" in text
    assert text.splitlines()[-2].startswith("today")
    assert text.splitlines()[-1].startswith("viewer    the Meter tab of `hermes dashboard`")
    assert f"`hermes-meter trace {session}`" in text
    # Without an id from Hermes, the last session a turn started in.
    assert session in ctx.commands["meter"]["handler"]("")


def test_the_slash_command_in_the_gateway_shows_the_callers_session_only(fresh_store) -> None:
    code = textwrap.dedent(
        """
        import contextvars, hermes_meter
        class Ctx:
            def __init__(self): self.hooks, self.commands = {}, {}
            def register_hook(self, name, cb): self.hooks[name] = cb
            def register_cli_command(self, *a, **k): pass
            def register_command(self, name, handler, **k): self.commands[name] = handler
        ctx = Ctx()
        hermes_meter.register(ctx)
        llm = ctx.hooks["pre_llm_call"]
        for who in ("alice", "bob"):
            llm(session_id=who + "-s", turn_id=who + ":1", platform="telegram", sender_id=who, model="gpt-4o")
        meter = ctx.commands["meter"]
        # What gateway/run.py's _handle_message does for one message, in its task.
        class Source:
            def __init__(self, user): self.user_id = user
        class Event:
            def __init__(self, user): self.source = Source(user)
        class Gateway:
            def _session_key_for_source(self, source): return "agent:main:telegram:dm:" + source.user_id
        class SessionStore:
            def __init__(self, known): self.known = known
            def peek_session_id(self, key): return self.known.get(key)
        def handle(user, known):
            dispatch = ctx.hooks["pre_gateway_dispatch"]
            dispatch(event=Event(user), gateway=Gateway(), session_store=SessionStore(known))
            return meter("").replace(chr(10), " | ")
        print("ALICE", contextvars.copy_context().run(handle, "alice", {}))
        bound = {"agent:main:telegram:dm:carol": "carol-s"}
        print("CAROL", contextvars.copy_context().run(handle, "carol", bound))
        print("NOBODY", meter("").replace(chr(10), " | "))
        """
    )
    p = run_python(code, HERMES_METER_HOME=str(fresh_store))
    assert p.returncode == 0, p.stderr
    out = {line.split(" ", 1)[0]: line for line in p.stdout.splitlines()}
    # A new chat (no session bound yet): the asking user's last session.
    assert "alice-s" in out["ALICE"] and "bob-s" not in out["ALICE"], out["ALICE"]
    # The session the gateway has bound to the chat.
    assert "carol-s" in out["CAROL"], out["CAROL"]
    # Two users seen and the caller unknown: no session rather than a guess.
    nobody = out["NOBODY"]
    assert "alice-s" not in nobody and "bob-s" not in nobody and "unknown here" in nobody, nobody


def test_the_console_script_is_the_rust_cli() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "hermes_meter.cli", "--home", str(STORE_DIR), "status", "--json"],
        text=True,
        capture_output=True,
    )
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["rows"]["journal"] >= 0
    p = subprocess.run([sys.executable, "-m", "hermes_meter.cli", "no-such-command"], capture_output=True)
    assert p.returncode == 2


def test_errors_outside_hooks_are_hermes_meter_errors() -> None:
    assert issubclass(hermes_meter.HermesMeterError, Exception)
    with pytest.raises(hermes_meter.HermesMeterError):
        _native.Hook("transform_tool_result")


def test_hostile_values_are_recorded_as_far_as_possible_never_negative() -> None:
    """10 MB strings, 10,000-deep nesting, lone surrogates, NaN, inf and
    negative counts: the hook returns None, the event lands with what could
    be read, and no total goes negative."""
    sid = f"hostile-{uuid.uuid4().hex[:8]}"
    deep: list = []
    for _ in range(10_000):
        deep = [deep]
    huge = "x" * (10 * 1024 * 1024)
    start = _native.Hook("on_session_start")
    post = _native.Hook("post_api_request")
    tool = _native.Hook("post_tool_call")
    assert start(session_id=sid, platform="cli\ud800", model=huge) is None
    assert (
        post(
            session_id=sid,
            api_request_id=f"{sid}:api:1",
            model="gpt-4o",
            usage={
                "input_tokens": -100,
                "output_tokens": float("inf"),
                "cache_read_tokens": float("nan"),
                "cache_write_tokens": "12",
                "reasoning_tokens": deep,
            },
            api_duration=float("nan"),
            response_model=huge,
        )
        is None
    )
    assert (
        tool(
            session_id=sid,
            tool_call_id="c1",
            tool_name="terminal",
            result=huge,
            args={"deep": deep},
            duration_ms=-7,
        )
        is None
    )
    assert _native.flush(10.0)
    rows = query(
        "SELECT platform, length(model), input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,"
        " cost_usd, llm_calls, tool_calls FROM runs WHERE session_id = ?",
        sid,
    )
    assert len(rows) == 1
    platform, model_len, inp, out, cache_read, cache_write, cost, llm_calls, tool_calls = rows[0]
    assert platform.startswith("cli")  # the lone surrogate is replaced, not fatal
    assert model_len <= 1024  # cut, not refused
    assert (inp, cache_read, cache_write) == (0, 0, 12)
    assert out >= 0 and cost >= 0
    assert (llm_calls, tool_calls) == (1, 1)
    latency = query("SELECT latency_s FROM tool_calls WHERE session_id = ?", sid)[0][0]
    assert latency is None or latency >= 0


def test_hermes_meter_is_the_whole_hermes_meter_command_line(capfd) -> None:
    ctx = FakeContext()
    hermes_meter.register(ctx)
    parser = argparse.ArgumentParser(prog="hermes meter")
    ctx.cli["meter"]["setup_fn"](parser)
    handler = ctx.cli["meter"]["handler_fn"]
    args = parser.parse_args(["report", "--since", "7d", "--json"])
    assert (args.meter_command, args.args) == ("report", ["--since", "7d", "--json"])
    with pytest.raises(SystemExit) as done:
        handler(args)
    assert done.value.code == 0
    assert '"totals"' in capfd.readouterr().out
    # budget and trace too, with their exit codes.
    with pytest.raises(SystemExit) as done:
        handler(parser.parse_args(["budget", "list", "--json"]))
    assert done.value.code == 0
    assert capfd.readouterr().out.lstrip().startswith("{")
    with pytest.raises(SystemExit) as done:
        handler(parser.parse_args(["trace", "no-such-session"]))
    assert done.value.code != 0
    with pytest.raises(SystemExit) as done:
        handler(parser.parse_args([]))
    assert done.value.code == 2


def test_hermes_meter_lists_every_command_of_the_standalone_command_line() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "hermes_meter.cli", "--help"], text=True, capture_output=True, check=True
    ).stdout
    section = out.split("Commands:", 1)[1].split("Options:", 1)[0]
    standalone = {line.split()[0] for line in section.splitlines() if line.strip()} - {"help"}
    assert set(hermes_meter._CLI_COMMANDS) == standalone


def test_hermes_meter_into_a_closed_pipe_ends_quietly(tmp_path) -> None:
    code = textwrap.dedent(
        """
        import argparse, hermes_meter, sys
        class Ctx:
            cli = {}
            def register_hook(self, *a): pass
            def register_cli_command(self, name, help, setup_fn, handler_fn=None, description=""):
                self.cli[name] = (setup_fn, handler_fn)
            def register_command(self, *a, **k): pass
        ctx = Ctx()
        hermes_meter.register(ctx)
        parser = argparse.ArgumentParser(prog="hermes meter")
        ctx.cli["meter"][0](parser)
        ctx.cli["meter"][1](parser.parse_args(["status"]))
        """
    )
    p = subprocess.run(
        f"{sys.executable} -c {shlex.quote(code)} | head -c 1",
        shell=True,
        text=True,
        capture_output=True,
        env=dict(os.environ, HERMES_METER_HOME=str(tmp_path / "meter")),
        timeout=60,
    )
    assert "Traceback" not in p.stderr, p.stderr


AUX_HERMES = """
import contextvars, sys, types, json
plugins = types.ModuleType("hermes_cli.plugins")
plugins.VALID_HOOKS = set(json.loads(sys.argv[1]))
sys.modules["hermes_cli"] = types.ModuleType("hermes_cli")
sys.modules["hermes_cli.plugins"] = plugins
# agent.aux_accounting and agent.usage_pricing shaped after Hermes 0.19.0's.
agent = types.ModuleType("agent")
acc = types.ModuleType("agent.aux_accounting")
acc._EXCLUDED_TASKS = frozenset({"moa_reference", "moa_aggregator"})
acc._accounting = contextvars.ContextVar("aux_accounting_context", default=None)
acc.get_accounting_context = lambda: acc._accounting.get()
written = []
def record_aux_usage(response, task, *, provider=None, base_url=None):
    ctx = acc._accounting.get()
    if ctx is not None and task not in acc._EXCLUDED_TASKS:
        written.append((ctx[1], task, response.usage.prompt_tokens))
acc.record_aux_usage = record_aux_usage
pricing = types.ModuleType("agent.usage_pricing")
def normalize_usage(raw, provider=None, api_mode=None):
    return types.SimpleNamespace(input_tokens=raw.prompt_tokens, output_tokens=raw.completion_tokens,
        cache_read_tokens=0, cache_write_tokens=0, reasoning_tokens=0)
pricing.normalize_usage = normalize_usage
agent.aux_accounting, agent.usage_pricing = acc, pricing
sys.modules.update({"agent": agent, "agent.aux_accounting": acc, "agent.usage_pricing": pricing})
import hermes_meter
from hermes_meter import _native
hooks = {}
class Ctx:
    def register_hook(self, name, cb): hooks.setdefault(name, []).append(cb)
    def register_cli_command(self, *a, **k): pass
    def register_command(self, *a, **k): pass
hermes_meter.register(Ctx())
def response(prompt, completion, **extra):
    usage = types.SimpleNamespace(prompt_tokens=prompt, completion_tokens=completion, **extra)
    return types.SimpleNamespace(model="gpt-4o-mini", usage=usage)
def aux_call(resp, task):
    # What Hermes's auxiliary client does: `from agent.aux_accounting import ...` at call time.
    from agent.aux_accounting import record_aux_usage
    record_aux_usage(resp, task, provider="openai", base_url="https://api.openai.com/v1")
# In a turn of s-aux: a title generation, billed by the provider at $0.001.
token = acc._accounting.set((object(), "s-aux"))
aux_call(response(1020, 42, cost=0.001), "title_generation")
acc._accounting.reset(token)
# A turn of s-two starts (pre_llm_call), then a /compress outside any turn:
# Hermes publishes no session and records nothing.
for cb in hooks.get("pre_llm_call", []):
    cb(session_id="s-two", turn_id="s-two:t1", task_id="s-two")
aux_call(response(3000, 200), "compression")
# Mixture of agents: an advisor is counted here (post_api_request carries
# only the aggregator's usage); the aggregator is the turn's own call.
aux_call(response(50, 5), "moa_reference")
aux_call(response(60, 6), "moa_aggregator")
assert _native.flush(5.0)
print(json.dumps({"hooks": sorted(hooks), "written": written}))
"""


def _aux_run(tmp_path, valid_hooks: list[str]) -> dict:
    code = AUX_HERMES.replace("sys.argv[1]", repr(json.dumps(valid_hooks)))
    p = run_python(code, HERMES_METER_HOME=str(tmp_path / "meter"))
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_auxiliary_calls_on_hermes_0_19_come_from_its_own_accounting(tmp_path) -> None:
    known = [h for h in ALL_HOOKS if h != "post_auxiliary_call"]
    out = _aux_run(tmp_path, known)
    assert "post_auxiliary_call" not in out["hooks"], "Hermes 0.19.0 does not know the hook"
    assert out["written"] == [["s-aux", "title_generation", 1020]], "Hermes's own write ran, unchanged"
    store = tmp_path / "meter"
    rows = query(
        "SELECT session_id, aux_task, model, input_tokens, output_tokens, cost_source FROM llm_calls"
        " ORDER BY session_id, input_tokens DESC",
        store_dir=store,
    )
    assert [tuple(r) for r in rows] == [
        # The /compress Hermes itself did not record counts against the
        # session of the last turn, priced by the table.
        ("s-aux", "title_generation", "gpt-4o-mini", 1020, 42, "provider"),
        ("s-two", "compression", "gpt-4o-mini", 3000, 200, "builtin"),
        ("s-two", "moa_reference", "gpt-4o-mini", 50, 5, "builtin"),
    ]
    costs = query(
        "SELECT cost_usd, estimate_usd FROM llm_calls ORDER BY session_id, input_tokens DESC", store_dir=store
    )
    assert costs[0][0] == 0.001 and costs[0][1] > 0, "the provider's figure, the estimate beside it"
    assert costs[1][0] > 0, "priced like any call (the built-in table knows gpt-4o-mini)"


def test_only_the_hooks_the_running_hermes_knows_are_registered(tmp_path) -> None:
    # Hermes 0.17.0's hook set: no approvals, no auxiliary hook.
    older = [
        h
        for h in ALL_HOOKS
        if h not in ("pre_approval_request", "post_approval_response", "post_auxiliary_call")
    ]
    out = _aux_run(tmp_path, older)
    assert sorted(set(out["hooks"])) == sorted(older), "nothing Hermes would warn about as unknown"


def test_auxiliary_calls_use_the_hook_where_hermes_has_it_and_are_never_counted_twice(tmp_path) -> None:
    out = _aux_run(tmp_path, ALL_HOOKS)
    assert "post_auxiliary_call" in out["hooks"]
    assert out["written"] == [["s-aux", "title_generation", 1020]]
    # The hook is Hermes's to fire: the accounting write no longer reports.
    assert query("SELECT COUNT(*) FROM llm_calls", store_dir=tmp_path / "meter")[0][0] == 0


def test_a_turn_less_auxiliary_call_counts_in_the_days_auxiliary_session(tmp_path) -> None:
    # Newer Hermes fires post_auxiliary_call with session_id "" for callers
    # outside a turn (cron, gateway idle work).
    code = AUX_HERMES.replace("sys.argv[1]", repr(json.dumps(ALL_HOOKS)))
    code = code.replace(
        "assert _native.flush(5.0)",
        """for cb in hooks["post_auxiliary_call"]:
    cb(session_id="", aux_task="compression", model="gpt-4o-mini", provider="openai",
       ended_at=time.time(), usage={"input_tokens": 700, "output_tokens": 30})
assert _native.flush(5.0)""",
    )
    p = run_python("import time\n" + code, HERMES_METER_HOME=str(tmp_path / "meter"))
    assert p.returncode == 0, p.stderr
    rows = query("SELECT session_id, aux_task, input_tokens FROM llm_calls", store_dir=tmp_path / "meter")
    # Not the last turn's session (in a gateway, some other user's).
    day = "aux_" + time.strftime("%Y%m%d", time.gmtime())
    assert [tuple(r) for r in rows] == [(day, "compression", 700)]


def test_auxiliary_calls_are_still_counted_where_hermes_dropped_its_compat_shim(tmp_path) -> None:
    # Hermes main keeps agent.aux_accounting.get_accounting_context only for
    # compatibility (compat_manifest.json); without it, nothing vanishes.
    known = [h for h in ALL_HOOKS if h != "post_auxiliary_call"]
    code = AUX_HERMES.replace("sys.argv[1]", repr(json.dumps(known)))
    code = code.replace("acc.get_accounting_context = lambda: acc._accounting.get()\n", "")
    code = code.replace(
        'print(json.dumps({"hooks"',
        'from hermes_meter import _integrations\nprint(json.dumps({"points": _integrations.lines(), "hooks"',
    )
    p = run_python(code, HERMES_METER_HOME=str(tmp_path / "meter"))
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    rows = query(
        "SELECT session_id, aux_task FROM llm_calls ORDER BY input_tokens DESC", store_dir=tmp_path / "meter"
    )
    assert ("s-two", "compression") in [tuple(r) for r in rows], "counted against the last turn's session"
    assert any("get_accounting_context" in line and "MISSING" in line for line in out["points"]), out[
        "points"
    ]
