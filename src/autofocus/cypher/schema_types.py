"""Step 3's types, once every clause is read: each symbol's node type from the labels the query gave it
(or step 1's type for an unlabelled target), each triplet's edge type from its relationship types and
its endpoints' types, and the type an untyped endpoint's edges all imply. Strict and lenient mode
differ here only (``autofocus.cypher.builder``): strict leaves a guess untyped, lenient keeps it as a
hint; either way the guess is recorded as dropped."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from autofocus.cypher.mapping import SchemaMapper


@dataclass(slots=True)
class Trip:
    """A triplet as the query wrote it, then typed (``rel``, ``alternatives``) by ``SchemaTypes``."""

    head: str
    tail: str
    types: list[str]
    directed: bool
    text: str
    rel: str | None = None
    alternatives: list[str] = field(default_factory=list)


class SchemaTypes:
    """Types the symbols and triplets of one query onto the schema of ``mapper`` (None: labels pass
    through), filling ``types`` (var -> node type) and each ``Trip``'s edge type in place, so that a
    failure part way keeps what was typed; ``drop(text, reason)`` records what was not kept."""

    def __init__(self, mapper: SchemaMapper | None, strict: bool, drop: Callable[[str, str], None],
                 types: dict[str, str | None]) -> None:
        self.mapper = mapper
        self.strict = strict
        self.drop = drop
        self.types = types
        self.reported: set[str] = set()

    def assign(self, labels: dict[str, list[list[str]]], trips: list[Trip], target: str | None,
               target_type: str | None) -> None:
        """``labels``: var -> the labels of each node pattern that has some; ``target_type``: step 1's."""
        for var, uses in labels.items():
            self.types[var] = self.node_type(var, uses)
        if target is not None and self.types.get(target) is None and target_type:
            self.types[target] = self.map_target_type(target_type)
        for t in trips:
            self.edge_type(t)
        if self.mapper is not None:
            self.infer_types(trips)

    def node_type(self, var: str, uses: list[list[str]]) -> str | None:
        chosen: str | None = None
        for labels in uses:
            for label in labels:
                t = self.map_label(label)
                if t is None:
                    continue
                if chosen is None:
                    chosen = t
                elif t != chosen:
                    self.drop(
                        f"{var}:{label}",
                        f"{var} is already a {chosen}; a node has one type, the first is kept",
                    )
        return chosen

    def map_label(self, label: str) -> str | None:
        if self.mapper is None:
            return label
        m = self.mapper.node_type(label)
        report = label not in self.reported  # one Dropped per label, not per use
        self.reported.add(label)
        if m.name is None:
            if report:
                self.drop(f":{label}", "label matches no node type of the schema")
            return None
        if m.how == "ambiguous":
            tied = ", ".join((m.name, *m.ties))
            outcome = "symbol left untyped" if self.strict else f"{m.name} kept as a hint"
            if report:
                self.drop(f":{label}", f"label matches several node types equally ({tied}): {outcome}")
            if self.strict:
                return None
        return m.name

    def map_target_type(self, target_type: str) -> str | None:
        if self.mapper is None:
            return target_type
        m = self.mapper.node_type(target_type)
        if m.name is None or (m.how == "ambiguous" and self.strict):
            self.drop(target_type, "the given target type matches no node type of the schema")
            return None
        return m.name

    def edge_type(self, t: Trip) -> None:
        if not t.types:
            return
        if self.mapper is None:
            t.rel, t.alternatives = t.types[0], t.types[1:]
            return
        head_type, tail_type = self.types.get(t.head), self.types.get(t.tail)
        accepted: list[tuple[str, bool]] = []
        for label in t.types:
            m = self.mapper.edge_type(label, head_type, tail_type, t.directed)
            text = f"[:{label}]"
            if m.name is None:
                self.drop(text, "relationship type matches no edge type of the schema")
                continue
            if m.how == "ambiguous":
                tied = ", ".join((m.name, *m.ties))
                if self.strict:
                    self.drop(text, f"relationship type matches several edge types equally ({tied})")
                    continue
                self.drop(
                    text, f"relationship type matches several edge types equally ({tied}): {m.name} kept"
                )
            if not m.fits:
                info = self.mapper.schema.edge_types[m.name]
                clash = (
                    f"edge type {m.name} connects {info.src_type or '*'} -> {info.dst_type or '*'}, "
                    f"not {t.head}:{head_type} and {t.tail}:{tail_type}"
                )
                if self.strict:
                    self.drop(text, f"{clash}: dropped")
                    continue
                self.drop(text, f"{clash}: kept as a hint")
            if m.name not in (a for a, _ in accepted):
                accepted.append((m.name, m.flipped))
        if not accepted:
            return
        flips = {f for _, f in accepted}
        if flips == {True}:
            info = self.mapper.schema.edge_types[accepted[0][0]]
            self.drop(
                f"({t.head})-[:{'|'.join(t.types)}]->({t.tail})",
                f"direction reversed: edge type {accepted[0][0]} goes {info.src_type or '*'} -> {info.dst_type or '*'}",
            )
            t.head, t.tail = t.tail, t.head
        elif len(flips) == 2:
            self.drop(t.text, "the alternative edge types go opposite ways: matched in either direction")
            t.directed = False
        t.rel, t.alternatives = accepted[0][0], [a for a, _ in accepted[1:]]

    def infer_types(self, trips: list[Trip]) -> None:
        """An untyped endpoint of typed edges gets the node type that all of them imply."""
        assert self.mapper is not None
        edges = self.mapper.schema.edge_types
        implied: dict[str, set[str | None]] = {}
        for t in trips:
            if t.rel is None or not t.directed:
                continue
            for rel in (t.rel, *t.alternatives):
                implied.setdefault(t.head, set()).add(edges[rel].src_type)
                implied.setdefault(t.tail, set()).add(edges[rel].dst_type)
        for var, types in implied.items():
            if self.types.get(var) is None and len(types) == 1 and None not in types:
                self.types[var] = next(iter(types))
