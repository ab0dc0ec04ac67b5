"""hermes-meter: OpenTelemetry bridge and spend ledger for the Hermes Agent.

Hermes loads this module through the ``hermes_agent.plugins`` entry point
(``hermes-meter = hermes_meter``) and calls :func:`register`. Everything
behind the hooks is Rust (``hermes_meter._native``): this file only wires
the native callables into Hermes.
"""

from __future__ import annotations

import argparse
import atexit
import contextvars
import functools
import os
import sys
from typing import Any

from . import _aux, _integrations, _native, _oneshot, _profiles, _skips
from ._native import HermesMeterError

__all__ = ["HermesMeterError", "register"]
__version__ = _native.__version__

# How long a process exit waits for queued hook events to commit and their
# spans to be sent.
_EXIT_FLUSH_SECONDS = 2.0


def register(ctx: Any) -> None:
    """Register the hooks, ``hermes meter ...`` and ``/meter`` with Hermes.

    Does only what cannot wait, and imports no Hermes module: Hermes 0.21
    and later call it on a plugin-discovery thread, with a deadline, while
    the main thread may be importing the agent (see ``_integrations``).
    Reaching into Hermes's internals waits for the first hook call.

    A multi-profile gateway calls this once per profile that enabled the
    plugin, each time in that profile's scope: the hooks made here record
    their calls for ``ctx.profile_name``, into the one store of the process.
    """
    elapsed = _integrations.timer()
    # Hermes's active profile, for per-profile budgets, and its home (where
    # the process-wide patches find which profile calls them).
    profile = _profiles.name_of(ctx)
    home = _profiles.home_key()
    _native.start(profile)
    # A person sees a line of each notice and stop; a one-shot run a budget
    # stopped exits 3 (the wraps wait for the points to settle).
    _native.set_verdict_sink(_oneshot.noted)
    known = _hermes_hooks()
    host = _in_plugin_host(ctx)
    enforce = _native.budget_mode() == "enforce"
    ours: dict[str, Any] = {}
    recorders: dict[str, Any] = {}
    coarse = _skips.coarse_single_flight()
    for name in _native.hook_names():
        # Only the hooks this Hermes knows: it warns at every start about
        # the others (older releases lack approvals, subagent_start, ...).
        if known is not None and name not in known:
            continue
        if name == "pre_tool_call" and coarse:
            # Hermes 0.21.x runs one call of a callback at a time and blocks
            # a tool whose pre_tool_call it skipped: registered, it would
            # block the tools of every parallel batch.
            continue
        hook = _native.Hook(name, profile=profile)
        if name == "pre_llm_call":
            # The session of the turn starting: where an auxiliary call
            # made outside a turn is counted (see _aux).
            hook = _aux.remembering(hook, home)
        ctx.register_hook(name, hook)
        ours[name] = hook
        recorders[name] = _native.Hook(name, profile=profile).record_skipped
    # Calls Hermes 0.21+ skips while another call of the same callback runs:
    # recorded from its dispatcher, and counted (see _skips).
    _skips.install(ours, recorders, registration=f"{profile or ''}\0{home}")
    if known is not None and "post_auxiliary_call" not in known:
        # Hermes 0.19 - 0.21.4: auxiliary calls fire no hook; ours is fed
        # from the chokepoint of Hermes's own auxiliary accounting, wrapped
        # when the points settle.
        _aux.add_profile(_native.Hook("post_auxiliary_call", profile=profile), home)
    # Who is asking, for `/meter` in the gateway (the command gets only its text).
    if known is None or "pre_gateway_dispatch" in known:
        ctx.register_hook("pre_gateway_dispatch", _remember_gateway_caller)
    has_middleware = hasattr(ctx, "register_middleware")
    if enforce and has_middleware:
        # Stops the LLM calls of a session whose budget is exhausted (hooks
        # can only observe a call; middleware can answer it instead).
        from . import _budget

        execution = _budget.host_llm_execution if host else _budget.llm_execution
        ctx.register_middleware("llm_execution", execution)
        # Routes the calls of a session past its [downgrade] line to the
        # cheaper model (a no-op without one).
        ctx.register_middleware("llm_request", _budget.llm_request)
        if known is not None and "pre_auxiliary_call" in known:
            # Whose auxiliary call comes next: the middleware of a title
            # made after the turn ended gets no session of its own.
            ctx.register_hook("pre_auxiliary_call", _budget.note_auxiliary_call)
        if known is not None and "transform_api_error_classification" in known:
            # Hermes main would retry a stop as an unknown API error.
            ctx.register_hook("transform_api_error_classification", _budget.classify_api_error)
    if not host:
        # In the plugin host Hermes skips CLI commands (they belong to the
        # Hermes process's parser): `hermes-meter` is the command line there.
        ctx.register_cli_command(
            "meter",
            help="hermes-meter: spend report, budgets, traces and store status",
            setup_fn=_setup_cli,
            handler_fn=_run_cli,
            description="Runs the hermes-meter command line (the same as `hermes-meter`).",
        )
    ctx.register_command(
        "meter",
        _SlashCommand(ctx),
        description="This session's cost and tokens, and today's spend (hermes-meter)",
    )
    # The agent can ask what it spent and what is left (read-only).
    from . import _agent_tool

    agent_tool = _agent_tool.register(ctx)
    _flush_at_exit()
    # The dashboard finds its tab among files: a `hermes dashboard` process
    # runs no hook, so this cannot wait (a few small files compared).
    _install_dashboard_tab()
    # Alerts to a person as a message through Hermes (HERMES_METER_ALERT_DELIVER):
    # its thread imports Hermes's sender only once Hermes imports nothing.
    from . import _deliver

    _deliver.start()
    facts = _integrations.Facts(
        hooks=known,
        host_isolation=host,
        enforce=enforce,
        has_middleware=has_middleware,
        tool_gate="pre_tool_call" in ours,
        bounded_dispatch=_skips.bounded_dispatch(),
        deliver=_deliver.target_from_env() is not None,
        agent_tool=agent_tool,
    )
    # Hermes 0.22 marks a context whose load overran its deadline: whatever
    # it registered is thrown away (nothing is recorded in this process).
    abandoned = getattr(ctx, "_load_abandoned", False) is True
    _integrations.note_registration(facts, register_ms=elapsed(), abandoned=abandoned)
    # What can be settled without importing anything is, now; the rest,
    # and what was deferred, at the first hook call (``_native`` asks).
    _integrations.settle(may_import=False)
    _native.settle_pending(True)


def _in_plugin_host(ctx: Any) -> bool:
    """Whether Hermes runs this plugin in its plugin host, a process apart
    from the agent's (``plugins.isolation: host``, Hermes 0.22 and later:
    ``hermes_cli/plugin_host_child.py``, whose context is a
    ``RemotePluginContext``)."""
    if type(ctx).__name__ == "RemotePluginContext":
        return True
    return _integrations.loaded("hermes_cli.plugin_host_child") is not None


_exit_flush_registered = False


def _flush_at_exit() -> None:
    """Flush when the process exits, ``os._exit`` included: once per
    process, however many profiles register (the bridge is the process's)."""
    global _exit_flush_registered
    if not _exit_flush_registered:
        _exit_flush_registered = True
        atexit.register(_exit_flush)
    _flush_before_os_exit()


def _exit_flush() -> None:
    # What this process used of Hermes goes into the report first: the
    # flush writes the health record. An alert being sent finishes first.
    from . import _deliver

    _aux.wait_for_title_calls(_TITLE_AT_EXIT_SECONDS)
    _deliver.finish(_DELIVER_AT_EXIT_SECONDS)
    _integrations.refresh()
    _native.exit_flush(_EXIT_FLUSH_SECONDS)


# How long an exit waits for an alert message in flight through Hermes.
_DELIVER_AT_EXIT_SECONDS = 1.0

# How long an exit waits for a session title Hermes is still asking the
# model for (its call is part of the run; Hermes 0.22's own ``-z`` waits
# up to 10 s for it).
_TITLE_AT_EXIT_SECONDS = 5.0


def _install_dashboard_tab() -> None:
    """Puts the viewer's tab where Hermes's web dashboard looks for tabs
    (``$HERMES_HOME/plugins/hermes-meter/dashboard``), in a Hermes home only
    (one with a config.yaml). Never raises: the tab is a convenience."""
    try:
        from . import _dashboard

        home = _dashboard.hermes_home()
        if (home / "config.yaml").is_file():
            _dashboard.install(home)
    except Exception:  # a missing tab must not break the plugin
        import logging

        logging.getLogger("hermes_meter").debug("dashboard tab not installed", exc_info=True)


def _flush_before_os_exit() -> None:
    """Make ``os._exit`` flush first, in this process only.

    Hermes ends one-shot (``hermes -z``), kanban-worker and gateway processes
    with ``os._exit``, which skips atexit. The exit flush commits what is
    queued, releases the session spans this process held for their grace
    period (Hermes never finalizes ``-z``, cron or kanban sessions) and
    lets the exporter send them, within ``_EXIT_FLUSH_SECONDS``. Flushing at
    every session end instead would make each turn wait for a commit and an
    export; this pays that once, when the process ends. Forked children (multiprocessing)
    inherit the wrapper but not our threads, so they exit straight away.
    """
    real_exit = os._exit
    if getattr(real_exit, "_hermes_meter", False):
        return
    pid = os.getpid()

    @functools.wraps(real_exit)
    def _exit(status: int) -> None:
        if os.getpid() == pid:
            try:
                _exit_flush()
            except BaseException:  # noqa: BLE001 - the exit must happen
                pass
        real_exit(status)

    _exit._hermes_meter = True  # type: ignore[attr-defined]
    os._exit = _exit


def _hermes_hooks() -> frozenset[str] | None:
    """The hook names the running Hermes knows, or None if it cannot say.
    Read from the module that is calling ``register``, never imported."""
    plugins = _integrations.loaded("hermes_cli.plugins")
    valid = getattr(plugins, "VALID_HOOKS", None) if plugins is not None else None
    if valid is None and plugins is None and "hermes_cli.plugins" in sys.modules:
        # Being imported right now: its VALID_HOOKS is set near the top.
        valid = getattr(sys.modules["hermes_cli.plugins"], "VALID_HOOKS", None)
    try:
        return frozenset(valid) if valid is not None else None
    except TypeError:
        return None


# The `hermes meter ...` subcommands: every command of `hermes-meter`
# (tests/python/test_plugin.py holds this list equal to its --help).
_CLI_COMMANDS = {
    "report": "spend and tokens by day, model, provider, sender, cron job and session",
    "advise": "the largest savings the ledger shows, with the sessions behind them",
    "status": "what is wrong first, then the store, export, budgets and Hermes's integration",
    "budget": "budgets: set limits, list spend and verdicts, forecast",
    "trace": "one session's spans as a tree: turns, attempts, tools, subagents",
    "pricing": "the price a model gets and why, price list updates, drift from Hermes's prices",
    "held": "calls whose usage was beyond what any provider bills in one call",
    "doctor": "check the store's integrity; --rebuild rebuilds a damaged one",
    "ui": "a local read-only web viewer: sessions, their spans, budgets",
    "serve": "export spans and serve metrics from the store until stopped",
    "export": "re-send every finished span since a time",
    "replay": "apply recorded hook calls (JSON lines) to the store",
    "compact": "build report's rollups, then give back the space retention freed",
    "mcp": "the store for MCP clients on stdin/stdout or HTTP: spend, budgets, reports, sessions (read-only)",
}


def _setup_cli(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="meter_command", metavar="{" + ",".join(_CLI_COMMANDS) + "}")
    for name, help_text in _CLI_COMMANDS.items():
        # Every option (--help included) goes to the hermes-meter parser: with
        # no prefix characters of its own, this one takes them all as words.
        cmd = sub.add_parser(name, help=help_text, add_help=False, prefix_chars="\x00")
        cmd.add_argument("args", nargs="*")


def _run_cli(args: argparse.Namespace) -> None:
    """``hermes meter COMMAND ...`` is ``hermes-meter COMMAND ...``: the same
    command line, run in a process of its own with this Python (so it reads
    the same settings, and never opens Hermes's files inside Hermes's
    process). Hermes ignores the handler's return value; the exit code goes
    through ``sys.exit``."""
    import subprocess

    command = getattr(args, "meter_command", None)
    if command not in _CLI_COMMANDS:
        print("usage: hermes meter {" + ",".join(_CLI_COMMANDS) + "} [options]", file=sys.stderr)
        sys.exit(2)
    env = dict(os.environ, HERMES_METER_HERMES_PYTHON=sys.executable)
    try:
        code = subprocess.call([sys.executable, "-m", "hermes_meter.cli", command, *args.args], env=env)
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)


class _SlashCommand:
    """``/meter``: Hermes passes the text after the command."""

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx

    def __call__(self, raw_args: str = "") -> str:
        session_id = _cli_session_id(self._ctx)
        sender_id = None
        if not session_id:
            sender_id, session_id = _GATEWAY_CALLER.get()
        text = _native.meter_command(raw_args, session_id, sender_id)
        # `/meter status` lists every Hermes integration point; plain `/meter`
        # only the ones that cost records (MISSING, calls lost).
        lines = _integrations.lines(only_trouble=raw_args.strip() != "status")
        if lines:
            text += "\n\nHermes integration points:\n" + "\n".join(f"  {line}" for line in lines)
        return text


# The gateway message being handled in this asyncio task: (user id, session
# id). Set by the pre_gateway_dispatch hook, which Hermes calls in the same
# task, before it dispatches a slash command.
_GATEWAY_CALLER: contextvars.ContextVar[tuple[str | None, str | None]] = contextvars.ContextVar(
    "hermes_meter_gateway_caller", default=(None, None)
)


def _remember_gateway_caller(
    event: Any = None, gateway: Any = None, session_store: Any = None, **_: Any
) -> None:
    try:
        source = getattr(event, "source", None)
        user_id = getattr(source, "user_id", None)
        session_id = None
        # Public, read-only and lock-held in Hermes 0.19.0; None for a new chat.
        peek = getattr(session_store, "peek_session_id", None)
        key_for = getattr(gateway, "_session_key_for_source", None)
        if source is not None and callable(peek) and callable(key_for):
            session_id = peek(key_for(source))
        _GATEWAY_CALLER.set(
            (
                str(user_id) if user_id is not None and str(user_id) else None,
                session_id if isinstance(session_id, str) and session_id else None,
            )
        )
    except Exception:  # noqa: BLE001 - never raise into Hermes
        pass


def _cli_session_id(ctx: Any) -> str | None:
    # The interactive CLI keeps its session id on the CLI object; the
    # gateway passes none (the native side then uses the last session seen).
    cli = getattr(getattr(ctx, "_manager", None), "_cli_ref", None)
    session_id = getattr(cli, "session_id", None)
    return session_id if isinstance(session_id, str) else None
