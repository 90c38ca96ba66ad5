"""Terminal output of text from files, LMs and users (``autofocus.console``)."""

from __future__ import annotations

import io
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from autofocus.console import PIPE_WIDTH, make_console, print_error, safe
from autofocus.redact import REDACTED
from autofocus.skb.errors import FormatIssue, SKBFormatError


def _printed(exc: BaseException) -> str:
    console = make_console()
    console.file = io.StringIO()
    print_error(console, exc)
    return console.file.getvalue()


@pytest.mark.parametrize("text", ["nodes.jsonl:100: bad [/] value", "[bold]not bold[/bold] :smile:"])
def test_errors_print_literally(text: str) -> None:
    assert text in _printed(ValueError(text))


def test_format_errors_print_as_a_table_and_keys_never_print() -> None:
    out = _printed(SKBFormatError([FormatIssue("qa.csv", 3, "[/]weird sk-abcdefghijklmnop0123")]))
    assert "qa.csv" in out and "[/]weird" in out and REDACTED in out and "sk-abc" not in out


def test_safe_escapes_markup() -> None:
    console = make_console()
    console.file = io.StringIO()
    console.print(f"[red]{safe('[/] and [link]')}[/]")
    assert console.file.getvalue().strip() == "[/] and [link]"


def _command_paths(command: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if hasattr(command, "commands"):  # a group (typer bundles its own click)
        return [p for name, sub in command.commands.items() for p in _command_paths(sub, (*path, name))]
    return [path]


def test_every_command_prints_its_help() -> None:
    """Help texts hold URL forms (``host:port[/db]``) that a markup parser would read as tags."""
    from autofocus.cli import app

    paths = _command_paths(typer.main.get_command(app))
    assert ("skb", "import") in paths and ("report", "fusion") in paths
    runner = CliRunner()
    for path in paths:
        res = runner.invoke(app, [*path, "--help"])
        assert res.exit_code == 0, (path, res.output)
        assert "Usage" in res.output
    import_help = " ".join(runner.invoke(app, ["skb", "import", "--help"]).output.split())
    assert "bolt://host:port[/db]" in import_help and "CSV or Parquet" in import_help


def test_a_console_writing_to_a_file_is_wide_enough_for_run_names(monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.table import Table

    monkeypatch.delenv("COLUMNS", raising=False)
    console = make_console()
    assert not console.is_terminal and console.width == PIPE_WIDTH
    table = Table()
    for col in ("system", "metric", "questions", "delta", "95% CI", "detectable", "p", "p Holm", "p Holm < 0.05"):
        table.add_column(col)
    table.add_row("fit-dir120-test", "mrr", "87", "+4.9", "[+1.1, +9.1]", "5.7", "0.014", "0.014", "yes")
    with console.capture() as out:
        console.print(table)
    assert "fit-dir120-test" in out.get()
    monkeypatch.setenv("COLUMNS", "70")
    assert make_console().width == 70
