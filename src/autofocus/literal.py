"""Text from SKB files, LMs or users as literal text for Rich: never markup, never a terminal escape.

Below the terminal layer (``autofocus.console``) because the library's own progress bars (the index
build's) label their tasks with such text too.
"""

from __future__ import annotations

import re

from rich.markup import escape

from autofocus.redact import redact

# ANSI escape sequences (CSI ``ESC[...``, OSC ``ESC]...BEL``, two-byte ``ESC x``), then every other C0/C1
# control character except newline and tab
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|[\x1b\x9b][@-_]?")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` without terminal escape sequences and control characters (newlines and tabs stay)."""
    return _CONTROL.sub("", _ESCAPES.sub("", text))


def safe(value: object) -> str:
    """``value`` as literal text for Rich: secrets redacted, escape sequences removed, markup escaped."""
    return escape(printable(redact(str(value))))
