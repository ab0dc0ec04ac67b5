"""The catalog route: ``catalog/hermes-meter/`` (the directory plugin
``hermes plugins install`` puts in place) and ``catalog/hermes-meter.yaml``
(the entry for Hermes's plugin catalog) declare exactly what ``register``
registers, hold no binary, and name this release.

``register`` runs in a subprocess, through the directory's ``__init__.py``,
against a Hermes shaped like git main (every hook known, middleware) and
like 0.21; what it registers is recorded by the context it is given.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import hermes_meter
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CATALOG = ROOT / "catalog"
PLUGIN_DIR = CATALOG / "hermes-meter"
HERE = Path(__file__).resolve().parent

# What Hermes's plugin guard cannot scan (a "high" finding): anything but
# source and text.
TEXT_SUFFIXES = {".py", ".yaml", ".md"}

_REGISTER = """
import importlib.util, json, sys
sys.path.insert(0, sys.argv[1])
import hermes_main_dispatch as hmd
hmd.install_modules(sys.argv[2])
spec = importlib.util.spec_from_file_location(
    "hermes_plugins.hermes_meter", sys.argv[3] + "/__init__.py", submodule_search_locations=[sys.argv[3]]
)
plugin = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plugin)

class Recording(hmd.Context):
    def __init__(self):
        super().__init__(hmd.Dispatcher(sys.argv[2]))
        self.tools = []
    def register_tool(self, name, *args, **kwargs):
        self.tools.append(name)

ctx = Recording()
plugin.register(ctx)
print(json.dumps({
    "hooks": sorted(ctx._dispatcher._hooks),
    "middleware": sorted(ctx._dispatcher._middleware),
    "tools": ctx.tools,
}))
"""


def registered(version: str, tmp_path: Path, **env: str) -> dict:
    run_env = dict(os.environ, HERMES_METER_HOME=str(tmp_path / "meter"), HERMES_HOME=str(tmp_path), **env)
    out = subprocess.run(
        [sys.executable, "-c", _REGISTER, str(HERE), version, str(PLUGIN_DIR)],
        env=run_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def manifest() -> dict:
    return yaml.safe_load((PLUGIN_DIR / "plugin.yaml").read_text())


@pytest.fixture(scope="module")
def entry() -> dict:
    return yaml.safe_load((CATALOG / "hermes-meter.yaml").read_text())


def test_on_a_hermes_that_knows_every_hook_it_registers_what_it_declares(tmp_path, manifest, entry):
    got = registered("main", tmp_path)
    assert got["hooks"] == sorted(manifest["provides_hooks"])
    assert got["tools"] == manifest["provides_tools"] == ["meter_spend"]
    caps = entry["capabilities"]
    assert got["hooks"] == sorted(caps["provides_hooks"])
    assert got["middleware"] == sorted(caps["provides_middleware"]) == ["llm_execution", "llm_request"]
    assert got["tools"] == caps["provides_tools"]
    assert caps["requires_env"] == manifest["requires_env"] == []


def test_older_hermes_and_observe_mode_register_nothing_undeclared(tmp_path, manifest, entry):
    declared = set(manifest["provides_hooks"])
    older = registered("0.21", tmp_path / "older")
    assert older["hooks"] and set(older["hooks"]) <= declared
    # 0.21 lacks post_auxiliary_call: the plugin feeds it itself.
    assert "post_auxiliary_call" not in older["hooks"]
    observe = registered("main", tmp_path / "observe", HERMES_METER_BUDGET_MODE="observe")
    assert set(observe["hooks"]) <= declared
    assert "pre_tool_call" not in observe["hooks"]
    assert observe["middleware"] == []


def test_the_directory_holds_no_binary_and_names_this_release(manifest, entry):
    files = [p for p in PLUGIN_DIR.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    assert {p.name for p in files} == {"plugin.yaml", "__init__.py"}
    assert all(p.suffix in TEXT_SUFFIXES for p in files)
    version = hermes_meter.__version__
    assert manifest["version"] == entry["version"] == version
    requirement = f"hermes-meter=={version}"
    assert manifest["python_dependencies"] == manifest["pip_dependencies"] == [requirement]
    assert requirement in (PLUGIN_DIR / "__init__.py").read_text()
    assert manifest["name"] == entry["name"] == "hermes-meter"
    assert manifest["requires_hermes"] == entry["requires_hermes"]
    assert manifest["manifest_version"] == 2
    assert entry["subdir"] == "catalog/hermes-meter"


#: The categories Hermes's catalog takes (hermes_cli/plugin_catalog.py,
#: CATALOG_CATEGORIES, Hermes 0.22.2; the e2e test parses the entry with it).
CATEGORIES = ("desktop", "memory", "platform", "web", "tools", "voice", "automation", "models", "general")


def test_the_entry_discloses_what_is_sent_installed_and_stored(entry):
    description = " ".join(entry["description"].split())
    assert entry["category"] in CATEGORIES
    disclosure = description[description.index("Disclosure — ") :]
    assert description.endswith(disclosure) and disclosure.endswith("."), "the last sentence"
    assert disclosure.count(". ") == 0, "one sentence"
    for said in (
        "sends",
        "OTLP endpoint",
        "webhook",
        "installs",
        "wheel",
        "dashboard",
        "stores",
        "SQLite",
        "capture",
    ):
        assert said in disclosure, said


def test_without_the_package_it_says_what_to_install_and_registers_nothing(tmp_path):
    script = """
import importlib.util, logging, sys
logging.basicConfig(level=logging.WARNING, format="%(name)s %(message)s")
sys.modules["hermes_meter"] = None  # not installed
spec = importlib.util.spec_from_file_location("hermes_plugins.hermes_meter", sys.argv[1] + "/__init__.py")
plugin = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plugin)
class Ctx:
    def __getattr__(self, name):
        raise AssertionError(f"registered {name} without the package")
print("returned", plugin.register(Ctx()))
"""
    out = subprocess.run(
        [sys.executable, "-c", script, str(PLUGIN_DIR)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "returned None"
    assert "hermes-meter is not recording" in out.stderr
    assert f"pip install hermes-meter=={hermes_meter.__version__}" in out.stderr
