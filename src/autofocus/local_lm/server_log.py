"""The log a local LM server writes: each start marked, and why a server did not start read from it.

Every start appends to the same file, after a line of its own (``mark_start``), so what one start
wrote is found after the last mark. llama.cpp writes a level and a function name before each message
(``0.00.008.977 E srv    load_model: ...``); the reason given to the user is the first error, without them.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import IO

_START_MARK = "=== autofocus:"
_REASON = re.compile(r"error|fail|unable|couldn't|could not|cannot|can't|invalid|not found|no such|illegal|"
                     r"exception|denied|corrupt|not a gguf|out of memory", re.IGNORECASE)
_LEVELLED = re.compile(r"^(?:\d+(?:\.\d+)+\s+)?(?:([IWEDT])\s+)?(.*)$")  # llama.cpp's "0.00.008.977 E " before a line
_PREFIX = re.compile(r"^(?:(?:[a-z]{2,4}\s+)?[\w.]+(?:\(\))?:\s+)+")  # and "srv    load_model: " before its message


def mark_start(log: IO[bytes], what: str) -> None:
    """Write the line that begins one start's part of the log."""
    log.write(f"\n{_START_MARK} {time.strftime('%Y-%m-%d %H:%M:%S')} {what}\n".encode())
    log.flush()


def since_start(path: Path) -> str:
    """What the server wrote to its log since its last start."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return text[text.rfind(_START_MARK) :].partition("\n")[2]


def failure_reason(log: str, returncode: int | None, timeout: float | None) -> str:
    """Why a server did not start, in one line: the first line of its log that names an error (llama.cpp's
    function names taken off), else how it ended."""
    parsed = [_LEVELLED.match(line.strip()).groups() for line in log.splitlines() if line.strip()]  # type: ignore[union-attr]
    lines = [_PREFIX.sub("", text) for _, text in parsed]
    errors = [line for (level, _), line in zip(parsed, lines, strict=True) if level == "E"]
    said = next(iter(errors), None) or next((line for line in lines if _REASON.search(line)), None)
    if timeout is not None:
        return f"it did not answer within {timeout:.0f} s" + (f" (it said: {said})" if said else "")
    if said:
        return said[:300]
    ended = f"exited with code {returncode}" if returncode is not None else "exited"
    return f"it {ended} before serving" + (f"; its last words: {lines[-1][:200]}" if lines else ", writing nothing")
