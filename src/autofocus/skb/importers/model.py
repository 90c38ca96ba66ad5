"""What every import source produces and what every import reports: the one intermediate form.

A source (a graph database, tables, a networkx graph) yields nodes one page at a time and then
edges one page at a time. ``build.write_import`` turns that stream into an SKB directory, so the
rules (types of multi-label nodes, names, documents, attribute kinds, dangling edges) are the same
whatever the source. Nothing here holds a whole graph.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

AttrKind = Literal["number", "date", "string", "json"]
ATTR_KINDS: tuple[AttrKind, ...] = ("number", "date", "string", "json")
DEFAULT_NAME_PROPS = ("name", "title", "label", "display_name", "full_name")
DOC_PROPS = ("text", "description", "document", "doc", "abstract", "summary", "content", "body", "comment")
DEFAULT_TYPE = "node"
DEFAULT_RELATION = "related_to"
EXAMPLES = 3  # examples per report line


class SourceError(ValueError):
    """A source that cannot be imported: one line saying where and why (the CLI prints it as is)."""


@dataclass(slots=True)
class NodeRecord:
    """One node as read: ``ref`` is what the source's edges point at (a database's internal id, a
    table's id value), ``key`` the node's id for people and QA files (``--id-prop`` or ``ref``)."""

    ref: Hashable
    key: Hashable
    labels: Sequence[str]
    props: dict[str, Any]


@dataclass(slots=True)
class EdgeBatch:
    """A page of directed, typed edges as arrays (``src``/``dst`` hold refs of nodes).

    ``where`` names the file or query for error lines and ``rows`` the row numbers there (1-based
    data rows), so that a bad edge is reported as ``edges.parquet: row 17: ...``.
    """

    src: np.ndarray
    dst: np.ndarray
    relation: np.ndarray  # strings, one per edge
    where: str
    rows: np.ndarray
    prop_counts: Mapping[str, int] = field(default_factory=dict)  # edge property -> edges carrying it


class Source(Protocol):
    """What ``build.write_import`` reads: nodes first, then edges, each as a stream of pages."""

    label: str  # the source as the user named it, for messages and the schema's provenance
    default_name: str  # the SKB name unless the user gives one

    def nodes(self) -> Iterator[list[NodeRecord]]: ...

    def edges(self) -> Iterator[EdgeBatch]: ...

    def notes(self) -> list[str]:
        """Rules the source itself applied (e.g. undirected edges stored one way), for the report."""
        ...


@dataclass
class ImportOptions:
    """The choices an import makes, each with the default the docs state (docs/import.md)."""

    name_props: Sequence[str] = DEFAULT_NAME_PROPS  # the first present on a type is its name
    text_props: Sequence[str] | None = None  # None: DOC_PROPS if present, else prose-like strings
    candidate_types: Sequence[str] | None = None  # None: every type
    label_priority: Sequence[str] = ()  # multi-label nodes: the first of these they carry wins
    attribute_types: Mapping[str, AttrKind] = field(default_factory=dict)  # overrides inference
    drop_dangling: bool = False  # edges to unknown nodes: error (False) or dropped and reported
    default_type: str = DEFAULT_TYPE  # nodes without a label
    default_relation: str = DEFAULT_RELATION  # edges without a type
    name: str | None = None  # schema name
    description: str | None = None  # schema description (default: generated from the graph)


@dataclass
class ReportLine:
    """One rule applied: what happened, to how many, with examples."""

    rule: str
    message: str
    count: int = 0
    examples: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        tail = f" (e.g. {', '.join(self.examples)})" if self.examples else ""
        return f"{self.rule}: {self.message}{tail}"


@dataclass
class ImportReport:
    """Every rule the import applied, one line each: nothing is lost silently."""

    lines: list[ReportLine] = field(default_factory=list)

    def add(self, rule: str, message: str, count: int = 0, examples: Sequence[Any] = ()) -> None:
        self.lines.append(ReportLine(rule, message, count, [_short(e) for e in list(examples)[:EXAMPLES]]))

    def to_json(self) -> list[dict[str, Any]]:
        return [{"rule": r.rule, "message": r.message, "count": r.count, "examples": r.examples} for r in self.lines]


def _short(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
