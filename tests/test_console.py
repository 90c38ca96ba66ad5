"""Terminal output of text from files, LMs and users (``autofocus.console``)."""

from __future__ import annotations

import io

import pytest

from autofocus.console import make_console, print_error, safe
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
