"""Step 3b: repair a parsed query so that the schema can accept it, before grounding.

A small LM writes queries that are nearly right: ``(y:exception)-[:class_subclass_of_class]->
(b:class {name: "ValueError"})`` uses a relationship between labels it does not connect and gives
the constant the wrong label; strict grounding then finds nothing. Repair looks for the reading of
the query that the graph can answer and that changes least, by scoring every assignment of node
labels to its variables jointly with the best relationship (and direction) for each triplet:

* label evidence per variable: the label as written (mapped onto the schema; an unknown label
  counts for the closest existing one), the node types under which a constant's name exists
  (exactly, or up to case and punctuation), and step 1's type for the target;
* per triplet, how well the written relationship names a relationship that connects the two
  labels in the graph (``SchemaGraph``), in the written direction or reversed; where no single
  relationship connects them, the shortest schema path (two hops) whose relationship names fit
  stands in for it (a two-hop question written as one hop).

Every change is returned as a ``Repair`` for the trace. A query the schema already accepts as
written comes back unchanged.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from autofocus.cypher.mapping import SchemaMapper
from autofocus.query_graph import QueryGraph, Symbol, Triplet
from autofocus.skb.model import SKB
from autofocus.skb.names import labels_named
from autofocus.skb.schema_graph import Hop, SchemaGraph

# Evidence weights: a constant's name is the strongest evidence of its label; a written label is
# worth as much as a perfectly named relationship; step 1 counts less than the query's own label.
W_NAME_EXACT, W_NAME_NORMALISED = 2.0, 1.5
W_LABEL = 1.0
W_STEP1 = 0.75
W_REL = 2.0  # per triplet, times the relationship-name similarity
FLIP_PENALTY = 0.3  # a reversed direction costs this much of a triplet's score
PATH_PENALTY = 0.5  # a two-hop path in place of one relationship
UNGROUNDABLE = -2.0  # a triplet between two labels that nothing connects
MIN_LABEL_SIMILARITY = 0.4  # an unknown label below this similarity to every label is ignored
MAX_OPTIONS = 6  # labels tried per variable
MAX_ASSIGNMENTS = 20_000


@dataclass(frozen=True, slots=True)
class Repair:
    kind: str  # label | relabel | relation | direction | path
    detail: str


@dataclass(frozen=True, slots=True)
class _Choice:
    score: float
    rel: str | None = None
    flipped: bool = False
    path: tuple[Hop, ...] = ()


def label_evidence(
    qg: QueryGraph, skb: SKB, mapper: SchemaMapper, target_type: str | None
) -> tuple[dict[str, dict[str, float]], list[Repair]]:
    """Per variable, a score for each label it may have; plus the notes on unknown labels."""
    labels = set(skb.node_type_names)
    evidence: dict[str, dict[str, float]] = {}
    notes: list[Repair] = []
    for var, sym in qg.symbols.items():
        ev: dict[str, float] = {}
        for written in (sym.label or "").split(":"):
            if not written:
                continue
            if written in labels:
                ev[written] = max(ev.get(written, 0.0), W_LABEL)
                continue
            scores = mapper.node_scores(written)
            best = max(scores, key=scores.__getitem__, default=None)
            if best is not None and scores[best] >= MIN_LABEL_SIMILARITY:
                ev[best] = max(ev.get(best, 0.0), W_LABEL * scores[best])
                if scores[best] < 0.95:
                    notes.append(Repair("label", f"{var}: unknown label {written!r} read as {best!r}"))
        name = sym.name_value()
        if name:
            named, how = labels_named(skb, name)
            weight = W_NAME_EXACT if how == "exact" else W_NAME_NORMALISED
            for label in named:
                ev[label] = ev.get(label, 0.0) + weight
        if var == qg.target and target_type in labels:
            ev[target_type] = ev.get(target_type, 0.0) + W_STEP1  # type: ignore[index]
        evidence[var] = ev
    return evidence, notes


def _triplet_choice(sg: SchemaGraph, rel_scores: dict[str, float] | None, head: str, tail: str,
                    directed: bool) -> _Choice:
    """The best way for a triplet to connect ``head`` and ``tail`` labels in the graph."""
    options: list[_Choice] = []
    for flipped, (a, b) in ((False, (head, tail)), (True, (tail, head))):
        for r in sg.between(a, b):
            if rel_scores is None:  # no type written: any relationship between the labels will do
                return _Choice(W_REL)
            penalty = FLIP_PENALTY if flipped and directed else 0.0
            options.append(_Choice(W_REL * (rel_scores.get(r.rel, 0.0) - penalty), r.rel, flipped))
    if options:
        return max(options, key=lambda c: c.score)
    for path in sg.paths(head, tail, max_hops=2):
        sim = 1.0 if rel_scores is None else max(rel_scores.get(h.rel, 0.0) for h in path)
        options.append(_Choice(W_REL * (sim - PATH_PENALTY), path=tuple(path)))
    if options:
        return max(options, key=lambda c: c.score)
    return _Choice(UNGROUNDABLE)


def _options(var: str, ev: dict[str, float], adjacent: set[str], labels: list[str]) -> list[str]:
    ranked = sorted(ev, key=lambda lab: -ev[lab])[:MAX_OPTIONS]
    if len(ranked) < MAX_OPTIONS:  # weakly labelled: labels the triplets could connect it to
        ranked += [lab for lab in labels if lab in adjacent and lab not in ranked][: MAX_OPTIONS - len(ranked)]
    return ranked or labels[:MAX_OPTIONS]


def repair_query(
    qg: QueryGraph, skb: SKB, sg: SchemaGraph, mapper: SchemaMapper, target_type: str | None = None
) -> tuple[QueryGraph, list[Repair]]:
    """The reading of ``qg`` that the graph can answer with the fewest changes (see module docstring)."""
    if not qg.triplets:
        return qg, []
    evidence, notes = label_evidence(qg, skb, mapper, target_type)
    rel_scores = [mapper.edge_scores(t.rel_label.split("|")[0]) if t.rel_label else None for t in qg.triplets]
    # labels a variable could take because some relationship the query names touches them
    touching: dict[str, set[str]] = {v: set() for v in qg.symbols}
    for t, scores in zip(qg.triplets, rel_scores, strict=True):
        fitting = [r for r in sg.relations if scores is None or scores.get(r.rel, 0.0) >= 0.5]
        for r in fitting:
            touching[t.head] |= {r.src, r.dst}
            touching[t.tail] |= {r.src, r.dst}
    variables = list(qg.symbols)
    options = [_options(v, evidence[v], touching[v], sg.labels) for v in variables]
    while _product(len(o) for o in options) > MAX_ASSIGNMENTS:
        longest = max(range(len(options)), key=lambda i: len(options[i]))
        options[longest] = options[longest][:-1]
    best: tuple[float, dict[str, str], list[_Choice]] | None = None
    for combo in itertools.product(*options):
        assign = dict(zip(variables, combo, strict=True))
        score = sum(evidence[v].get(assign[v], 0.0) for v in variables)
        choices = [
            _triplet_choice(sg, s, assign[t.head], assign[t.tail], t.directed)
            for t, s in zip(qg.triplets, rel_scores, strict=True)
        ]
        score += sum(c.score for c in choices)
        if best is None or score > best[0] + 1e-9:
            best = (score, assign, choices)
    assert best is not None
    _, assign, choices = best
    return _apply(qg, assign, choices, notes)


def _product(sizes: object) -> int:
    out = 1
    for s in sizes:  # type: ignore[attr-defined]
        out *= s
    return out


def _apply(qg: QueryGraph, assign: dict[str, str], choices: list[_Choice],
           notes: list[Repair]) -> tuple[QueryGraph, list[Repair]]:
    repairs = list(notes)
    symbols: dict[str, Symbol] = {}
    for var, sym in qg.symbols.items():
        label = assign[var]
        if sym.type != label:
            why = f"name {sym.name_value()!r} exists as a {label}" if sym.is_constant else "fits the relationships"
            was = sym.label or "no label"
            repairs.append(Repair("relabel", f"{var}: {was} -> {label} ({why})"))
        symbols[var] = sym.model_copy(update={"type": label})
    triplets: list[Triplet] = []
    fresh = itertools.count(1)
    for t, c in zip(qg.triplets, choices, strict=True):
        written = t.rel_label or "any"
        if c.path:
            node, head = t.head, t.head
            hops = []
            for i, hop in enumerate(c.path):
                nxt = t.tail if i == len(c.path) - 1 else _fresh(symbols, fresh)
                if nxt not in symbols:
                    symbols[nxt] = Symbol(var=nxt, type=hop.dst)
                a, b = (node, nxt) if hop.forward else (nxt, node)
                triplets.append(Triplet(head=a, rel=hop.rel, rel_label=t.rel_label, tail=b))
                hops.append(f"-[:{hop.rel}]{'->' if hop.forward else '-'}({nxt}:{hop.dst})")
                node = nxt
            repairs.append(Repair("path", f"({head})-[:{written}]->({t.tail}) read as two hops: ({head})" + "".join(hops)))
            continue
        if c.rel is None:  # no type written, or nothing connects the labels: grounding will say
            triplets.append(t)
            continue
        head, tail = (t.tail, t.head) if c.flipped else (t.head, t.tail)
        if c.rel != t.rel:
            repairs.append(Repair("relation", f"({t.head})-[:{written}]-({t.tail}): {written} -> {c.rel}"))
        if c.flipped and t.directed:
            repairs.append(Repair("direction", f"{c.rel} goes ({head})->({tail})"))
        # a relationship between two labels has one direction; between one label and itself, keep the query's
        directed = t.directed or assign[head] != assign[tail]
        triplets.append(Triplet(head=head, rel=c.rel, rel_label=t.rel_label, tail=tail, directed=directed))
    target_type = symbols[qg.target].type if qg.target in symbols else qg.target_type
    return qg.model_copy(update={"symbols": symbols, "triplets": triplets, "target_type": target_type}), repairs


def _fresh(symbols: dict[str, Symbol], counter: itertools.count[int]) -> str:
    while True:
        name = f"_via{next(counter)}"
        if name not in symbols:
            return name
