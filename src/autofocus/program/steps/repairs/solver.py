"""``solve``: the reading of the query that the graph can answer and that changes least.

Every assignment of node labels to the query's variables is scored jointly with the best relationship
(and direction) for each triplet:

* label evidence per variable: the label as written (mapped onto the schema; an unknown label counts
  for the closest existing one), the node types under which a constant's name exists (exactly, or up
  to case and punctuation), and step 1's type for the target;
* per triplet, how well the written relationship names a relationship that connects the two labels in
  the graph (``SchemaGraph``), in the written direction or reversed; where no single relationship
  connects them, the shortest schema path (two hops) whose relationship names fit stands in for it (a
  two-hop question written as one hop).

A hop's second reading (a two-hop path) is kept for grounding to try when the first grounds nothing.
The hint of ``via_named_label`` steers the paths.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from autofocus.program.steps.reading import QuestionReading
from autofocus.program.steps.repairs.base import Context, Draft, Reading, Repair
from autofocus.program.steps.repairs.links import link
from autofocus.query_graph import QueryGraph, Symbol, Triplet
from autofocus.skb.names import labels_named
from autofocus.skb.schema_graph import Hop, SchemaGraph
from autofocus.usage import deadline_passed

# Evidence weights: a constant's name is the strongest evidence of its label; a written label is
# worth as much as a perfectly named relationship; step 1 counts less than the query's own label.
W_NAME_EXACT, W_NAME_NEAR = 2.0, 1.5  # near: up to case and punctuation, or the end of a qualified name
W_LABEL = 1.0
W_TARGET_LABEL = 1.5  # relabelling the target changes what is asked: it takes more evidence
W_STEP1 = 0.75
W_UNNAMED = 2.0  # a constant kept under a label that has no node of its name (when another label has one)
W_REL = 2.0  # per triplet, times the relationship-name similarity
FLIP_PENALTY = 0.3  # a reversed direction costs this much of a triplet's score
PATH_PENALTY = 0.5  # a two-hop path in place of one relationship
UNGROUNDABLE = -2.0  # a triplet between two labels that nothing connects
EXACT = 0.95  # a name similarity at least this high is the name written, up to form
MIN_LABEL_SIMILARITY = 0.4  # an unknown label below this similarity to every label is ignored
MAX_OPTIONS = 6  # labels tried per variable
MAX_ASSIGNMENTS = 20_000  # label assignments scored per query (the step's work bound; queries are capped at parse)
DEADLINE_EVERY = 256  # assignments between two looks at the question's deadline
MAX_ALTERNATIVES = 2  # second readings of hops kept (each costs a grounding)


@dataclass(frozen=True, slots=True)
class _Choice:
    score: float
    rel: str | None = None
    flipped: bool = False
    path: tuple[Hop, ...] = ()


def relation_scores(qg: QueryGraph, ctx: Context) -> list[dict[str, float] | None]:
    """Per triplet, how well its written relationship names each of the schema's (None: none written)."""
    return [ctx.mapper.edge_scores(t.rel_label.split("|")[0]) if t.rel_label else None for t in qg.triplets]


class Solve:
    """Labels, relationships and directions chosen jointly against the schema (module docstring)."""

    name = "solve"

    def apply(self, draft: Draft, reading: QuestionReading, ctx: Context) -> Draft:
        qg, sg = draft.query, ctx.graph
        if not qg.triplets:  # a query of nodes alone has no relationship to choose labels by
            return draft
        evidence, notes = label_evidence(qg, ctx)
        rel_scores = relation_scores(qg, ctx)
        # labels a variable could take because some relationship the query names touches them
        touching: dict[str, set[str]] = {v: set() for v in qg.symbols}
        for t, scores in zip(qg.triplets, rel_scores, strict=True):
            for r in sg.relations:
                if scores is None or scores.get(r.rel, 0.0) >= 0.5:
                    touching[t.head] |= {r.src, r.dst}
                    touching[t.tail] |= {r.src, r.dst}
        variables = list(qg.symbols)
        options = [_options(evidence[v], touching[v], sg.labels) for v in variables]
        while math.prod(len(o) for o in options) > MAX_ASSIGNMENTS:
            longest = max(range(len(options)), key=lambda i: len(options[i]))
            options[longest] = options[longest][:-1]
        # a triplet's best reading depends on its two labels only: computed once per pair, not per assignment
        memo: dict[tuple[int, str, str], tuple[_Choice, _Choice | None]] = {}

        def choice(i: int, head: str, tail: str) -> tuple[_Choice, _Choice | None]:
            key = (i, head, tail)
            if key not in memo:
                memo[key] = _triplet_choice(sg, rel_scores[i], head, tail, qg.triplets[i].directed, draft.via)
            return memo[key]

        ends = [(variables.index(t.head), variables.index(t.tail)) for t in qg.triplets]
        best: tuple[float, tuple[str, ...], list[tuple[_Choice, _Choice | None]]] | None = None
        cut: list[str] = []
        total = math.prod(len(o) for o in options)
        for n, combo in enumerate(itertools.product(*options)):
            if n % DEADLINE_EVERY == 0 and n and deadline_passed():  # keep the best reading found so far
                cut.append(f"the question's deadline passed after {n:,} of {total:,} label assignments: "
                           "the best reading found so far is kept")
                break
            choices = [choice(i, combo[h], combo[t]) for i, (h, t) in enumerate(ends)]
            score = sum(evidence[v].get(label, 0.0) for v, label in zip(variables, combo, strict=True))
            score += sum(c.score for c, _ in choices)
            if best is None or score > best[0] + 1e-9:
                best = (score, combo, choices)
        assert best is not None
        assign, choices = dict(zip(variables, best[1], strict=True)), best[2]
        first = [c for c, _ in choices]
        before = [*draft.repairs, *notes]
        seconds: list[Reading] = [
            _apply(qg, assign, [alt if j == i else c for j, c in enumerate(first)], before)
            for i, (_, alt) in enumerate(choices)
            if alt is not None
        ]
        query, repairs = _apply(qg, assign, first, before)
        return draft.but(query=query, repairs=tuple(repairs), readings=(*draft.readings, *seconds[:MAX_ALTERNATIVES]),
                         cut=(*draft.cut, *cut))


def label_evidence(qg: QueryGraph, ctx: Context) -> tuple[dict[str, dict[str, float]], list[Repair]]:
    """Per variable, a score for each label it may have; plus the notes on unknown labels."""
    skb, mapper, target_type = ctx.skb, ctx.mapper, ctx.step1
    labels = set(skb.node_type_names)
    evidence: dict[str, dict[str, float]] = {}
    notes: list[Repair] = []
    for var, sym in qg.symbols.items():
        ev: dict[str, float] = {}
        weight = W_TARGET_LABEL if var == qg.target else W_LABEL
        for written in (sym.label or "").split(":"):
            if not written:
                continue
            if written in labels:
                ev[written] = max(ev.get(written, 0.0), weight)
                continue
            scores = mapper.node_scores(written)
            best = max(scores, key=scores.__getitem__, default=None)
            if best is not None and scores[best] >= MIN_LABEL_SIMILARITY:
                ev[best] = max(ev.get(best, 0.0), weight * scores[best])
                if scores[best] < EXACT:
                    notes.append(Repair("label", f"{var}: unknown label {written!r} read as {best!r}"))
        name = sym.name_value()
        if name:
            named, how = labels_named(skb, name)
            weight = W_NAME_EXACT if how == "exact" else W_NAME_NEAR
            for label in named:
                ev[label] = ev.get(label, 0.0) + weight
            if named:  # under a label where nothing has its name, a constant grounds on look-alikes only
                for label in [lab for lab in ev if lab not in named]:
                    ev[label] -= W_UNNAMED
        if var == qg.target and target_type in labels:
            ev[target_type] = ev.get(target_type, 0.0) + W_STEP1
        evidence[var] = ev
    return evidence, notes


def _triplet_choice(sg: SchemaGraph, rel_scores: dict[str, float] | None, head: str, tail: str,
                    directed: bool, via: frozenset[str] = frozenset()) -> tuple[_Choice, _Choice | None]:
    """The best way for a triplet to connect ``head`` and ``tail`` labels in the graph, and a second reading.

    A relationship that connects the labels (in the written direction or reversed) comes first, scored
    by how well it fits the name written; only where none does, the best two-hop path whose names fit
    stands in (a two-hop question written as one hop). When a relationship was chosen whose name is not
    the one written, the best two-hop path is the second reading. A path through a label the question
    names and the query skips (``via``) fits better, and is the second reading even of a relationship
    written exactly right.
    """
    direct = [(flipped, r) for flipped, (a, b) in ((False, (head, tail)), (True, (tail, head))) for r in sg.between(a, b)]
    if rel_scores is None and direct:  # no type written: any relationship between the labels will do
        return _Choice(W_REL), None
    paths = [
        _Choice(W_REL * ((max(rel_scores.get(h.rel, 0.0) for h in path) if rel_scores is not None else 1.0)
                         - PATH_PENALTY) + (W_LABEL if _through(path, head, tail, via) else 0.0),
                path=tuple(path))
        for path in sg.paths(head, tail, hops=2)
    ]
    best_path = max(paths, key=lambda c: c.score) if paths else None
    if not direct:
        return (best_path or _Choice(UNGROUNDABLE)), None
    assert rel_scores is not None
    options = [
        _Choice(W_REL * (rel_scores.get(r.rel, 0.0) - (FLIP_PENALTY if flipped and directed else 0.0)), r.rel, flipped)
        for flipped, r in direct
    ]
    best = max(options, key=lambda c: c.score)
    if rel_scores.get(best.rel or "", 0.0) >= EXACT:  # the name written, up to form
        via_paths = [c for c in paths if c.path and _through(c.path, head, tail, via)]
        return best, max(via_paths, key=lambda c: c.score) if via_paths else None
    return best, (None if best_path is None or best_path.score <= 0 else best_path)


def _through(path: tuple[Hop, ...] | list[Hop], head: str, tail: str, via: frozenset[str]) -> bool:
    """The path's middle label is one of ``via`` and the triplet's own labels are not."""
    return len(path) > 1 and path[0].dst in via - {head, tail}


def _options(ev: dict[str, float], adjacent: set[str], labels: list[str]) -> list[str]:
    ranked = sorted(ev, key=lambda lab: -ev[lab])[:MAX_OPTIONS]
    if len(ranked) < MAX_OPTIONS:  # weakly labelled: labels the triplets could connect it to
        ranked += [lab for lab in labels if lab in adjacent and lab not in ranked][: MAX_OPTIONS - len(ranked)]
    return ranked or labels[:MAX_OPTIONS]


def _apply(qg: QueryGraph, assign: dict[str, str], choices: list[_Choice], before: list[Repair]) -> Reading:
    """``qg`` with the chosen labels and triplet readings, and ``before`` plus the repairs that made it."""
    repairs = list(before)
    symbols: dict[str, Symbol] = {}
    for var, sym in qg.symbols.items():
        label = assign[var]
        if sym.type != label:
            why = f"{label} is named {sym.name_value()!r}" if sym.is_constant else "fits the relationships"
            was = sym.label or "no label"
            repairs.append(Repair("relabel", f"{var}: {was} -> {label} ({why})"))
        symbols[var] = sym.model_copy(update={"type": label})
    triplets: list[Triplet] = []
    fresh = itertools.count(1)
    for t, c in zip(qg.triplets, choices, strict=True):
        written = t.rel_label or "any"
        if c.path:
            shown = link(symbols, triplets, t.head, t.tail, list(c.path), fresh, t)
            repairs.append(Repair("path", f"({t.head})-[:{written}]->({t.tail}) read as two hops: ({t.head})" + shown))
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
