"""Options objects instead of option lists: short library signatures, rich at the command layer only."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

import autofocus
from autofocus.options import EvalOptions, PromptOptOptions, SynthOptions, TuneOptions

PACKAGE = Path(autofocus.__file__).parent
MAX_PARAMETERS = 10


def _library_functions() -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function and method of the package outside ``autofocus.commands`` (the typer commands,
    whose parameters are the CLI's options)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] == "commands":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                found.append((f"{rel}:{node.lineno} {node.name}", node))
    return found


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
    a = node.args
    named = [p for p in (*a.posonlyargs, *a.args, *a.kwonlyargs) if p.arg not in ("self", "cls")]
    return named + [p for p in (a.vararg, a.kwarg) if p is not None]


def test_no_library_function_takes_more_than_ten_parameters() -> None:
    functions = _library_functions()
    assert len(functions) > 500  # the walk sees the package
    too_long = [f"{where} ({len(_parameters(node))})" for where, node in functions
                if len(_parameters(node)) > MAX_PARAMETERS]  # fmt: skip
    assert not too_long, f"more than {MAX_PARAMETERS} parameters (pass an options object): {too_long}"


def test_only_the_terminal_layer_takes_a_rich_console() -> None:
    takes_console = [
        where for where, node in _library_functions()
        if not where.startswith("console.py")
        and any(p.annotation is not None and "Console" in ast.unparse(p.annotation) for p in _parameters(node))
    ]  # fmt: skip
    assert not takes_console, f"report progress through autofocus.progress.Reporter: {takes_console}"


@pytest.mark.parametrize("options", [TuneOptions, PromptOptOptions, SynthOptions, EvalOptions])
def test_every_option_is_documented_and_frozen(options: type) -> None:
    documented = set(re.findall(r"^        (\w+): \S", options.__doc__ or "", re.M))
    fields = {f.name for f in dataclasses.fields(options)}
    assert fields == documented, f"undocumented: {fields - documented}; documented but no field: {documented - fields}"
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(options(), dataclasses.fields(options)[0].name, None)


def test_the_api_takes_an_options_object_or_its_fields_by_name(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="trails"):  # a misspelt option is no silent default
        autofocus.tune(tmp_path, trails=3)
    with pytest.raises(TypeError, match="clue_knd"):
        autofocus.synthesise(tmp_path, 3, clue_knd="phrase")
