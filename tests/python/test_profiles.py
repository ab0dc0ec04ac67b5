"""One Hermes process serving several profiles (a multi-profile gateway,
Hermes 0.21 - 0.23): ``register(ctx)`` runs once per profile that enabled
the plugin, each in its profile's scope (``hermes_constants``'s per-task
home override, read at 00067189dfecf833d4d009c2dd977ae85cf800e0), with one
dispatcher per profile as Hermes keeps one ``PluginManager`` per home
(hermes_main_dispatch.py). Every call must be recorded for the profile it
was made in, and nothing for a profile that never enabled the plugin.
"""

from __future__ import annotations

from pathlib import Path

from conftest import query
from test_hermes_main import _run

# hermes_constants as Hermes 0.21.3 has it (as far as the plugin reads it),
# the auxiliary accounting of 0.19 - 0.21.4 (as test_plugin.AUX_HERMES
# fakes it), and one dispatcher per profile.
GATEWAY = """
import atexit, contextvars, os
from pathlib import Path
hc = types.ModuleType("hermes_constants")
hc._HERMES_HOME_OVERRIDE = contextvars.ContextVar("_HERMES_HOME_OVERRIDE", default=None)
def get_hermes_home():
    override = hc._HERMES_HOME_OVERRIDE.get()
    return Path(override) if override else Path(os.environ["HERMES_HOME"])
hc.get_hermes_home = get_hermes_home
agent = types.ModuleType("agent")
acc = types.ModuleType("agent.aux_accounting")
acc._accounting = contextvars.ContextVar("aux_accounting_context", default=None)
acc.get_accounting_context = lambda: acc._accounting.get()
acc.record_aux_usage = lambda response, task, *, provider=None, base_url=None: None
pricing = types.ModuleType("agent.usage_pricing")
pricing.normalize_usage = lambda raw, provider=None, api_mode=None: types.SimpleNamespace(
    input_tokens=raw.prompt_tokens, output_tokens=raw.completion_tokens,
    cache_read_tokens=0, cache_write_tokens=0, reasoning_tokens=0)
agent.aux_accounting, agent.usage_pricing = acc, pricing
sys.modules.update({"hermes_constants": hc, "agent": agent, "agent.aux_accounting": acc,
                    "agent.usage_pricing": pricing})
homes = {"default": os.environ["HERMES_HOME"]}
for name in ("work", "play"):
    homes[name] = os.path.join(os.environ["HERMES_HOME"], "profiles", name)
    os.makedirs(homes[name], exist_ok=True)
def scoped(profile, fn, *args, **kwargs):
    # What Hermes does around a turn of a profile: the home override, in
    # this task only; bounded hooks run under a copy of this context.
    token = hc._HERMES_HOME_OVERRIDE.set(homes[profile])
    try:
        return fn(*args, **kwargs)
    finally:
        hc._HERMES_HOME_OVERRIDE.reset(token)
dispatchers, contexts, exits = {}, {}, []
for profile in ("default", "work"):
    d = dispatchers[profile] = hmd.Dispatcher(VERSION)
    ctx = contexts[profile] = hmd.Context(d)
    ctx.profile_name = profile
    scoped(profile, hermes_meter.register, ctx)
    exits.append(atexit._ncallbacks())
def ids(session, n):
    return dict(session_id=session, task_id=session, turn_id=f"{session}:t{n}", platform="telegram",
                model="gpt-4o-mini", provider="openai", base_url="https://api.openai.com/v1",
                api_mode="chat_completions")
def turn(profile, session, tokens):
    d, kw = dispatchers[profile], ids(session, 1)
    scoped(profile, d.invoke_hook, "on_session_start", session_id=session, model="gpt-4o-mini",
           platform="telegram")
    scoped(profile, d.invoke_hook, "pre_llm_call", is_first_turn=True, user_message="hi",
           **{k: kw[k] for k in ("session_id", "task_id", "turn_id", "model", "platform")})
    scoped(profile, d.invoke_hook, "pre_api_request", api_request_id=f"{session}:api:1", api_call_count=1,
           **kw)
    scoped(profile, d.invoke_hook, "post_api_request", api_request_id=f"{session}:api:1", api_call_count=1,
           api_duration=0.1, usage={"input_tokens": tokens, "output_tokens": tokens // 10},
           response_model="gpt-4o-mini", **kw)
def aux_call(tokens, task):
    # What Hermes's auxiliary client does after a successful call.
    from agent.aux_accounting import record_aux_usage
    usage = types.SimpleNamespace(prompt_tokens=tokens, completion_tokens=tokens // 10)
    record_aux_usage(types.SimpleNamespace(model="gpt-4o-mini", usage=usage), task,
                     provider="openai", base_url="https://api.openai.com/v1")
"""


def test_a_gateway_of_two_profiles_records_each_call_for_its_own_profile(tmp_path: Path) -> None:
    store = tmp_path / "meter"
    store.mkdir(parents=True)
    # Only work has a budget, already spent by its first call.
    (store / "budgets.toml").write_text("[per_profile.overrides.work]\ndaily = 0.000001\n")
    body = (
        GATEWAY
        + """
turn("work", "s-work", 50000)
turn("default", "s-def", 50000)
assert _native.flush(5.0)
# The next LLM call of each session: work's budget stops work only.
served = {}
for profile, session in (("work", "s-work"), ("default", "s-def")):
    d, kw = dispatchers[profile], ids(session, 1)
    calls = []
    scoped(profile, d.invoke_hook, "pre_api_request", api_request_id=f"{session}:api:2", api_call_count=2,
           **kw)
    scoped(profile, hmd.call_api_with_retries, d, lambda: calls.append(1) or "ok",
           api_request_id=f"{session}:api:2", **kw)
    served[profile] = len(calls)
# The first profile's callback, still running when its next call comes:
# Hermes skips it, the plugin records it from the dispatcher, for default.
cb = dispatchers["default"]._hooks["pre_llm_call"][0]
kw = ids("s-def-skipped", 1)
held = dispatchers["default"].gate_key("pre_llm_call", cb, kw)
dispatchers["default"]._hook_running_callbacks[held] = object()
scoped("default", dispatchers["default"].invoke_hook, "pre_llm_call", is_first_turn=True,
       **{k: kw[k] for k in ("session_id", "task_id", "turn_id", "model", "platform")})
del dispatchers["default"]._hook_running_callbacks[held]
# Auxiliary calls: a /compress in work outside a turn (work's last turn,
# not default's later one), and two in play, which never enabled the plugin.
scoped("work", aux_call, 700, "compression")
scoped("play", aux_call, 900, "compression")
token = acc._accounting.set((object(), "s-play"))
scoped("play", aux_call, 1100, "title_generation")
acc._accounting.reset(token)
replies = {p: scoped(p, contexts[p].commands["meter"], "") for p in contexts}
assert _native.flush(5.0)
print(json.dumps({"served": served, "counts": _skips.watch().totals(), "exits": exits,
                  "os_exit_wrapped_once": not getattr(os._exit.__wrapped__, "_hermes_meter", False),
                  "replies": replies, "warnings": warnings}))
"""
    )
    out = _run(tmp_path, body, "0.21", HERMES_HOME=str(tmp_path / "home"))
    runs = query("SELECT session_id, profile FROM runs ORDER BY session_id", store_dir=store)
    assert [tuple(r) for r in runs] == [
        ("s-def", "default"),
        ("s-def-skipped", "default"),
        ("s-work", "work"),
    ], "each session in its own profile; nothing of play"
    assert out["served"] == {"work": 0, "default": 1}, "work's budget charges work only"
    assert out["counts"] == [1, 0], "the first profile's skipped call is recorded after the second registered"
    aux = query(
        "SELECT session_id, aux_task, input_tokens FROM llm_calls WHERE aux_task IS NOT NULL", store_dir=store
    )
    assert [tuple(r) for r in aux] == [("s-work", "compression", 700)], (
        "work's auxiliary call against work's last turn; play's never recorded"
    )
    assert out["exits"][0] == out["exits"][1], "the exit flush is registered once"
    assert out["os_exit_wrapped_once"]
    assert all(isinstance(r, str) and r for r in out["replies"].values()), out["replies"]
    assert not [w for w in out["warnings"] if "skipped" in w], out["warnings"]


def test_integration_points_say_how_a_calls_profile_is_found(tmp_path: Path) -> None:
    body = (
        GATEWAY
        + """
from hermes_meter import _integrations
_integrations.first_hook()
print(json.dumps({"lines": _integrations.lines()}))
"""
    )
    lines = _run(tmp_path, body, "0.21", HERMES_HOME=str(tmp_path / "home"))["lines"]
    assert any(
        line.startswith("hermes_constants.get_hermes_home (Hermes 0.21.0 - 0.23.x): active") for line in lines
    ), lines
    without = _run(
        tmp_path / "b",
        "d = hmd.Dispatcher(VERSION)\nhermes_meter.register(hmd.Context(d))\n"
        "from hermes_meter import _integrations\n_integrations.first_hook()\n"
        "print(json.dumps({'lines': _integrations.lines()}))\n",
        "0.21",
    )["lines"]
    assert any(
        line.startswith("hermes_constants.get_hermes_home (Hermes 0.21.0 - 0.23.x): not needed")
        for line in without
    ), without
