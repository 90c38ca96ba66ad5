"""The ``autofocus`` command (and ``python -m autofocus``): a command that a running worker answers goes
there (``autofocus.resident``), with its knowledge base and program already loaded; any other runs here."""

from __future__ import annotations

import sys


def main() -> None:
    from autofocus.resident import forward

    code = forward(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    from autofocus.cli import app

    app()


if __name__ == "__main__":
    main()
