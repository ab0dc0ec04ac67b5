"""Shared helpers for the package tests.

The native bridge is one per process and reads its settings on first use,
so this file points HERMES_METER_HOME at a fresh directory before any test
runs; tests that need other settings run Python in a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

STORE_DIR = Path(tempfile.mkdtemp(prefix="hermes-meter-pytest-"))
os.environ["HERMES_METER_HOME"] = str(STORE_DIR)
# Never the user's own Hermes home (register() installs the dashboard tab there).
os.environ["HERMES_HOME"] = tempfile.mkdtemp(prefix="hermes-meter-pytest-home-")
os.environ.pop("HERMES_METER_TEST_PANIC", None)
os.environ.pop("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", None)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def fixture_records(name: str) -> list[dict]:
    """A fixture's records in call order, with session ids made unique so
    every test writes its own runs into the shared store."""
    text = (FIXTURES / f"{name}.jsonl").read_text()
    recs = [json.loads(line) for line in text.splitlines() if line.strip()]
    sessions = set()
    for r in recs:
        for key in ("session_id", "parent_session_id", "child_session_id"):
            if isinstance(r["kwargs"].get(key), str):
                sessions.add(r["kwargs"][key])
    suffix = uuid.uuid4().hex[:8]
    for sid in sorted(sessions, key=len, reverse=True):
        text = text.replace(sid, f"{sid}-{suffix}")
    recs = [json.loads(line) for line in text.splitlines() if line.strip()]
    recs.sort(key=lambda r: (r["t"], r["pid"], r["seq"]))
    return recs


_QUERY = """
import json, sqlite3, sys
path, sql, args = json.loads(sys.stdin.read())
conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
print(json.dumps(conn.execute(sql, args).fetchall()))
"""


def query(sql: str, *args, store_dir: Path = STORE_DIR) -> list[tuple]:
    """Reads the store from another process.

    Not in this one: Python's sqlite3 is a second SQLite library beside the
    extension's, and POSIX locks are per process, so closing its connection
    would drop the extension's locks on the same files (the WAL index could
    then be rebuilt under it: stale reads, even SIGBUS). See ARCHITECTURE.md.
    """
    payload = json.dumps([str(store_dir / "hermes-meter.db"), sql, list(args)])
    out = subprocess.run(
        [sys.executable, "-c", _QUERY], input=payload, text=True, capture_output=True, timeout=60, check=True
    )
    return [tuple(row) for row in json.loads(out.stdout)]


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter with `env` added."""
    full = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", code], env=full, text=True, capture_output=True, timeout=60)


@pytest.fixture
def fresh_store(tmp_path: Path) -> Path:
    return tmp_path / "meter"
