"""Build small in-memory SKBs for tests without going through a loader."""

from __future__ import annotations

import numpy as np

from autofocus.skb.graph import TypedGraph
from autofocus.skb.model import SKB, Column
from autofocus.skb.schema import EdgeTypeInfo, NodeTypeInfo, Schema
from autofocus.skb.text import TextArray


def make_skb(
    types: list[str],
    node_type: list[int] | np.ndarray,
    edges: list[tuple[int, str, int]],
    edge_types: dict[str, tuple[str | None, str | None]],
    names: list[str] | None = None,
    docs: list[str] | None = None,
    numbers: dict[str, list[float]] | None = None,
    candidate_types: list[str] | None = None,
    description: str = "a test knowledge base",
) -> SKB:
    node_type = np.asarray(node_type, dtype=np.int16)
    n = len(node_type)
    names = names or [f"node {i}" for i in range(n)]
    docs = docs or [f"document of {names[i]}" for i in range(n)]
    et_names = list(edge_types)
    src = np.array([e[0] for e in edges], dtype=np.int64)
    dst = np.array([e[2] for e in edges], dtype=np.int64)
    et = np.array([et_names.index(e[1]) for e in edges], dtype=np.int64)
    graph = TypedGraph.from_edges(n, src, dst, et, et_names)
    columns = {}
    for key, vals in (numbers or {}).items():
        arr = np.asarray(vals, dtype=np.float64)
        columns[key] = Column("number", arr, ~np.isnan(arr))
    schema = Schema(
        name="test",
        description=description,
        node_types={t: NodeTypeInfo(count=int((node_type == i).sum()), attributes=list(numbers or {}))
                    for i, t in enumerate(types)},
        edge_types={e: EdgeTypeInfo(src_type=s, dst_type=d) for e, (s, d) in edge_types.items()},
        candidate_types=candidate_types,
    )
    return SKB(schema, list(types), node_type, TextArray.from_strings(names), TextArray.from_strings(docs),
               columns, graph)


class GraphOnlyKB:
    """A knowledge base of only an SKB (no index, no embedder): enough for steps 3b-5 where every
    constant's name identifies its nodes (``exact_name_only``)."""

    def __init__(self, skb: SKB) -> None:
        self.skb = skb
