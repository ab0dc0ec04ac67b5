"""The viewer's tab for Hermes's web dashboard: the files the dashboard
scans for, their install into a Hermes home, and the viewer the tab's
backend starts in-process (the real Rust viewer, over loopback HTTP)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import hermes_meter
from hermes_meter import _dashboard


class FakeContext:
    def __init__(self) -> None:
        self.hooks: dict = {}
        self.commands: dict = {}

    def register_hook(self, name, cb) -> None:
        self.hooks[name] = cb

    def register_cli_command(self, *a, **k) -> None:
        pass

    def register_command(self, name, handler, description="") -> None:
        self.commands[name] = handler


def test_the_manifest_names_a_tab_with_its_script_and_backend() -> None:
    src = _dashboard.source_dir()
    manifest = json.loads((src / "manifest.json").read_text())
    assert manifest["name"] == "hermes-meter" == _dashboard.PLUGIN_DIR_NAME
    assert manifest["tab"]["path"] == "/meter"
    assert (src / manifest["entry"]).is_file()
    assert (src / manifest["api"]).is_file()
    script = (src / manifest["entry"]).read_text()
    assert 'window.__HERMES_PLUGINS__.register("hermes-meter"' in script
    assert "/api/plugins/hermes-meter/viewer" in script


def test_the_docs_call_the_tab_what_the_dashboard_shows() -> None:
    label = json.loads((_dashboard.source_dir() / "manifest.json").read_text())["label"]
    root = Path(__file__).resolve().parents[2]
    for doc in ("README.md", "docs/viewer.md"):
        text = (root / doc).read_text()
        assert f"**{label}** tab" in text, doc
        assert "**OTel** tab" not in text, doc


def test_install_copies_the_tab_into_a_hermes_home_once(tmp_path: Path) -> None:
    target = _dashboard.install(tmp_path)
    assert target == tmp_path / "plugins" / "hermes-meter" / "dashboard"
    assert (target / "manifest.json").read_bytes() == (_dashboard.source_dir() / "manifest.json").read_bytes()
    assert (target / "dist" / "index.js").is_file() and (target / "plugin_api.py").is_file()
    stamp = (target / "manifest.json").stat().st_mtime_ns
    _dashboard.install(tmp_path)
    assert (target / "manifest.json").stat().st_mtime_ns == stamp, "unchanged files are not rewritten"
    (target / "manifest.json").write_text("{}")
    _dashboard.install(tmp_path)
    assert json.loads((target / "manifest.json").read_text())["name"] == "hermes-meter"


def test_register_installs_the_tab_only_in_a_hermes_home(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HERMES_HOME", str(tmp_path))
    hermes_meter.register(FakeContext())
    assert not (tmp_path / "plugins").exists(), "no config.yaml: not a Hermes home"
    (tmp_path / "config.yaml").write_text("plugins:\n  enabled: [hermes-meter]\n")
    hermes_meter.register(FakeContext())
    assert (tmp_path / "plugins" / "hermes-meter" / "dashboard" / "manifest.json").is_file()


def test_the_backend_starts_the_viewer_and_it_serves_the_store() -> None:
    url = _dashboard.viewer_url()
    assert url.startswith("http://127.0.0.1:")
    assert _dashboard.viewer_url() == url, "one viewer per process"
    with urllib.request.urlopen(url, timeout=10) as r:
        body = r.read().decode()
        assert r.status == 200
    assert "<h1>Sessions</h1>" in body
    with urllib.request.urlopen(url + "api/version", timeout=10) as r:
        assert "version" in json.loads(r.read())
