"""``autofocus skb build | info | validate``: load and cache an SKB, describe it, check its files."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.table import Table

from autofocus.cli_app import app
from autofocus.console import make_console, print_error, safe

console = make_console()
err_console = make_console(stderr=True)

skb_app = typer.Typer(
    help="Semi-structured knowledge bases: build the cache, inspect, validate.", no_args_is_help=True
)
app.add_typer(skb_app, name="skb")

PathArg = Annotated[Path, typer.Argument(help="SKB directory, or a STaRK dataset root / processed folder")]
ProfileOpt = Annotated[
    str | None,
    typer.Option(help="STaRK profile: prime, mag, amazon, a JSON file, none (default: auto-detect)"),
]


def _print_issues(exc: Exception) -> None:
    print_error(err_console, exc)


@skb_app.command("build")
def build(
    path: PathArg,
    profile: ProfileOpt = None,
    force: Annotated[
        bool, typer.Option("--force", help="rebuild the cache even if it is up to date")
    ] = False,
) -> None:
    """Load an SKB (with progress bars) and write its binary cache; a second run reads the cache."""
    from autofocus.skb.cache import cache_dir_for
    from autofocus.skb.errors import SKBFormatError
    from autofocus.skb.io import is_cached, load_skb

    try:
        hit = not force and is_cached(path, profile=profile)
        start = time.perf_counter()
        skb = load_skb(path, profile=profile, rebuild=force)
    except (SKBFormatError, FileNotFoundError, ValueError) as exc:
        _print_issues(exc)
        raise typer.Exit(1) from None
    seconds = time.perf_counter() - start
    console.print(
        f"{'Loaded from cache' if hit else 'Built cache'} in {seconds:.2f} s: {skb.num_nodes:,} nodes, "
        f"{skb.num_edges:,} edges, {len(skb.node_type_names)} node types -> {safe(cache_dir_for(path))}"
    )


@skb_app.command("info")
def info(
    path: PathArg,
    profile: ProfileOpt = None,
    samples: Annotated[int, typer.Option(help="sample nodes to show per type")] = 2,
) -> None:
    """Counts per node type, edge types with their endpoint types, candidate types, samples, QA splits."""
    from autofocus.skb.errors import SKBFormatError
    from autofocus.skb.io import load_skb
    from autofocus.skb.qa import splits_available

    try:
        skb = load_skb(path, profile=profile)
    except (SKBFormatError, FileNotFoundError, ValueError) as exc:
        _print_issues(exc)
        raise typer.Exit(1) from None
    schema = skb.schema
    console.print(f"[bold]{safe(schema.name)}[/]: {skb.num_nodes:,} nodes, {skb.num_edges:,} edges")
    if schema.description:
        console.print(safe(schema.description))

    nodes = Table(title="Node types")
    for col in ("type", "nodes", "candidate", "name field", "attributes"):
        nodes.add_column(col)
    answer_types = set(schema.answer_types)
    for t, count in skb.counts_by_type().items():
        meta = schema.node_types.get(t)
        nodes.add_row(
            safe(t),
            f"{count:,}",
            "yes" if t in answer_types else "",
            safe(meta.name_field) if meta else "",
            safe(", ".join(meta.attributes)) if meta else "",
        )
    console.print(nodes)

    edges = Table(title="Edge types (directed)")
    for col in ("edge type", "src type", "dst type", "edges"):
        edges.add_column(col)
    for e in skb.graph.edge_types:
        meta = schema.edge_types.get(e)
        edges.add_row(
            safe(e),
            safe((meta and meta.src_type) or "any"),
            safe((meta and meta.dst_type) or "any"),
            f"{skb.graph.num_edges(e):,}",
        )
    console.print(edges)

    sample = Table(title="Sample nodes")
    for col in ("id", "type", "name", "attributes"):
        sample.add_column(col)
    for t in skb.node_type_names:
        for i in skb.ids_of_type(t)[:samples].tolist():
            attrs = "; ".join(f"{k}={v}" for k, v in skb.attributes(i).items())
            sample.add_row(str(i), safe(t), safe(skb.name(i)), safe(attrs[:120]))
    console.print(sample)

    splits = splits_available(path)
    if splits:
        qa = Table(title="QA splits")
        qa.add_column("split")
        qa.add_column("questions")
        for name, size in splits.items():
            qa.add_row(safe(name), f"{size:,}")
        console.print(qa)
    else:
        console.print("No QA files found.")


@skb_app.command("validate")
def validate(path: PathArg, profile: ProfileOpt = None) -> None:
    """Check every file strictly (never uses or writes the cache); exit code 1 with a table of problems.

    Beyond what loading checks: a split folder must hold the standard splits (train, val, test).
    """
    from autofocus.skb.errors import SKBFormatError
    from autofocus.skb.io import load_skb
    from autofocus.skb.qa import standard_split_issues

    splits = standard_split_issues(path) if path.is_dir() else []
    try:
        skb = load_skb(path, profile=profile, cache=False)
    except SKBFormatError as exc:
        _print_issues(SKBFormatError(exc.issues + splits, exc.truncated))
        raise typer.Exit(1) from None
    except (FileNotFoundError, ValueError) as exc:
        _print_issues(exc)
        raise typer.Exit(1) from None
    if splits:
        _print_issues(SKBFormatError(splits))
        raise typer.Exit(1)
    degree = np.zeros(skb.num_nodes, dtype=np.int64)
    for e in skb.graph.edge_types:
        degree += np.diff(skb.graph.forward[e].indptr) + np.diff(skb.graph.reverse[e].indptr)
    isolated = int(np.count_nonzero(degree == 0))
    console.print(
        f"[green]OK[/]: {skb.num_nodes:,} nodes, {skb.num_edges:,} edges, {len(skb.columns)} attribute columns, "
        f"{isolated:,} isolated nodes"
    )
