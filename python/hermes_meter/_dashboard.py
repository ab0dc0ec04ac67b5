"""The viewer inside Hermes's web dashboard.

Hermes 0.19.0 finds dashboard tabs by scanning
``$HERMES_HOME/plugins/<name>/dashboard/manifest.json``; an entry-point
plugin like this one has no such directory, so :func:`install` copies the
package's ``dashboard/`` folder there (only when it differs). The tab's
backend calls :func:`viewer_url`, which runs the Rust viewer
(``hermes-meter ui``) on a thread of the dashboard process: the same pages,
from the same code, read-only. The dashboard enables the tab only while
``hermes-meter`` is in ``plugins.enabled``, as it is for the plugin itself.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from pathlib import Path

from . import _native

# The folder the dashboard scans for this plugin's tab.
PLUGIN_DIR_NAME = "hermes-meter"
# How long the viewer may take to start listening.
_START_SECONDS = 10.0

_lock = threading.Lock()
_url: str | None = None


def hermes_home() -> Path:
    """Hermes's home: its own resolver inside Hermes, else ``$HERMES_HOME``,
    else ``~/.hermes``."""
    try:
        from hermes_constants import get_hermes_home

        return Path(get_hermes_home())
    except ImportError:
        home = os.environ.get("HERMES_HOME", "").strip()
        return Path(home) if home else Path.home() / ".hermes"


def source_dir() -> Path:
    """The dashboard files shipped in this package."""
    return Path(__file__).with_name("dashboard")


def install(home: Path | None = None) -> Path:
    """Copies the tab's files into ``HOME/plugins/hermes-meter/dashboard``
    when they differ from the package's; returns that directory."""
    target = (home or hermes_home()) / "plugins" / PLUGIN_DIR_NAME / "dashboard"
    src = source_dir()
    files = [p.relative_to(src) for p in src.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    same = all((target / f).is_file() and (target / f).read_bytes() == (src / f).read_bytes() for f in files)
    if not same:
        for f in files:
            (target / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src / f, target / f)
    return target


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def viewer_url() -> str:
    """Starts the viewer once per process and returns its address. Like the
    standalone `hermes-meter ui`, it listens on loopback only and answers
    loopback host names only, so it needs no token (a token's cookie would
    not reach a frame whose host differs from the dashboard's)."""
    global _url
    with _lock:
        if _url is not None:
            return _url
        port = _free_loopback_port()
        # --in-hermes: this is a Hermes process, whose own state.db the viewer
        # must not open (POSIX locks are per process).
        argv = ["hermes-meter", "ui", "--listen", f"127.0.0.1:{port}", "--in-hermes"]
        # cli_main releases the GIL and serves until the process ends.
        threading.Thread(target=_native.cli_main, args=(argv,), name="hermes-meter-ui", daemon=True).start()
        deadline = time.monotonic() + _START_SECONDS
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the hermes-meter viewer did not listen on 127.0.0.1:{port}"
                    ) from None
                time.sleep(0.05)
        _url = f"http://127.0.0.1:{port}/"
        return _url
