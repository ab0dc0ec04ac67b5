"""The wheel users get, installed the way they install it: a manylinux
abi3 wheel into a fresh venv with no Rust toolchain on PATH, then the real
Hermes 0.19.0 runs a session with the plugin enabled, by its entry point
(``pip install hermes-meter``) and with the catalog's directory plugin
beside it (``hermes plugins install hermes-meter``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import KIT, PLUGIN_KEY, ROOT

# The oldest glibc the wheel's tag promises.
MANYLINUX = (2, 28)
WHEEL = os.environ.get("HERMES_METER_E2E_WHEEL")

pytestmark = pytest.mark.skipif(not WHEEL, reason="HERMES_METER_E2E_WHEEL names the wheel to test")


def _no_rust_path() -> str:
    """PATH without any directory that holds cargo or rustc."""
    keep = [
        d
        for d in os.environ["PATH"].split(os.pathsep)
        if d and not any((Path(d) / tool).exists() for tool in ("cargo", "rustc", "rustup"))
    ]
    return os.pathsep.join(keep)


def test_the_wheel_is_manylinux_abi3_and_needs_no_newer_glibc():
    wheel = zipfile.ZipFile(WHEEL)
    meta = wheel.read("hermes_meter-" + Path(WHEEL).name.split("-")[1] + ".dist-info/WHEEL").decode()
    assert "Tag: cp311-abi3-manylinux_2_28_x86_64" in meta.splitlines(), meta
    native = [n for n in wheel.namelist() if n.endswith(".so")]
    assert native == ["hermes_meter/_native.abi3.so"], native
    so = Path(os.environ.get("TMPDIR", "/tmp")) / f"hermes-meter-wheel-{os.getpid()}.so"
    so.write_bytes(wheel.read(native[0]))
    try:
        symbols = subprocess.run(
            ["objdump", "-T", str(so)], check=True, capture_output=True, text=True
        ).stdout
    finally:
        so.unlink()
    versions = {tuple(int(p) for p in v.split(".")) for v in re.findall(r"GLIBC_([0-9.]+)\b", symbols)}
    assert versions and max(versions) <= MANYLINUX, sorted(versions)[-3:]
    # Stripped: what a user downloads is the code, not its debug info.
    assert wheel.getinfo(native[0]).file_size < 40 * 1024 * 1024


@pytest.fixture(scope="module")
def fresh_hermes(tmp_path_factory) -> Path:
    venv = tmp_path_factory.mktemp("fresh") / "venv"
    env = dict(os.environ, PATH=_no_rust_path())
    env.pop("CARGO_HOME", None)
    env.pop("RUSTUP_HOME", None)
    assert shutil.which("cargo", path=env["PATH"]) is None
    subprocess.run(
        ["bash", str(KIT / "setup-hermes.sh"), str(venv)], check=True, env=env, capture_output=True
    )
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    # From the wheel alone: nothing is built, nothing is fetched.
    subprocess.run([*pip, "--no-index", "--only-binary", ":all:", WHEEL], check=True, env=env)
    out = subprocess.run(
        [str(venv / "bin" / "hermes-meter"), "--version"], check=True, env=env, capture_output=True, text=True
    )
    assert out.stdout.split() == ["hermes-meter", Path(WHEEL).name.split("-")[1]]
    return venv / "bin" / "hermes"


def _session(hermes: Path, outdir: Path, *extra: str) -> tuple[int, int]:
    """Runs the readfile scenario; returns (LLM calls the store holds,
    post_api_request calls Hermes made)."""
    env = dict(os.environ, HERMES_BIN=str(hermes), E2E_PYTHON=sys.executable, PATH=_no_rust_path())
    cmd = ["bash", str(KIT / "run-scenario.sh"), "readfile", str(outdir), "--probe", "--enable", PLUGIN_KEY]
    cmd += ["--env", f"HERMES_METER_HOME={outdir / 'meter'}", *extra]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert (outdir / "rc").read_text().strip() == "0", (outdir / "stderr").read_text()
    hooks = [json.loads(line)["hook"] for line in (outdir / "hooks.jsonl").read_text().splitlines() if line]
    conn = sqlite3.connect(f"file:{outdir / 'meter' / 'hermes-meter.db'}?mode=ro", uri=True)
    try:
        # Auxiliary calls (titles, compression) fire no hook on 0.19.0.
        calls = conn.execute("SELECT count(*) FROM llm_calls WHERE aux_task IS NULL").fetchone()[0]
    finally:
        conn.close()
    return calls, hooks.count("post_api_request")


def test_a_session_is_recorded_by_the_installed_wheel(fresh_hermes, tmp_path):
    calls, made = _session(fresh_hermes, tmp_path / "pip")
    assert made > 0
    assert calls == made


def test_with_the_catalog_directory_beside_it_each_call_is_recorded_once(fresh_hermes, tmp_path):
    outdir = tmp_path / "catalog"
    calls, made = _session(fresh_hermes, outdir, "--plugin-dir", str(ROOT / "catalog" / "hermes-meter"))
    assert (outdir / "home" / "plugins" / "hermes-meter" / "plugin.yaml").is_file()
    assert made > 0
    assert calls == made
    # Hermes loaded one plugin under the key, and no error about it.
    stderr = (outdir / "stderr").read_text(errors="replace")
    assert "hermes-meter is not recording" not in stderr


def test_the_catalog_entry_is_taken_by_hermes_own_catalog_parser(hermes_bin):
    """The entry as Hermes reads its plugin catalog (hermes_cli/plugin_catalog.py,
    Hermes 0.22): taken whole, in its category, the description with its
    Disclosure sentence. Hermes 0.19 has no catalog module."""
    python = Path(hermes_bin).parent / "python"
    script = """
import json, sys, yaml
try:
    from hermes_cli import plugin_catalog
except ImportError:
    print(json.dumps(None)); sys.exit(0)
entry = plugin_catalog.entry_from_mapping(yaml.safe_load(open(sys.argv[1])), "hermes-meter.yaml")
taken = entry and {"category": entry.category, "description": entry.description, "tier": entry.tier}
print(json.dumps(taken))
"""
    p = subprocess.run(
        [str(python), "-c", script, str(ROOT / "catalog" / "hermes-meter.yaml")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    taken = json.loads(p.stdout.strip().splitlines()[-1])
    version = subprocess.run(
        [str(hermes_bin), "--version"], capture_output=True, text=True, timeout=60
    ).stdout
    if "v0.19" in version:
        assert taken is None, "0.19 has no catalog"
        return
    assert taken is not None, p.stderr
    assert taken["category"] == "general" and taken["tier"] == "community"
    assert "Disclosure — sends" in taken["description"]
