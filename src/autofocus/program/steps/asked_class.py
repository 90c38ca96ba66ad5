"""Step 3b: the class node a question asks about, where it asks for no label by name.

In a taxonomy-shaped graph the asked kind of thing is often a node, not a label: "Which composers came
from Brazil?" asks for ``person`` nodes that are instances of the node "composer"; "Which rodents dig
burrows?" for the ``animal`` nodes that are kinds of "rodent". A small LM rarely writes that hop (it
writes the condition it can read, "from Brazil"), so the grounded set misses the class and the answers
drown among every person. Where the question's asked phrase (the words after its question word, as
``label_phrases.asked_label`` reads them) names no label but names a node that the graph uses as a class
of the target's type, or of a type step 1 found plausible (at least ``MIN_MEMBERS`` nodes of that type
point at it through one relationship type, or it at them), the target is linked to that node or to one of its kinds: the nodes
below it through the membership relationship that chains there (the one with the most two-hop paths
into the class: "Centrarchidae" is_a "fish family" is_a "family"; a river's instance_of does not chain),
through the relationships that link target-type nodes to the class and its kinds ("Kattegatt"
instance_of "strait" is_a "body of water"). Everything here is read from the question's words and the
graph: no schema's vocabulary. The link is an added condition; where the query's own conditions and the
class exclude each other, relaxation drops the query's conditions first (they sit before the link, at
the same distance from the target).
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from autofocus.program.steps.label_phrases import (
    AUXILIARIES,
    COPULA,
    DETERMINERS,
    STOP_WORDS,
    LabelPhrases,
    after_question_word,
    asked_label,
    question_words,
    singular,
)
from autofocus.query_graph import KIND_DEPTH, Constraint, QueryGraph, Symbol, Triplet
from autofocus.skb.model import SKB
from autofocus.skb.names import exact_name_ids

MIN_MEMBERS = 2  # target-type nodes that must point at a node through one relationship for it to be a class
MIN_SHARE = 0.2  # a relationship links the class's members if it carries at least this share of the commonest's links
MAX_PHRASE_WORDS = 5  # words of the asked phrase read after the question word
_JOIN = "of"  # "Which kinds of lizard": the phrase goes on past "of"


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


def asked_phrases(question: str) -> list[str]:
    """Candidate names in the asked phrase, the rightmost-ending first, then the longest: "Which
    tennis players came from Australia?" gives "tennis players came", "players came", "came", "tennis
    players", "tennis player", ...; the head word also in the singular."""
    words = question_words(question)
    rest = words[1:] if words[:1] == ["who"] else after_question_word(question) or []
    if rest[:1] and rest[0] in COPULA and rest[1:2] and rest[1] in DETERMINERS:
        rest = rest[1:]  # "What are the parts of ...", "Who are the astronauts?"
    elif words[:1] == ["who"]:
        return []  # "Who wrote Hamlet?": a verb, no asked phrase
    rest = list(itertools.dropwhile(lambda w: w in DETERMINERS or w == _JOIN, rest))
    span: list[str] = []
    for w in rest[:MAX_PHRASE_WORDS]:
        if (w in STOP_WORDS and w != _JOIN) or w in COPULA or w in AUXILIARIES:
            break  # the asked phrase ends where the question's verb or preposition begins
        span.append(w)
    out: list[str] = []
    for end in range(len(span), 0, -1):
        for begin in range(end):
            gram = span[begin:end]
            if gram[0] == _JOIN or gram[-1] == _JOIN:
                continue
            # the head in the singular: the last word, or the first before "of" ("bodies of water")
            forms = (gram, [*gram[:-1], singular(gram[-1])], [singular(gram[0]), *gram[1:]] if _JOIN in gram else gram)
            for form in (" ".join(f) for f in forms):
                if form not in out:
                    out.append(form)
    return out


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
    # the membership relationships: a country's 48 instances and 11 kinds, not the 2 members of a union
    rels = tuple(sorted((r for (r, p), n in counts.items() if p == way and n >= MIN_SHARE * top),
                        key=lambda r: -counts[(r, way)]))
    direction = "in" if way else "out"
    extent, kinds, via = subclasses(skb, node, rels, direction)
    if len(kinds):  # members of the class's kinds may link another way ("Kattegatt" instance_of "strait")
        ids = np.concatenate([[node], kinds])
        linked = {r: int((skb.node_type[skb.graph.adjacency(r, direction).gather(ids)[1]] == code).sum())
                  for r in skb.graph.edge_types}
        most = max(linked.values())
        rels = tuple(sorted((r for r, n in linked.items() if n and n >= MIN_SHARE * most), key=lambda r: -linked[r]))
    return AskedClass(skb.name(node), skb.type_of(node), member_type, rels, way, sum(counts.get((r, way), 0) for r in rels), extent,
                      via if len(kinds) else None)


def subclasses(skb: SKB, node: int, rels: tuple[str, ...], direction: str,
               ) -> tuple[tuple[int, ...], np.ndarray, str | None]:
    """``node`` and the nodes below it through the one of ``rels`` that chains at it (most two-hop
    paths into it, where any): a class's kinds and their kinds, whose members are its members too; and
    its kinds alone (one level below), whose own members say how members link (deeper levels of a
    taxonomy are groups with members of their own: a family's species are no family); and the
    relationship followed."""
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


def find_asked_class(skb: SKB, question: str, *member_types: str, named: frozenset[str] = frozenset(),
                     ) -> AskedClass | None:
    """The class node the asked phrase names for answers of one of ``member_types`` (None where the
    question asks for a label by name, or its phrase names no class). Phrases come first, then the types
    in their order: "Which mountain peaks ..." finds "mountain peak" for one type before "peak" for
    another. ``named``: names the query already has as constants (lower case), which are what the answers
    relate to, not what they are ("Which rivers flow through India?": India is no class of rivers)."""
    types = [t for t in member_types if t in skb.node_type_names]
    if not types or asked_label(question, LabelPhrases.of(skb.node_type_names)) is not None:
        return None
    relationship = relation_words(skb)
    for phrase in asked_phrases(question):
        if {singular(w) for w in phrase.split()} <= relationship:
            continue  # "the parts of a nerve cell", "members of Canidae": a relationship, not a class
        nodes = [n for n in exact_name_ids(skb, phrase).tolist() if skb.name(n).lower() not in named]
        for member_type in types:
            found = [c for node in nodes if (c := class_of(skb, int(node), member_type))]
            if found:
                return max(found, key=lambda c: c.members)
    return None


def relation_words(skb: SKB) -> frozenset[str]:
    """The words of the schema's relationship names ("part" of ``part_of``), stop words aside."""
    return frozenset(w for r in skb.graph.edge_types for w in re.split(r"[\W_]+", r.lower()) if w and w not in STOP_WORDS)


def asked_class_finder(skb: SKB, question: str) -> Callable[..., AskedClass | None]:
    """``find_asked_class`` for one question, each combination of types and names looked up once."""
    return functools.cache(functools.partial(find_asked_class, skb, question))


def link_asked_class(qg: QueryGraph, skb: SKB, question: str, find: Callable[..., AskedClass | None] | None = None,
                     kept: Sequence[str] = ()) -> tuple[QueryGraph, str | None]:
    """``qg`` with its target linked to the asked class node, and the change as text (None: unchanged).
    The class is looked for among the target's types, then step 1's ``kept`` types: where it is a class of
    one of step 1's types only, the two LM steps disagree on the label and the graph's class settles it,
    so the target may be of that type too (its members are; the link admits nothing else). ``find`` is
    ``find_asked_class`` for this question; a caller linking several readings of one question passes one
    that remembers its answers (``asked_class_finder``)."""
    target = qg.symbols.get(qg.target) if qg.target else None
    if target is None or target.type is None:
        return qg, None
    types = tuple(dict.fromkeys([*target.types, *kept]))
    named = frozenset((s.name_value() or "").lower() for s in qg.symbols.values() if s.is_constant)
    found = (find or asked_class_finder(skb, question))(*types, named=named)
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
