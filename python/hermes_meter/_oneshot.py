"""What a person or a script sees of a budget: the notice line at the
prompt, and the exit code of a one-shot run a budget stopped.

A budget's notices and stops are written for the model (``pre_llm_call``
context, the block message, the stand-in response): Hermes shows a person
none of them. Here the person gets one line of each, without the sentence
meant for the agent: above the prompt of ``hermes chat`` (Hermes's own
``cli._cprint``), on stderr in a one-shot run (``chat -q``, ``hermes -z``:
stdout stays the answer alone). And a one-shot run a budget stopped exits
with :data:`EXIT_BUDGET_STOPPED` instead of 0, so a cron job or script can
tell (``hermes -z`` through ``hermes_cli.main._exit_after_oneshot``,
``chat -q`` / ``-Q`` through ``cli._finalize_single_query`` and, where
Hermes bound that before the plugin loaded (0.22), through the
``HermesCLI._release_active_session`` it ends with; read in Hermes 0.19.0
and 0.22.2). Everything here fails open: an error shows nothing and
leaves the exit code as Hermes chose it.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from . import _integrations, _native, _patch

#: The exit code of a one-shot run in which a budget stopped an LLM call or
#: blocked a tool call (Hermes itself uses 0, 1, 2, 75, 78 and 130).
EXIT_BUDGET_STOPPED = 3

_lock = threading.Lock()
#: The first stop of this process (its person's line), if any.
_stopped: str | None = None
#: The lines already shown in this process (each notice once).
_shown: set[str] = set()


def person_line(text: str) -> str:
    """One line for a person from a text written for the model: its first
    paragraph without the sentence addressed to the agent, control
    characters replaced (model names and ids come from outside)."""
    first = text.strip().split("\n", 1)[0]
    first = first.replace(_native.agent_only_text(), "").strip()
    if first.startswith("[hermes-meter ") and "] " in first:
        # "[hermes-meter budget notice] The ...": the line says whose it is.
        first = first.split("] ", 1)[1]
    return "".join(ch if ch.isprintable() else "?" for ch in first)


def noted(kind: str, text: str) -> None:
    """A verdict of ours reached Hermes: ``kind`` is ``block`` (a tool call
    refused), ``stop`` (an LLM call answered by the stand-in), ``aux`` (an
    auxiliary call stopped: a title, a compression, which ends no run's
    work) or ``context`` (a notice to the model). Shows the person its
    line and remembers a budget stop of the run's work for the exit code.
    Never raises."""
    global _stopped
    try:
        if not isinstance(text, str) or not text:
            return
        stop = kind in ("block", "stop") and not text.startswith(_native.protected_prefix())
        line = person_line(text)
        with _lock:
            if stop and _stopped is None:
                _stopped = line
            if line in _shown:
                return
            _shown.add(line)
        _show(line)
    except Exception:  # noqa: BLE001 - a line not shown must not break the call
        pass


def stopped() -> str | None:
    """The line of this process's first budget stop, if there was one."""
    with _lock:
        return _stopped


def _show(line: str) -> None:
    """Above the prompt of an interactive ``hermes chat``; on stderr in
    ``chat -q`` and ``hermes -z`` (in ``-z`` Hermes sends stderr to
    /dev/null while the agent runs: the stop is said again at exit); nowhere
    in the gateway or cron, whose person reads alerts (``HERMES_METER_ALERT_DELIVER``)."""
    text = f"hermes-meter: {line}"
    cli = _integrations.loaded("cli")
    if cli is None:
        if _integrations.loaded("hermes_cli.oneshot") is not None:
            _stderr(text)
        return
    printer = getattr(cli, "_cprint", None)
    if _prompt_running() and callable(printer):
        printer(f"\033[33m{text}\033[0m")
    else:
        _stderr(text)


def _prompt_running() -> bool:
    """Whether prompt_toolkit's application (Hermes's REPL) is running."""
    app_module = _integrations.loaded("prompt_toolkit.application")
    get_app = getattr(app_module, "get_app_or_none", None)
    if get_app is None:
        return False
    app = get_app()
    return app is not None and bool(getattr(app, "is_running", False))


def _stderr(text: str) -> None:
    try:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - a closed stderr
        pass


#: Whether the exit line was written (the exit paths of one run may pass
#: through more than one of the wraps below).
_exit_said = False


def _exit_code(rc: Any) -> Any:
    """``rc`` as a one-shot run ends: :data:`EXIT_BUDGET_STOPPED` in place
    of a success when a budget stopped this run (a failure keeps its code)."""
    global _exit_said
    line = stopped()
    if line is None or rc not in (0, None, EXIT_BUDGET_STOPPED):
        return rc
    if not _exit_said:
        _exit_said = True
        _stderr(f"hermes-meter: a budget stopped this run (exit code {EXIT_BUDGET_STOPPED}): {line}")
    return EXIT_BUDGET_STOPPED


def _end_stopped_run() -> None:
    """Called at the end of a ``chat -q`` run, in the ``finally`` Hermes
    ends it with: when the run was ending with success (no exception in
    flight, or ``SystemExit(0)``) and a budget stopped it, raises
    ``SystemExit(3)`` in its place. Another exception, a failure's code or
    a 3 already raised are left alone."""
    ending = sys.exc_info()[1]
    if ending is None:
        code: Any = 0
    elif isinstance(ending, SystemExit):
        code = ending.code
    else:
        return
    if code != EXIT_BUDGET_STOPPED and _exit_code(code) == EXIT_BUDGET_STOPPED:
        raise SystemExit(EXIT_BUDGET_STOPPED)


def wrap_oneshot_exit(module: Any) -> bool:
    """Wraps ``hermes_cli.main._exit_after_oneshot(rc)`` (``hermes -z``;
    Hermes 0.19.0 - 0.22.2: it flushes and calls ``os._exit(rc)``)."""

    def make(original: Any) -> Any:
        def _exit_after_oneshot(rc: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                rc = _exit_code(rc)
            except Exception:  # noqa: BLE001 - Hermes's code then
                pass
            return original(rc, *args, **kwargs)

        return _exit_after_oneshot

    _patch.wrap(module, "_exit_after_oneshot", make)
    return _patch.is_wrapped(module, "_exit_after_oneshot")


def wrap_query_exit(module: Any) -> bool:
    """Wraps ``cli._finalize_single_query(cli)``, which ``chat -q`` and
    ``-Q`` call in the ``finally`` of their run (Hermes 0.19.0 - 0.22.2):
    after it, a run a budget stopped that was ending with success (no
    exception, or ``SystemExit(0)``) ends with ``SystemExit(3)``."""

    def make(original: Any) -> Any:
        def _finalize_single_query(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            _end_stopped_run()
            return result

        return _finalize_single_query

    _patch.wrap(module, "_finalize_single_query", make)
    return _patch.is_wrapped(module, "_finalize_single_query")


def wrap_release_exit(cli_class: Any) -> bool:
    """Wraps ``cli.HermesCLI._release_active_session``, the last call of
    ``_finalize_single_query`` (Hermes 0.19.0 - 0.22.2), for the one-shot
    runs of a ``cli`` object marked ``_single_query_mode`` (Hermes 0.22):
    there ``chat -q`` binds ``_finalize_single_query`` before the plugin is
    loaded, so only a method looked up on the object at the end is ours to
    wrap. A REPL's object is never marked."""

    def make(original: Any) -> Any:
        def _release_active_session(self: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(self, *args, **kwargs)
            if getattr(self, "_single_query_mode", False) is True:
                _end_stopped_run()
            return result

        return _release_active_session

    _patch.wrap(cli_class, "_release_active_session", make)
    return _patch.is_wrapped(cli_class, "_release_active_session")
