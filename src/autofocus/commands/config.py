"""``autofocus config show``: the effective configuration of a system, grouped by step, with what
each setting does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from autofocus import runtime
from autofocus.cli_app import command_group
from autofocus.console import OPEN_ERRORS, make_console, print_error, safe

console = make_console()
err_console = make_console(stderr=True)
config_app = command_group("config", "The settings of a program: what they are, what they do.")


def parse_settings(items: list[str]) -> dict[str, Any]:
    """``["alpha=0.5", "merge.k=10", "relax=[]"]`` -> settings; a value is JSON where it parses
    (numbers, true/false, null, lists, objects), else the text itself."""
    out: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name.strip():
            raise typer.BadParameter(f"expected NAME=VALUE, got {item!r}", param_hint="--set")
        try:
            out[name.strip()] = json.loads(text)
        except json.JSONDecodeError:
            out[name.strip()] = text
    return out


@config_app.command("show")
def show_cmd(
    system: Annotated[str | None, typer.Option(help="system preset whose defaults apply, e.g. afr, afr-paper, vss "
                                               "(default: afr, or the --program's own)")] = None,
    config: Annotated[Path | None, typer.Option(help="config JSON (grouped or flat, e.g. best_config.json)",
                                                exists=True, dir_okay=False)] = None,
    program: Annotated[Path | None, typer.Option(help="optimised program: its system and config",
                                                 exists=True, dir_okay=False)] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="NAME=VALUE on top of the preset, flat (alpha=0.5) or grouped (merge.alpha=0.5); repeatable"
    )] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the configuration as JSON (loadable with --config)")] = False,
) -> None:
    """Print the configuration a command would run with: the config file (or a saved program's), the
    system preset's defaults, then --set; bold values differ from the defaults."""
    from autofocus.config import GROUPS, describe

    try:
        base = runtime.load_config(config, program_file=program)
        cfg = runtime.resolve_system(system, base, program)[1].updated(parse_settings(set_ or []))
    except OPEN_ERRORS as exc:  # a damaged file, an unknown system or setting, a bad value
        print_error(err_console, exc)
        raise typer.Exit(1) from None
    if as_json:
        print(cfg.model_dump_json(indent=2))
        return
    tables: dict[str, Table] = {}
    for s in describe(cfg):
        group = s.group or "top level"
        if group not in tables:
            about = (GROUPS[s.group].__doc__ or "").split("\n\n")[0] if s.group else "the steps that run"
            tables[group] = Table("setting", "value", "what it does", title=safe(f"{group}: {' '.join(about.split())}"),
                                  title_justify="left", expand=True)
        value = safe(json.dumps(s.value) if not isinstance(s.value, str) else s.value)
        tables[group].add_row(safe(s.name), f"[bold]{value}[/]" if s.value != s.default else value,
                              safe(s.description))
    for table in tables.values():
        console.print(table)
