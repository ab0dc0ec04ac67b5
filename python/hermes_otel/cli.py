"""The ``hermes-otel`` console script: the same CLI as the Rust binary."""

from __future__ import annotations

import sys

from . import _native


def main() -> None:
    sys.exit(_native.cli_main(["hermes-otel", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
