"""``asked_class``: the target linked to the class node the question asks about, where it names no label.

In a taxonomy-shaped graph the asked kind of thing is often a node, not a label: a question may ask for
``person`` nodes that are instances of the node "composer", or for the ``animal`` nodes that are kinds of
"rodent". A small LM rarely writes that hop (it writes the condition it can read), so the grounded set
misses the class and the answers drown among every node of the label. Where the question asks for no
label by name (``QuestionReading.asked_label``) but its asked phrase (``QuestionReading.asked_phrases``)
names a node that the graph uses as a class of the target's type, or of a type step 1 found plausible
(at least ``MIN_MEMBERS`` nodes of that type point at it through one relationship type, or it at them),
the target is linked to that node or to one of its kinds: the nodes below it through the membership
relationship that chains there (the one with the most two-hop paths into the class), through the
relationships that link target-type nodes to the class and its kinds. Everything here is read from the
question's words and the graph: no schema's vocabulary. The link is an added condition; where the
query's own conditions and the class exclude each other, relaxation drops the query's conditions first
(they sit before the link, at the same distance from the target).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

import numpy as np

from autofocus.program.steps.reading import QuestionReading
from autofocus.program.steps.repairs.base import Context, Repair, Rewrite
from autofocus.query_graph import KIND_DEPTH, Constraint, QueryGraph, Symbol, Triplet
from autofocus.skb.model import SKB
from autofocus.skb.names import exact_name_ids

MIN_MEMBERS = 2  # target-type nodes that must point at a node through one relationship for it to be a class
MIN_SHARE = 0.2  # a relationship links the class's members if it carries at least this share of the commonest's links


@dataclass(frozen=True)
class AskedClass:
    """A class node the question asks about and how the target's nodes reach it."""

    name: str  # the node's name as the graph writes it
    label: str  # the class node's own label
    member_type: str  # the label of the members it was found for
    rels: tuple[str, ...]  # relationship types between members and the class
    members_point_at_class: bool  # member -[rel]-> class (else class -[rel]-> member)
    members: int  # target-type nodes linked to it that way
    extent: tuple[int, ...] = ()  # the class node and its subclasses (sorted ids): what a member links to
    kinds_via: str | None = None  # the relationship its kinds reach it through (None: no kinds)


def class_of(skb: SKB, node: int, member_type: str) -> AskedClass | None:
    """How ``member_type`` nodes link to ``node`` as to a class, if at least ``MIN_MEMBERS`` do."""
    code = skb.type_code(member_type)
    counts: dict[tuple[str, bool], int] = {}
    rows = np.asarray([node], dtype=np.int64)
    for rel in skb.graph.edge_types:
        for members_point, direction in ((True, "in"), (False, "out")):
            nb = skb.graph.adjacency(rel, direction).gather(rows)[1]
            n = int((skb.node_type[nb] == code).sum())
            if n >= MIN_MEMBERS:
                counts[(rel, members_point)] = n
    if not counts:
        return None
    way = max((True, False), key=lambda d: sum(n for (_, p), n in counts.items() if p == d))
    top = max(n for (_, p), n in counts.items() if p == way)
    # the membership relationships: the commonest ones, not a relationship only a few members have
    rels = tuple(sorted((r for (r, p), n in counts.items() if p == way and n >= MIN_SHARE * top),
                        key=lambda r: -counts[(r, way)]))
    direction = "in" if way else "out"
    extent, kinds, via = subclasses(skb, node, rels, direction)
    if len(kinds):  # members of the class's kinds may link another way than the kinds link to the class
        ids = np.concatenate([[node], kinds])
        linked = {r: int((skb.node_type[skb.graph.adjacency(r, direction).gather(ids)[1]] == code).sum())
                  for r in skb.graph.edge_types}
        most = max(linked.values())
        rels = tuple(sorted((r for r, n in linked.items() if n and n >= MIN_SHARE * most), key=lambda r: -linked[r]))
    return AskedClass(skb.name(node), skb.type_of(node), member_type, rels, way, sum(counts.get((r, way), 0) for r in rels),
                      extent, via if len(kinds) else None)


def subclasses(skb: SKB, node: int, rels: tuple[str, ...], direction: str,
               ) -> tuple[tuple[int, ...], np.ndarray, str | None]:
    """``node`` and the nodes below it through the one of ``rels`` that chains at it (most two-hop
    paths into it, where any): a class's kinds and their kinds, whose members are its members too; and
    its kinds alone (one level below), whose own members say how members link (deeper levels of a
    taxonomy are groups with members of their own); and the relationship followed."""
    row = np.asarray([node], dtype=np.int64)

    def below(r: str, ids: np.ndarray) -> np.ndarray:
        return np.unique(skb.graph.adjacency(r, direction).gather(ids)[1])

    chains = {r: len(below(r, below(r, row))) for r in rels}
    sub = max(rels, key=lambda r: chains[r]) if rels else None
    seen = np.zeros(skb.num_nodes, dtype=bool)
    seen[node] = True
    frontier, kinds = row, np.zeros(0, np.int64)
    for level in range(KIND_DEPTH if sub is not None and chains[sub] else 0):
        nxt = below(sub, frontier)  # type: ignore[arg-type]
        frontier = nxt[~seen[nxt]]
        if level == 0:
            kinds = frontier
        if len(frontier) == 0:
            break
        seen[frontier] = True
    return tuple(np.flatnonzero(seen).tolist()), kinds, sub


def find_asked_class(reading: QuestionReading, member_types: tuple[str, ...],
                     named: frozenset[str] = frozenset()) -> AskedClass | None:
    """The class node the asked phrase names for answers of one of ``member_types`` (None where the
    question asks for a label by name, or its phrase names no class). Phrases come first, then the types
    in their order: a longer phrase that names a class of one type wins over a shorter one that names a
    class of another. ``named``: names the query already has as constants (lower case), which are what
    the answers relate to, not what they are. Looked up once per question and arguments."""
    key = ("asked_class", member_types, named)
    if key not in reading.memo:
        reading.memo[key] = _find(reading, member_types, named)
    return reading.memo[key]  # type: ignore[return-value]


def _find(reading: QuestionReading, member_types: tuple[str, ...], named: frozenset[str]) -> AskedClass | None:
    skb = reading.skb
    types = [t for t in member_types if t in skb.node_type_names]
    if not types or reading.asked_label is not None:
        return None
    relationship = relation_words(reading)
    for phrase in reading.asked_phrases:
        if {reading.lang.singular(w) for w in phrase.split()} <= relationship:
            continue  # the phrase words a relationship ("the parts of", "members of"), not a class
        nodes = [n for n in exact_name_ids(skb, phrase).tolist() if skb.name(n).lower() not in named]
        for member_type in types:
            found = [c for node in nodes if (c := class_of(skb, int(node), member_type))]
            if found:
                return max(found, key=lambda c: c.members)
    return None


def relation_words(reading: QuestionReading) -> frozenset[str]:
    """The words of the schema's relationship names ("part" of ``part_of``), stop words aside."""
    stop = reading.lang.stop_words
    return frozenset(w for r in reading.skb.graph.edge_types for w in re.split(r"[\W_]+", r.lower()) if w and w not in stop)


class AskedClassRule(Rewrite):
    """The target linked to the asked class node (module docstring). The class is looked for among the
    target's types, then step 1's plausible types: where it is a class of one of step 1's types only, the
    two LM steps disagree on the label and the graph's class settles it, so the target may be of that
    type too (its members are; the link admits nothing else). Applies to the second readings too."""

    name = "asked_class"
    readings = True

    def rewrite(self, query: QueryGraph, reading: QuestionReading, ctx: Context) -> tuple[QueryGraph, list[Repair]]:
        query, detail = link_asked_class(query, reading, ctx.types)
        return query, [] if detail is None else [Repair("class", detail)]


def link_asked_class(qg: QueryGraph, reading: QuestionReading, kept: tuple[str, ...] = ()) -> tuple[QueryGraph, str | None]:
    """``qg`` with its target linked to the asked class node, and the change as text (None: unchanged);
    ``kept``: step 1's plausible types."""
    target = qg.symbols.get(qg.target) if qg.target else None
    if target is None or target.type is None:
        return qg, None
    types = tuple(dict.fromkeys([*target.types, *kept]))
    named = frozenset((s.name_value() or "").lower() for s in qg.symbols.values() if s.is_constant)
    found = find_asked_class(reading, types, named)
    if found is None:
        return qg, None
    var = next(f"_class{i}" for i in itertools.count(1) if f"_class{i}" not in qg.symbols)
    symbols = {**qg.symbols, var: Symbol(var=var, type=found.label, label=found.label, extent=list(found.extent),
                                         kinds_via=found.kinds_via,
                                         constraints=[Constraint(key="name", value=found.name)])}
    widened = ""
    if found.member_type not in target.types:
        symbols[target.var] = target.model_copy(update={"also": [*target.also, found.member_type]})
        widened = f" (step 1's {found.member_type}, not the query's {target.type})"
    head, tail = (qg.target, var) if found.members_point_at_class else (var, qg.target)
    link = Triplet(head=head, rel=found.rels[0], rel_alternatives=list(found.rels[1:]), rel_label="|".join(found.rels),
                   tail=tail, directed=True)
    shown = f"({head})-[:{'|'.join(found.rels)}]->({tail} {{name: {found.name!r}}})"
    subs = f" and its {len(found.extent) - 1} subclasses" if len(found.extent) > 1 else ""
    detail = (f"the question asks for {found.member_type} nodes{widened} of the class {found.name!r}{subs} "
              f"({found.members} linked): {shown}")
    return qg.model_copy(update={"symbols": symbols, "triplets": [*qg.triplets, link]}), detail
