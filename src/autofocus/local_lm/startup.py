"""What a run waits for before its first step: the offline LM starting, the prompt cache restored.

These waits happen once per process (a server started or found, the prompts' shared start put into its
slots) and can take longer than the question they serve. A phase tells whoever listens what it is
waiting for, while it waits (``ask`` shows it beside a spinner), and keeps how long it took, which the
next question's trace takes as its start-up (``claim``), reported apart from the steps.

Example:
    with listening(lambda kind, text: print(kind, text)):
        with phase("lm_server", "starting the offline LM") as detail:
            detail["how"] = "started"
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal

Kind = Literal["wait", "done", "note"]
Listener = Callable[[Kind, str], None]  # "wait": what it waits for now; "done": that wait is over; "note": a line to keep

_LOCK = threading.Lock()
_LISTENERS: list[Listener] = []
_UNCLAIMED: dict[str, dict[str, Any]] = {}


def notify(kind: Kind, text: str) -> None:
    """Tell every listener; a listener that fails is not the run's problem."""
    with _LOCK:
        listeners = list(_LISTENERS)
    for listener in listeners:
        with contextlib.suppress(Exception):
            listener(kind, text)


@contextlib.contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """``listener`` hears of every phase while the block runs."""
    with _LOCK:
        _LISTENERS.append(listener)
    try:
        yield
    finally:
        with _LOCK:
            _LISTENERS.remove(listener)


@contextlib.contextmanager
def phase(name: str, waiting: str) -> Iterator[dict[str, Any]]:
    """Wait for ``name`` while telling listeners ``waiting``; the yielded dict is the phase's record
    (``seconds`` is added), kept for the next trace to ``claim``."""
    detail: dict[str, Any] = {}
    notify("wait", waiting)
    start = time.perf_counter()
    try:
        yield detail
    finally:
        detail["seconds"] = round(time.perf_counter() - start, 3)
        notify("done", waiting)
        with _LOCK:
            _UNCLAIMED[name] = detail


def claim() -> dict[str, dict[str, Any]]:
    """The phases finished since the last claim (a question's trace takes them: its start-up)."""
    with _LOCK:
        taken = dict(_UNCLAIMED)
        _UNCLAIMED.clear()
    return taken
