"""The run summaries and comparisons of ``eval``, ``compare`` and ``report`` as terminal tables (the
same tables ``evaluation.report`` writes as markdown)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from autofocus.console import make_console, safe
from autofocus.evaluation.report import COMPARISON_NOTE, comparison_tables, summary_tables


def _print_tables(console: Console, tables: Sequence[tuple[str, list[str], list[list[str]]]]) -> None:
    for name, header, rows in tables:
        console.print(f"[bold]{safe(name)}[/]")  # not a table title: those wrap at the table's width
        table = Table()
        for i, h in enumerate(header):
            table.add_column(h, justify="left" if i == 0 else "right")
        for row in rows:
            table.add_row(*map(safe, row))  # error texts, system names and paths are not markup
        console.print(table)


def print_summary(summary: Mapping[str, Any], console: Console | None = None, title: str = "Run") -> None:
    _print_tables(console or make_console(), summary_tables(summary, title))


def print_comparison(rows: Sequence[Mapping[str, Any]], console: Console | None = None) -> None:
    console = console or make_console()
    _print_tables(console, comparison_tables(rows, wide=False))
    if len(rows) > 1:
        console.print(safe(COMPARISON_NOTE))
