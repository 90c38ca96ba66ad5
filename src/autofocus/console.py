"""Terminal output of text that came from SKB files, LMs or users.

Such text is data, never Rich markup: a value ``[/]`` in ``edges.csv`` would end a style (and raise
``MarkupError``), ``nodes.jsonl:100:`` would print as an emoji, an LM error may quote an API key, and
an LM answer may hold terminal escape sequences (clear the screen, retitle the window, hide text).
Commands print through ``make_console`` consoles and wrap every such value in ``safe``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from rich.console import Console

from autofocus.literal import safe

if TYPE_CHECKING:
    from rich.table import Table

# what opening a damaged SKB, QA file or index, or naming an unknown system or split, raises
OPEN_ERRORS = (KeyError, FileNotFoundError, ValueError)


PIPE_WIDTH = 160  # a report piped to a file or log: rich's 80 columns would cut run names to "fit-d…"


@dataclass
class Redirect:
    """Where the consoles made meanwhile write, as another process's terminal would show it (``redirected``)."""

    out: IO[str]
    err: IO[str]
    terminal: tuple[bool, bool]  # whether that process's stdout and stderr are terminals
    width: int  # its terminal's columns, or the width of its pipe


_REDIRECT: list[Redirect] = []


@contextlib.contextmanager
def redirected(to: Redirect) -> Iterator[None]:
    """Consoles made while the block runs write to ``to`` (a command run for another process,
    ``autofocus.resident``): its colours and width, never animated, since the output is sent at the end."""
    _REDIRECT.append(to)
    try:
        yield
    finally:
        _REDIRECT.remove(to)


def make_console(stderr: bool = False) -> Console:
    """A console that never turns ``:name:`` into an emoji (file:line:reason messages are full of them),
    and that is wide enough for the tables when writing to a file or pipe (unless ``COLUMNS`` says)."""
    if _REDIRECT:
        to = _REDIRECT[-1]
        return Console(file=to.err if stderr else to.out, force_terminal=to.terminal[stderr], force_interactive=False,
                       width=to.width, emoji=False)
    console = Console(stderr=stderr, emoji=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = PIPE_WIDTH
    return console


def print_error(console: Console, exc: BaseException) -> None:
    """An error for the user: an SKB format error as a table of file, line and reason; anything else
    as its message (a ``KeyError``'s without the quotes ``str`` adds)."""
    from rich.table import Table

    from autofocus.skb.errors import SKBFormatError

    if isinstance(exc, SKBFormatError):
        table = Table(title=f"{len(exc.issues)} problem(s)" + (" (stopped at the cap)" if exc.truncated else ""))
        for col in ("file", "line", "reason"):
            table.add_column(col)
        for issue in exc.issues:
            table.add_row(safe(issue.file), "" if issue.line is None else str(issue.line), safe(issue.reason))
        console.print(table)
        return
    message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
    console.print(f"[red]{safe(message)}[/]", soft_wrap=True)  # one line: the terminal wraps, logs stay greppable


class RichReporter:
    """A ``progress.Reporter`` for the terminal: notes on ``console`` (as text, never markup; warnings
    yellow, sections as rules), one rich bar per task on ``bars_console`` (stderr by default) while
    the ``with`` block runs; ``bars=False`` keeps the notes and draws no bars."""

    def __init__(self, console: Console | None = None, bars_console: Console | None = None, *, bars: bool = True):
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.console = console or make_console()
        columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("{task.fields[stats]}"), TimeElapsedColumn(), TimeRemainingColumn())  # fmt: skip
        self.bars = Progress(*columns, console=bars_console or make_console(stderr=True), disable=not bars)
        self.draws_bars = bars  # what a run's own bars (a trainer's) follow: ``progress.draws_bars``
        self._tasks: dict[str, Any] = {}

    def __enter__(self) -> RichReporter:
        self.bars.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bars.stop()

    def note(self, text: str, level: str = "info") -> None:
        if level == "section":
            self.console.rule(safe(text))
        else:
            self.console.print(f"[yellow]{safe(text)}[/]" if level == "warning" else safe(text))

    def advance(self, task: str, done: int, total: int | None, stats: str = "") -> None:
        if task not in self._tasks:
            self._tasks[task] = self.bars.add_task(safe(task), total=total, completed=done, stats=safe(stats))
        else:
            self.bars.update(self._tasks[task], completed=done, total=total, stats=safe(stats))


def _print_tables(console: Console, tables: Sequence[tuple[str, list[str], list[list[str]]]]) -> None:
    from rich.table import Table

    for name, header, rows in tables:
        console.print(f"[bold]{safe(name)}[/]")  # not a table title: those wrap at the table's width
        table = Table()
        for i, h in enumerate(header):
            table.add_column(h, justify="left" if i == 0 else "right")
        for row in rows:
            table.add_row(*map(safe, row))  # error texts, system names and paths are not markup
        console.print(table)


def print_summary(summary: Mapping[str, Any], console: Console | None = None, title: str = "Run") -> None:
    """A run's summary (``evaluation.report.summarize``) as the tables ``summary.md`` holds."""
    from autofocus.evaluation.report_tables import summary_tables

    _print_tables(console or make_console(), summary_tables(summary, title))


def print_comparison(rows: Sequence[Mapping[str, Any]], console: Console | None = None) -> None:
    """Runs compared with the first (``evaluation.report.comparison_rows``), with how to read them."""
    from autofocus.evaluation.report_tables import COMPARISON_NOTE, comparison_tables

    console = console or make_console()
    _print_tables(console, comparison_tables(rows, wide=False))
    if len(rows) > 1:
        console.print(safe(COMPARISON_NOTE))


def print_run(console: Console, summary: Mapping[str, Any], title: str, path: object, plots: Sequence[Any]) -> None:
    """A run's summary tables and where its files are (``evaluation.program_runs.summarise_run``)."""
    print_summary(summary, console, title=title)
    console.print(f"Summary and plots in {safe(path)}: summary.md, summary.json, "
                  + ", ".join(safe(getattr(p, "name", p)) for p in plots))


def counts_table(title: str, nodes: Mapping[str, int], edges: Mapping[str, int],
                 questions: Mapping[str, Mapping[str, int]]) -> Table:
    """A built SKB's nodes and edges per type and questions per kind and split (`demo build`, `bench build`)."""
    from rich.table import Table

    table = Table(title=safe(title), show_header=True)
    table.add_column("kind")
    table.add_column("type")
    table.add_column("count", justify="right")
    for name, count in nodes.items():
        table.add_row("node", name, f"{count:,}")
    for name, count in edges.items():
        table.add_row("edge", name, f"{count:,}")
    for kind, per_split in questions.items():
        table.add_row("question", kind, "  ".join(f"{s} {n}" for s, n in per_split.items()))
    return table
