"""A networkx graph as an import source, for graphs built in Python (or read from GraphML, GEXF or
node-link JSON files).

A node's ``type`` attribute (a string or a list of labels) is its type, an edge's ``type`` its
relationship; every other attribute of a node is a property. Edges of an undirected graph are
stored once, in the direction networkx lists them; edges of a multigraph keep their own types.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from autofocus.skb.importers.model import EdgeBatch, NodeRecord, SourceError

PAGE = 10_000
FILE_READERS = {".graphml": "graphml", ".gexf": "gexf", ".json": "node-link JSON"}


class NetworkxSource:
    """``graph``'s nodes and edges as a ``model.Source``; ``type_key`` names the type attribute."""

    def __init__(self, graph: nx.Graph, label: str | None = None, type_key: str = "type") -> None:
        self.graph = graph
        self.type_key = type_key
        self.label = label or f"networkx.{type(graph).__name__}"
        self.default_name = str(graph.graph.get("name") or "networkx-graph")
        self._renamed = 0

    def nodes(self) -> Iterator[list[NodeRecord]]:
        page: list[NodeRecord] = []
        for node, data in self.graph.nodes(data=True):
            props = dict(data)
            labels = props.pop(self.type_key, None)
            key = self._key(node)
            page.append(NodeRecord(key, key, [labels] if isinstance(labels, str) else list(labels or []), props))
            if len(page) == PAGE:
                yield page
                page = []
        if page:
            yield page

    def edges(self) -> Iterator[EdgeBatch]:
        rows = iter(self.graph.edges(data=True))
        start = 0
        while chunk := [e for _, e in zip(range(PAGE), rows, strict=False)]:
            props: Counter[str] = Counter()
            for _, _, data in chunk:
                props.update(k for k in data if k != self.type_key)
            yield EdgeBatch(
                src=_array([self._key(u) for u, _, _ in chunk]),
                dst=_array([self._key(v) for _, v, _ in chunk]),
                relation=_array([d.get(self.type_key) for _, _, d in chunk]),
                where=self.label,
                rows=np.arange(start + 1, start + len(chunk) + 1),
                prop_counts=props,
            )
            start += len(chunk)

    def notes(self) -> list[str]:
        notes = []
        if not self.graph.is_directed():
            notes.append("the graph is undirected: each edge is stored once, from the node networkx lists first; "
                         "queries can still walk it either way")  # fmt: skip
        if self._renamed:
            notes.append(f"{self._renamed} node key(s) are neither int nor str: their str() is the id")
        return notes

    def _key(self, node: Any) -> int | str:
        if isinstance(node, str) or (isinstance(node, int | np.integer) and not isinstance(node, bool)):
            return node
        self._renamed += 1
        return str(node)


def _array(values: list[Any]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def read_graph_file(path: Path | str) -> NetworkxSource:
    """A GraphML, GEXF or node-link JSON file read by networkx (never a pickle: it could run code)."""
    path = Path(path)
    if path.suffix not in FILE_READERS:
        raise SourceError(f"{path}: not a graph file networkx reads here ({', '.join(FILE_READERS)})")
    try:
        if path.suffix == ".graphml":
            graph = nx.read_graphml(path)
        elif path.suffix == ".gexf":
            graph = nx.read_gexf(path)
        else:
            data = json.loads(path.read_text(encoding="utf-8"))
            graph = nx.node_link_graph(data, edges="links" if "links" in data else "edges")
    except (OSError, ValueError, KeyError, TypeError, nx.NetworkXError) as exc:
        raise SourceError(f"{path.name}: cannot read it as {FILE_READERS[path.suffix]}: {exc}") from None
    graph.graph.setdefault("name", path.stem)
    return NetworkxSource(graph, label=str(path))
