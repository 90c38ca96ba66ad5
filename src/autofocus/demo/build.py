"""Build the offline demo SKB directory: the standard-library graph, its schema and its QA set."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import platform
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from autofocus.demo.questions import (
    KINDS,
    DemoQuestion,
    Dropped,
    GraphView,
    assign_splits,
    check_written,
    load_written_questions,
    missing_evidence,
    relational_questions,
    written_in_scope,
)
from autofocus.demo.stdlib_schema import ATTRIBUTE_TYPES, EDGE_TYPES, FULL_MODULES, NODE_TYPES, SMALL_MODULES
from autofocus.demo.stdlib_skb import Progress, StdlibGraph, collect_stdlib
from autofocus.skb.writer import write_skb_dir

_NODE_DESCRIPTIONS = {
    "module": "a standard-library module; is_package, implementation (python/extension/builtin), "
    "source_lines (all its source files), num_public_names",
    "class": "a public class; short_name, aliases (other public names), implementation (python/C), "
    "source_lines, num_methods (public methods in its body, documented or not), is_abstract",
    "exception": "a public exception or warning class; short_name, aliases, implementation, source_lines",
    "function": "a public module-level function; short_name, aliases, signature, num_params, is_async, "
    "implementation, source_lines",
    "method": "a public, documented method defined in a class body (built-in types and classes of some "
    "modules only); short_name, signature, num_params "
    "(without self/cls), is_async, implementation, source_lines, method_kind (method/classmethod/staticmethod)",
}


@dataclass
class DemoBuild:
    """What a build wrote, for the CLI summary and for provenance."""

    path: Path
    node_counts: dict[str, int]
    edge_counts: dict[str, int]
    qa_counts: dict[str, dict[str, int]]  # kind -> split -> count
    dropped: list[Dropped] = field(default_factory=list)
    evidence_missing: list[str] = field(default_factory=list)
    skipped_modules: list[str] = field(default_factory=list)
    seconds: float = 0.0


def build_date() -> str:
    """Today (UTC), or the date in ``SOURCE_DATE_EPOCH`` so that builds can be byte-identical."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    when = dt.datetime.fromtimestamp(int(epoch), dt.UTC) if epoch else dt.datetime.now(dt.UTC)
    return when.date().isoformat()


def demo_questions(graph: StdlibGraph) -> tuple[list[DemoQuestion], list[Dropped], list[str]]:
    """Relational questions generated from ``graph`` plus the hand-written ones that hold in it.

    Hand-written questions about modules the build did not ask for (the small variant) are left
    out quietly; those about modules it asked for but cannot confirm here are dropped and returned.
    """
    view = GraphView(graph.nodes, graph.edges)
    written = written_in_scope(load_written_questions(), {*graph.modules, *graph.skipped_modules})
    kept, dropped = check_written(view, written)
    questions = relational_questions(view) + kept
    order = {k: i for i, k in enumerate(KINDS)}
    questions.sort(key=lambda q: (order[q.kind], q.template, q.key))
    return (
        questions,
        dropped,
        missing_evidence(view, [w for w in written if w["key"] in {q.key for q in kept}]),
    )


def build_demo_skb(
    out: Path | str, small: bool = False, on_progress: Progress | None = None, warn: bool = True
) -> DemoBuild:
    """Build the standard-library SKB (``small``: a few hundred nodes, for tests) into ``out``.

    Hand-written questions that do not hold on this interpreter are dropped (with a warning
    unless ``warn`` is false: the result lists them either way); evidence phrases no longer
    found in a docstring are reported but the question is kept.

    Example:
        >>> build_demo_skb(Path("/tmp/demo"), small=True).node_counts["function"]  # doctest: +SKIP
        166
    """
    start = time.perf_counter()
    out = Path(out)
    graph = collect_stdlib(SMALL_MODULES if small else FULL_MODULES, on_progress)
    questions, dropped, evidence_missing = demo_questions(graph)
    if on_progress:
        on_progress("generate questions", 1, 1)
    if dropped and warn:
        warnings.warn(
            f"{len(dropped)} hand-written demo question(s) dropped on this interpreter: "
            + "; ".join(f"{d.key} ({d.reason})" for d in dropped[:5])
            + (" ..." if len(dropped) > 5 else ""),
            stacklevel=2,
        )
    splits = assign_splits(questions)
    ids = {n["name"]: n["id"] for n in graph.nodes}
    qa = [q.row(i, ids) for i, q in enumerate(questions)]
    split_of = {i: name for name, members in splits.items() for i in members}
    qa_counts = {k: {s: 0 for s in splits} for k in KINDS}
    for i, q in enumerate(questions):
        qa_counts[q.kind][split_of[i]] += 1
    node_counts = Counter(n["type"] for n in graph.nodes)
    edge_counts = Counter(t for _, t, _ in graph.edges)
    schema = _schema(graph, small, node_counts, edge_counts, qa_counts, dropped, evidence_missing)
    write_skb_dir(out, schema, graph.nodes, graph.edges, qa, splits)
    schema["source"]["sha256"] = {
        f: hashlib.sha256((out / f).read_bytes()).hexdigest() for f in ("nodes.jsonl", "edges.csv", "qa.csv")
    }
    (out / "schema.json").write_text(
        json.dumps(schema, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    if on_progress:
        on_progress("write", 1, 1)
    return DemoBuild(
        out,
        {t: node_counts[t] for t in NODE_TYPES if node_counts[t]},
        {t: edge_counts[t] for t in EDGE_TYPES if edge_counts[t]},
        qa_counts,
        dropped,
        evidence_missing,
        graph.skipped_modules,
        time.perf_counter() - start,
    )


def _schema(
    graph: StdlibGraph,
    small: bool,
    node_counts: Counter[str],
    edge_counts: Counter[str],
    qa_counts: dict[str, dict[str, int]],
    dropped: list[Dropped],
    evidence_missing: list[str],
) -> dict[str, Any]:
    version = platform.python_version()
    attributes: dict[str, list[str]] = {}
    for n in graph.nodes:
        attributes.setdefault(n["type"], [k for k in n if k not in ("id", "type", "name", "text")])
    node_types = {
        t: {
            "count": node_counts[t],
            "name_field": "name",
            "attributes": attributes[t],
            "attribute_types": {k: ATTRIBUTE_TYPES[k] for k in attributes[t]},
            "description": _NODE_DESCRIPTIONS[t],
        }
        for t in NODE_TYPES
        if node_counts[t]
    }
    edge_types = {
        t: {"count": edge_counts[t], "src_type": src, "dst_type": dst, "description": desc}
        for t, (src, dst, desc) in EDGE_TYPES.items()
        if edge_counts[t]
    }
    try:
        autofocus_version = metadata.version("autofocus")
    except metadata.PackageNotFoundError:
        autofocus_version = "unknown"
    return {
        "name": "python-stdlib-small" if small else "python-stdlib",
        "description": (
            f"The Python {version} standard library as a knowledge graph: {len(graph.modules)} modules with "
            "their public classes, exception classes, module-level functions, and the documented methods of "
            "built-in types and of well-known classes. "
            "A node's document is its docstring (leading paragraphs; callables start with their "
            "signature). Edges: a module imports another or is a submodule of another; a class, "
            "exception or function is provided by a module; a method is defined in a class; a class or "
            "exception subclasses another (nearest public base); a function or method raises an "
            "exception in its own source code. Names are qualified (json.JSONDecoder, os.path.join, "
            "str.join); built-ins have bare names (ValueError, len)."
        ),
        "node_types": node_types,
        "edge_types": edge_types,
        "candidate_types": list(node_types),
        "source": {
            "builder": "autofocus.demo.build_demo_skb",
            "autofocus_version": autofocus_version,
            "data": "docstrings, signatures, class hierarchy and source of the CPython standard library "
            "(Python Software Foundation License)",
            "python_version": version,
            "python_implementation": platform.python_implementation(),
            "platform": sys.platform,
            "built_on": build_date(),
            "variant": "small" if small else "full",
            "modules": list(graph.modules),
            "skipped_modules": graph.skipped_modules,
            "qa": {
                "counts": qa_counts,
                "split_fractions": "train 0.3 / val 0.2 / test 0.5 per kind, by stable hash of the question key",
                "dropped": [{"key": d.key, "reason": d.reason} for d in dropped],
                "evidence_missing": evidence_missing,
            },
        },
    }
