"""``autofocus demo build``: the offline demo SKB, built from this Python's own standard library."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from autofocus.cli_app import command_group
from autofocus.console import counts_table, make_console, print_error, safe

console = make_console()
err_console = make_console(stderr=True)
demo_app = command_group("demo", "The offline demo: an SKB of the Python standard library with a QA set.")


@demo_app.command("build")
def build_cmd(
    out: Annotated[Path, typer.Argument(help="directory to write the SKB to (created if missing)")],
    small: Annotated[bool, typer.Option(help="~500 nodes from a handful of modules, for tests")] = False,
) -> None:
    """Build the standard-library SKB (schema.json, nodes.jsonl, edges.csv, qa.csv, splits/) into OUT."""
    from autofocus.demo.build import build_demo_skb

    if out.exists() and not out.is_dir():
        raise typer.BadParameter(f"{out} exists and is not a directory", param_hint="OUT")
    tasks: dict[str, TaskID] = {}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as progress:  # fmt: skip

        def report(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = progress.add_task(stage, total=total)
            progress.update(tasks[stage], completed=done, total=total)

        result = build_demo_skb(out, small=small, on_progress=report, warn=False)

    console.print(counts_table(f"{out} ({result.seconds:.1f} s)", result.node_counts, result.edge_counts, result.qa_counts))
    if result.skipped_modules:
        console.print(f"modules not importable here (skipped): {', '.join(result.skipped_modules)}")
    if result.dropped:
        console.print(f"[yellow]{len(result.dropped)} hand-written question(s) dropped:[/yellow]")
        for d in result.dropped:
            console.print(safe(f"  {d.key}: {d.reason}"))
    if result.evidence_missing:
        n = len(result.evidence_missing)
        console.print(f"docstrings reworded on this Python (questions kept): {n}")


@demo_app.command("heldout")
def heldout_cmd(
    skb: Annotated[Path, typer.Argument(help="the demo SKB (made by `autofocus demo build`)", exists=True,
                                        file_okay=False)],
    per_template: Annotated[int, typer.Option(help="questions per relational template beyond the build's",
                                              min=1)] = 12,
    out: Annotated[Path | None, typer.Option(help="folder for qa_heldout.csv (default: the SKB); commands "
                                             "read it with --qa-dir", file_okay=False)] = None,
) -> None:
    """Write fresh relational questions no run has seen (qa_heldout.csv, the split `heldout`): a second
    held-out set for effects the test split is too small to confirm. Never mixed into train/val/test."""
    from autofocus.demo.heldout import write_heldout

    try:
        path, counts = write_heldout(skb, per_template, out)
    except (OSError, ValueError) as exc:
        print_error(err_console, exc)
        raise typer.Exit(1) from None
    if not counts:
        console.print(safe(f"{path}: no question left: this build asks every instance its templates have "
                           "(the small variant does); build the full demo for a held-out split"), soft_wrap=True)
        return
    table = Table(title=safe(f"{path} ({sum(counts.values())} questions, split `heldout`)"))
    table.add_column("template")
    table.add_column("questions", justify="right")
    for name, count in sorted(counts.items()):
        table.add_row(name, str(count))
    console.print(table)
