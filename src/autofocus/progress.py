"""How long library runs (evaluation, tuning) tell their caller how far they are, without a terminal.

A run reports through a ``Reporter``: ``note`` for a line the user should read (a resumed run, a
warning, the start of a phase), ``advance`` for a task's progress. The commands pass a reporter that
draws rich bars (``autofocus.console.RichReporter``); library callers pass their own (a logger, a
notebook widget) or none, and then only warnings reach them, through the ``autofocus`` logger.
"""

from __future__ import annotations

import logging
from typing import Literal, Protocol

Level = Literal["info", "warning", "section"]

logger = logging.getLogger("autofocus")


class Reporter(Protocol):
    """What a long run tells its caller; text is plain (never markup) and may quote data."""

    def note(self, text: str, level: Level = "info") -> None:
        """A line for the user: ``info``, a ``warning`` (something to act on), or a ``section`` heading
        (a new phase of the run)."""

    def advance(self, task: str, done: int, total: int | None, stats: str = "") -> None:
        """Task ``task`` (its name is its identity) has ``done`` of ``total`` units finished (``total``
        None: unknown); ``stats`` is a short running summary (``hit@1 0.612``)."""


class LogReporter:
    """The reporter of a run given none: notes to the ``autofocus`` logger (warnings reach stderr even
    where logging is not configured), no progress."""

    def note(self, text: str, level: Level = "info") -> None:
        logger.log(logging.WARNING if level == "warning" else logging.INFO, text)

    def advance(self, task: str, done: int, total: int | None, stats: str = "") -> None:
        return None


def draws_bars(reporter: Reporter | None) -> bool:
    """Whether ``reporter`` draws progress bars, so that work it hands on (a library's trainer with bars of
    its own) shows them too, or stays as quiet."""
    return bool(getattr(reporter, "draws_bars", False))


def reporter_or_log(reporter: Reporter | None) -> Reporter:
    return reporter if reporter is not None else LogReporter()
