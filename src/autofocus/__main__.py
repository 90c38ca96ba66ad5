"""The ``autofocus`` command (and ``python -m autofocus``): a command that a running worker answers goes
there (``autofocus.resident``), with its knowledge base and program already loaded; any other runs here."""

from __future__ import annotations

import sys


def main() -> None:
    from autofocus.paths import NotPrivate
    from autofocus.resident import forward

    try:
        code = forward(sys.argv[1:])
        if code is not None:
            sys.exit(code)
        from autofocus.cli import app

        app()
    except NotPrivate as exc:  # a folder of sockets, servers' keys or saved prompts that another user could reach
        sys.stderr.write(f"error: {exc}\n")
        sys.exit(1)


if __name__ == "__main__":
    main()
