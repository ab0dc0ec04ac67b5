"""The ``hermes-meter`` console script: the same CLI as the Rust binary."""

from __future__ import annotations

import os
import sys

from . import _native


def main() -> None:
    # `pricing drift` reads Hermes's own prices with Hermes's Python: this
    # one, when the wheel is installed beside Hermes.
    os.environ.setdefault("HERMES_METER_HERMES_PYTHON", sys.executable)
    sys.exit(_native.cli_main(["hermes-meter", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
