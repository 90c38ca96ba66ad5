"""The schema as the graph really has it: which (source label, relationship, target label) triples
occur, how often, which attributes each label carries, and a representative node per label.

``schema.json`` may leave an edge type's domain or range open (``src_type: null``) or declare one
pair where the data holds several (STaRK PRIME's relations connect many type pairs); the valid
outputs of query generation and the query repair must come from the edges themselves. Everything
is computed with numpy over the CSR arrays, once per SKB.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from autofocus.skb.model import SKB


@dataclass(frozen=True, slots=True)
class Relation:
    """One typed triple that occurs in the graph: ``(:src)-[:rel]->(:dst)``, ``count`` edges."""

    src: str
    rel: str
    dst: str
    count: int


@dataclass(frozen=True, slots=True)
class Hop:
    """One step of a schema path: ``rel`` followed forward (src -> dst) or backward."""

    rel: str
    forward: bool
    dst: str  # the label reached


@dataclass
class SchemaGraph:
    labels: list[str]
    relations: list[Relation]
    attributes: dict[str, list[str]] = field(default_factory=dict)  # label -> attribute names its nodes carry
    examples: dict[str, str] = field(default_factory=dict)  # label -> name of its best-connected node
    counts: dict[str, int] = field(default_factory=dict)  # label -> nodes

    @classmethod
    def from_skb(cls, skb: SKB, min_share: float = 0.0) -> SchemaGraph:
        """Derive the triples from the edges; ``min_share`` drops type pairs that carry less than this
        share of an edge type's edges (noise in user data), never the most frequent pair."""
        names = skb.node_type_names
        n_types = len(names)
        types = skb.node_type.astype(np.int64)
        relations: list[Relation] = []
        degree = np.zeros(skb.num_nodes, dtype=np.int64)
        for rel in skb.graph.edge_types:
            csr = skb.graph.forward[rel]
            if len(csr.indices) == 0:
                continue
            out_deg = np.diff(csr.indptr)
            degree += out_deg
            degree += np.diff(skb.graph.reverse[rel].indptr)
            src_types = np.repeat(types, out_deg)
            pair_counts = np.bincount(src_types * n_types + types[csr.indices], minlength=n_types * n_types)
            present = np.flatnonzero(pair_counts)
            top = pair_counts.max()
            total = pair_counts.sum()
            for code in present.tolist():
                c = int(pair_counts[code])
                if c == top or c >= min_share * total:
                    relations.append(Relation(names[code // n_types], rel, names[code % n_types], c))
        counts = skb.counts_by_type()
        attributes: dict[str, list[str]] = {t: [] for t in names}
        for key, col in skb.columns.items():
            per_type = np.bincount(types[np.asarray(col.present)], minlength=n_types)
            for code in np.flatnonzero(per_type).tolist():
                attributes[names[code]].append(key)
        examples: dict[str, str] = {}
        for label in names:
            ids = skb.ids_of_type(label)
            if len(ids):
                examples[label] = skb.name(int(ids[int(np.argmax(degree[ids]))]))
        return cls(list(names), relations, attributes, examples, counts)

    @cached_property
    def rel_names(self) -> list[str]:
        return sorted({r.rel for r in self.relations})

    @cached_property
    def _by_pair(self) -> dict[tuple[str, str], list[Relation]]:
        out: dict[tuple[str, str], list[Relation]] = {}
        for r in self.relations:
            out.setdefault((r.src, r.dst), []).append(r)
        return out

    def between(self, src: str, dst: str) -> list[Relation]:
        """Relations from ``src`` to ``dst`` (in that direction)."""
        return self._by_pair.get((src, dst), [])

    def related(self, a: str, b: str) -> bool:
        """Whether a relationship connects two labels, either way."""
        return bool(self.between(a, b) or self.between(b, a))

    def touching(self, label: str) -> list[Relation]:
        return [r for r in self.relations if label in (r.src, r.dst)]

    def fits(self, src: str | None, rel: str, dst: str | None) -> bool:
        """Whether ``rel`` connects ``src`` to ``dst`` somewhere in the graph (None: any label)."""
        return any(
            r.rel == rel and (src is None or r.src == src) and (dst is None or r.dst == dst) for r in self.relations
        )

    def paths(self, src: str, dst: str, hops: int = 2) -> list[list[Hop]]:
        """Every label path of exactly ``hops`` relationships from ``src`` to ``dst``, each followed
        in either direction (the triples are few, so a depth-first walk is cheap)."""
        out: list[list[Hop]] = []

        def walk(label: str, path: list[Hop]) -> None:
            if len(path) == hops:
                if label == dst:
                    out.append(path)
                return
            for r in self.touching(label):
                if r.src == label:
                    walk(r.dst, [*path, Hop(r.rel, True, r.dst)])
                if r.dst == label:
                    walk(r.src, [*path, Hop(r.rel, False, r.src)])

        walk(src, [])
        return out

    def describe_label(self, label: str, max_relations: int = 6, description: str = "", example: bool = True) -> str:
        """One line on what distinguishes a label: the schema's description of it (what a question
        that names no label, "who ...", needs to be read), its relationships (``max_relations`` 0:
        none) and an example node."""
        rels = sorted(self.touching(label), key=lambda r: -r.count)[:max_relations]
        parts = []
        for r in rels:
            parts.append(f"-[:{r.rel}]->({r.dst})" if r.src == label else f"<-[:{r.rel}]-({r.src})")
        text = f"{label} ({self.counts.get(label, 0)} nodes)"
        if description.strip():
            text += f" = {description.strip()}"
        if parts:
            text += ": " + ", ".join(parts)
        if example and label in self.examples:
            text += f"; e.g. {self.examples[label]!r}"
        return text


def schema_graph(skb: SKB) -> SchemaGraph:
    """The SKB's schema graph, computed once and kept on the SKB object."""
    cached = skb.__dict__.get("_schema_graph")
    if cached is None:
        cached = skb.__dict__["_schema_graph"] = SchemaGraph.from_skb(skb)
    return cached
