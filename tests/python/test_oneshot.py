"""What a person and a script see of a budget stop (``_oneshot``): the line,
and the exit code of a one-shot run, with the shapes of Hermes 0.19.0 and
0.22.2's exit paths (the e2e tests run the real ones)."""

from __future__ import annotations

import sys
import threading
import time
import types

import pytest
from hermes_meter import _aux, _native, _oneshot


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.setattr(_oneshot, "_stopped", None)
    monkeypatch.setattr(_oneshot, "_shown", set())
    monkeypatch.setattr(_oneshot, "_exit_said", False)


def test_a_person_reads_one_line_without_the_agents_sentence_or_control_characters() -> None:
    text = (
        "[hermes-meter budget notice] The global daily budget of model \x1b]52;c;x\x07m has spent $0.41"
        f" of $0.50 (82%). It is nearly used up; it resets at 00:00. {_native.agent_only_text()}\n\nMore."
    )
    line = _oneshot.person_line(text)
    assert line.startswith("The global daily budget")
    assert _native.agent_only_text() not in line
    assert "\x1b" not in line and "\x07" not in line and "More." not in line


def test_a_stop_is_shown_once_on_stderr_and_decides_the_exit_code(monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "hermes_cli.oneshot", types.ModuleType("hermes_cli.oneshot"))
    stop = "BUDGET-EXCEEDED: hermes-meter blocked this call: the global daily budget is exhausted. "
    stop += _native.agent_only_text()
    _oneshot.noted("stop", stop)
    _oneshot.noted("stop", stop)
    err = capsys.readouterr().err
    assert err.count("hermes-meter: BUDGET-EXCEEDED") == 1, err
    assert _oneshot._exit_code(0) == _oneshot.EXIT_BUDGET_STOPPED
    assert _oneshot._exit_code(None) == _oneshot.EXIT_BUDGET_STOPPED
    assert _oneshot._exit_code(1) == 1, "a failure keeps its own code"
    assert "a budget stopped this run (exit code 3)" in capsys.readouterr().err


def test_a_refusal_to_lift_the_brake_and_a_notice_are_no_stop(capsys) -> None:
    _oneshot.noted("block", f"{_native.protected_prefix()} hermes-meter refused this call")
    _oneshot.noted("context", "[hermes-meter budget notice] The budget is nearly used up.")
    assert _oneshot.stopped() is None
    assert _oneshot._exit_code(0) == 0


def _hermes_main(calls: list) -> types.ModuleType:
    """The shape of ``hermes_cli.main``'s one-shot exit (it calls os._exit)."""
    module = types.ModuleType("hermes_cli.main")

    def _exit_after_oneshot(rc: object) -> None:
        calls.append(rc)

    module._exit_after_oneshot = _exit_after_oneshot  # type: ignore[attr-defined]
    return module


def test_hermes_z_exits_3_after_a_stop_and_0_otherwise() -> None:
    calls: list = []
    main = _hermes_main(calls)
    assert _oneshot.wrap_oneshot_exit(main)
    assert _oneshot.wrap_oneshot_exit(main), "wrapping again keeps one wrapper"
    main._exit_after_oneshot(0)
    _oneshot.noted("block", "BUDGET-EXCEEDED: hermes-meter blocked this call")
    main._exit_after_oneshot(0)
    main._exit_after_oneshot(2)
    assert calls == [0, 3, 2]


def _cli(finalized: list) -> types.ModuleType:
    module = types.ModuleType("cli")

    def _finalize_single_query(cli: object) -> None:
        finalized.append(cli)

    module._finalize_single_query = _finalize_single_query  # type: ignore[attr-defined]
    return module


def _chat_q(cli: types.ModuleType, exit_code: int | None) -> int:
    """``chat -q``'s ending as Hermes writes it: the run (ending in
    ``sys.exit(code)`` on -Q / 0.22, returning on 0.19's -q) in a ``try``
    whose ``finally`` finalizes; the process's exit code."""
    try:
        try:
            if exit_code is not None:
                raise SystemExit(exit_code)
        finally:
            cli._finalize_single_query("the cli")
    except SystemExit as e:
        return int(e.code or 0)
    return 0


def test_chat_q_exits_3_after_a_stop_whichever_way_hermes_ends_it() -> None:
    finalized: list = []
    cli = _cli(finalized)
    assert _oneshot.wrap_query_exit(cli)
    assert _chat_q(cli, None) == 0 and _chat_q(cli, 0) == 0
    _oneshot.noted("stop", "BUDGET-EXCEEDED: hermes-meter blocked this call")
    assert _chat_q(cli, None) == 3, "0.19's -q returns"
    assert _chat_q(cli, 0) == 3, "-Q and 0.22 exit 0"
    assert _chat_q(cli, 1) == 1, "a failed run keeps its 1"
    assert _chat_q(cli, 130) == 130
    assert finalized == ["the cli"] * 6, "Hermes's own finalization always runs"


def test_a_stopped_auxiliary_call_ends_no_run_with_3() -> None:
    _oneshot.noted("aux", "BUDGET-EXCEEDED: hermes-meter blocked this call: the title")
    assert _oneshot.stopped() is None
    assert _oneshot._exit_code(0) == 0


class _Cli:
    """The shape of Hermes's ``HermesCLI``: 0.22 marks a one-shot run's."""

    def __init__(self, single: bool) -> None:
        if single:
            self._single_query_mode = True
        self.released = 0

    def _release_active_session(self) -> None:
        self.released += 1


def test_chat_q_exits_3_through_the_release_hermes_0_22_ends_with(monkeypatch) -> None:
    monkeypatch.setattr(_oneshot, "_exit_said", False)
    cls = type("HermesCLI", (_Cli,), {})
    assert _oneshot.wrap_release_exit(cls)

    def finalize(cli: object, code: int | None) -> int:
        try:
            try:
                if code is not None:
                    raise SystemExit(code)
            finally:
                cli._release_active_session()  # type: ignore[attr-defined]
        except SystemExit as e:
            return int(e.code or 0)
        return 0

    one_shot, repl = cls(True), cls(False)
    assert finalize(one_shot, 0) == 0
    _oneshot.noted("stop", "BUDGET-EXCEEDED: hermes-meter blocked this call")
    assert finalize(one_shot, 0) == 3
    assert finalize(one_shot, 1) == 1, "a failure keeps its code"
    assert finalize(repl, None) == 0, "a REPL's exit is never changed"
    assert one_shot.released == 3 and repl.released == 1


def test_the_exit_waits_for_a_title_call_still_in_flight_and_no_longer_than_told() -> None:
    recorded: list[str] = []

    def title(delay: float) -> None:
        time.sleep(delay)
        recorded.append("title")

    quick = threading.Thread(target=title, args=(0.3,), name=_aux.TITLE_THREAD, daemon=True)
    other = threading.Thread(target=time.sleep, args=(0.6,), name="not-a-title", daemon=True)
    quick.start()
    other.start()
    assert _aux.wait_for_title_calls(5.0) == 0
    assert recorded == ["title"]
    assert other.is_alive()  # only Hermes's title threads are waited for

    slow = threading.Thread(target=title, args=(3.0,), name=_aux.TITLE_THREAD, daemon=True)
    slow.start()
    started = time.monotonic()
    assert _aux.wait_for_title_calls(0.2) == 1
    assert time.monotonic() - started < 2.0
