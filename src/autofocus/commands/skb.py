"""``autofocus skb build | info | validate | import | export``: load and cache an SKB, describe it, check
its files, import one from a graph database, tables or networkx, export one to FalkorDB."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.progress import Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from autofocus.cli_app import command_group
from autofocus.console import make_console, print_error, safe
from autofocus.skb.errors import FormatIssue, SKBFormatError

console = make_console()
err_console = make_console(stderr=True)

skb_app = command_group("skb", "Semi-structured knowledge bases: build the cache, inspect, validate, import, export.")

PathArg = Annotated[Path, typer.Argument(help="SKB directory, or a STaRK dataset root / processed folder")]
ProfileOpt = Annotated[
    str | None,
    typer.Option(help="STaRK profile: prime, mag, amazon, a JSON file, none (default: auto-detect)"),
]


def _print_issues(exc: Exception) -> None:
    print_error(err_console, exc)


def _print_warnings(issues: list[FormatIssue]) -> None:
    """What is valid but worth knowing (a missing standard split), one yellow line each on stderr."""
    for issue in issues:
        err_console.print(f"[yellow]warning: {safe(issue.file)}: {safe(issue.reason)} (valid, as splits are "
                          "optional; commands whose default split is missing need --split)[/]")


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

    A split folder without one of the standard splits (train, val, test) is valid (splits are optional;
    most KBs have no training questions) and gets a warning: commands that default to it need --split.
    """
    from autofocus.skb.io import load_skb
    from autofocus.skb.qa import standard_split_issues

    warnings = standard_split_issues(path) if path.is_dir() else []
    try:
        skb = load_skb(path, profile=profile, cache=False)
    except (SKBFormatError, FileNotFoundError, ValueError) as exc:
        _print_issues(exc)
        _print_warnings(warnings)
        raise typer.Exit(1) from None
    _print_warnings(warnings)
    degree = np.zeros(skb.num_nodes, dtype=np.int64)
    for e in skb.graph.edge_types:
        degree += np.diff(skb.graph.forward[e].indptr) + np.diff(skb.graph.reverse[e].indptr)
    isolated = int(np.count_nonzero(degree == 0))
    console.print(
        f"[green]OK[/]: {skb.num_nodes:,} nodes, {skb.num_edges:,} edges, {len(skb.columns)} attribute columns, "
        f"{isolated:,} isolated nodes"
    )


def _csv_list(value: str | None) -> list[str] | None:
    return None if value is None else [v.strip() for v in value.split(",") if v.strip()]


def _attr_types(values: list[str]) -> dict[str, str]:
    from autofocus.skb.importers.model import ATTR_KINDS

    out = {}
    for item in values:
        key, _, kind = item.partition("=")
        if kind not in ATTR_KINDS or not key:
            raise typer.BadParameter(f"{item!r}: expected KEY=KIND with KIND one of {', '.join(ATTR_KINDS)}")
        out[key] = kind
    return out


@skb_app.command("import")
def import_command(
    source: Annotated[str, typer.Argument(help="falkordb://[user:pw@]host:port/graph, bolt://host:port[/db], a "
                                          "folder of node/edge tables as CSV or Parquet (nodes.csv|parquet + "
                                          "edges.csv|parquet, or nodes/<type>.csv|parquet + edges/<rel>.csv|parquet), "
                                          "a mapping .json, or a .graphml/.gexf/node-link .json")],
    out: Annotated[Path, typer.Argument(help="the SKB directory to write (new or empty)")],
    id_prop: Annotated[str | None, typer.Option(help="database: the property that identifies a node (default: "
                                                "the internal id)")] = None,
    id_col: Annotated[str | None, typer.Option(help="tables: the node id column (default: id, :ID, _id, node_id)")] = None,
    type_col: Annotated[str | None, typer.Option(help="tables: the node type column (type, label, :LABEL, ...); "
                                                 "networkx: the type attribute")] = None,
    src_col: Annotated[str | None, typer.Option(help="tables: the edge source column (src, source, :START_ID, ...)")] = None,
    dst_col: Annotated[str | None, typer.Option(help="tables: the edge target column (dst, target, :END_ID, ...)")] = None,
    rel_col: Annotated[str | None, typer.Option(help="tables: the relationship column (type, relation, :TYPE, ...)")] = None,
    name_prop: Annotated[str | None, typer.Option(help="name properties to try, in order (default: name,title,label,"
                                                  "display_name,full_name)")] = None,
    text_props: Annotated[str | None, typer.Option(help="properties that make the document, in order (default: "
                                                   "text, description, abstract, ... if present, else prose-like strings)")] = None,
    candidate_types: Annotated[str | None, typer.Option(help="node types that can be answers (default: all)")] = None,
    label_priority: Annotated[str | None, typer.Option(help="multi-label nodes take the first of these labels "
                                                       "(default: their rarest label)")] = None,
    attr_type: Annotated[list[str] | None, typer.Option(help="KEY=number|date|string|json, overriding inference "
                                                        "(repeatable)")] = None,
    drop_dangling: Annotated[bool, typer.Option("--drop-dangling", help="drop edges to unknown nodes (reported) "
                                                "instead of failing")] = False,
    default_type: Annotated[str, typer.Option(help="type of nodes without a label")] = "node",
    default_relation: Annotated[str, typer.Option(help="type of edges without one")] = "related_to",
    name: Annotated[str | None, typer.Option(help="the SKB's name (default: graph, folder or file name)")] = None,
    description: Annotated[str | None, typer.Option(help="the SKB's description for the prompts (default: "
                                                    "generated from the types and relationships)")] = None,
    qa: Annotated[Path | None, typer.Option(help="QA CSV (id, query, answer_ids as source ids[, split])")] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="write into a folder that is not empty")] = False,
    page: Annotated[int | None, typer.Option(help="database: records per page", min=1)] = None,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="show counts while reading")] = True,
) -> None:
    """Turn a graph database, node/edge tables (CSV or Parquet) or a networkx graph into an SKB directory
    (docs/import.md)."""
    from autofocus.skb.importers import ImportOptions, SourceError, import_skb
    from autofocus.skb.importers.model import DEFAULT_NAME_PROPS
    from autofocus.skb.importers.tables import TableRoles
    from autofocus.skb.io import load_skb

    options = ImportOptions(
        name_props=_csv_list(name_prop) or DEFAULT_NAME_PROPS,
        text_props=_csv_list(text_props),
        candidate_types=_csv_list(candidate_types),
        label_priority=_csv_list(label_priority) or (),
        attribute_types=_attr_types(attr_type or []),
        drop_dangling=drop_dangling,
        default_type=default_type,
        default_relation=default_relation,
        name=name,
        description=description,
    )
    roles = TableRoles(id=id_col, type=type_col, source=src_col, target=dst_col, relation=rel_col)
    start = time.perf_counter()
    bar = Progress(TextColumn("{task.description}"), TextColumn("{task.completed:,}"), TimeElapsedColumn(),
                   console=err_console, transient=True, disable=not progress)  # fmt: skip
    tasks = {"nodes": bar.add_task("nodes read", total=None), "edges": bar.add_task("edges written", total=None)}
    try:
        with bar:
            result = import_skb(source, out, options, id_prop=id_prop, qa=qa, overwrite=overwrite, roles=roles,
                                type_key=type_col or "type", page=page,
                                tick=lambda stage, n: bar.advance(tasks[stage], n))  # fmt: skip
        skb = load_skb(out, progress=False)  # validates, and writes the cache every command reads
    except (SourceError, SKBFormatError, FileNotFoundError) as exc:
        _print_issues(exc)
        raise typer.Exit(1) from None
    for line in result.report.lines:
        console.print(f"  {safe(line)}", soft_wrap=True)
    console.print(
        f"[green]Imported[/] {result.nodes:,} nodes of {len(result.node_types)} types and {result.edges:,} edges of "
        f"{len(result.edge_types)} types in {time.perf_counter() - start:.1f} s -> {safe(out)} (valid: "
        f"{skb.num_nodes:,} nodes, {skb.num_edges:,} distinct edges"
        + (f"; {result.questions} questions" if result.questions else "") + ")",
        soft_wrap=True,
    )
    console.print(f"Next: autofocus index build {safe(out)}; autofocus synth --skb {safe(out)} -n 100 (questions "
                  "without labels)", soft_wrap=True)  # fmt: skip


@skb_app.command("export")
def export_command(
    path: Annotated[Path, typer.Argument(help="SKB directory")],
    to: Annotated[str, typer.Option(help="falkordb://[user:pw@]host:port[/graph] (graph: the SKB's name)")],
    replace: Annotated[bool, typer.Option("--replace", help="delete the graph first if it exists")] = False,
    batch: Annotated[int, typer.Option(help="nodes or edges per write", min=1)] = 5000,
) -> None:
    """Load an SKB into FalkorDB with its labels, relationship types, names, documents and attributes."""
    from autofocus.skb.export import export_skb
    from autofocus.skb.importers import SourceError

    try:
        result = export_skb(path, to, replace=replace, batch=batch)
    except (SourceError, SKBFormatError, FileNotFoundError) as exc:
        _print_issues(exc)
        raise typer.Exit(1) from None
    console.print(f"[green]Exported[/] {result.nodes:,} nodes and {result.edges:,} edges to {safe(result.url)} in "
                  f"{result.seconds:.1f} s; `autofocus ask ... --trace` prints each query for this graph")  # fmt: skip
