"""Steps 3-5 as one strand: parse the query, repair it, find symbol candidates, ground them, and
relax the query while grounding is empty. Every system with a Cypher strand (AF-Retriever,
FocusedRetriever) runs this one implementation; their settings decide which parts are on.

The relaxation ladder (``AutofocusConfig.relax``) loosens the query one rung at a time, in the
configured order, until the grounded set is non-empty; the paper's expansion schedule runs inside
every rung:

* ``filters``: drop the attribute filters of one symbol, the farthest from the target first;
* ``triplets``: drop the triplet farthest from the target, while the target stays linked to a constant;
* ``constants``: let one constant be a node of any type (name-similar nodes of every label);
* ``edges``: let every triplet follow any relationship type.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from autofocus.config import AutofocusConfig, GroundingConfig, QueryConfig
from autofocus.cypher import parse_cypher
from autofocus.language import language
from autofocus.program.steps.grounding import GroundingResult, component_of, ground_with_expansion
from autofocus.program.steps.reading import Naming, QuestionReading
from autofocus.program.steps.repairs import Repair, Repaired, repair_query
from autofocus.program.steps.symbols import NAME_KEYS, retrieve_symbol_candidates
from autofocus.query_graph import QueryGraph, as_types
from autofocus.skb.names import named_ids
from autofocus.trace import Trace
from autofocus.usage import deadline_passed

if TYPE_CHECKING:
    from autofocus.kb import KnowledgeBaseLike as KB
    from autofocus.skb.model import SKB


@dataclass(frozen=True)
class StrandSettings:
    """What steps 3-5 read of a config, and nothing else: step 3b's rules and language (``query``),
    steps 4-5 (``grounding``), how many answers grounding aims for (``merge.k``) and self-consistency's
    vote share."""

    query: QueryConfig
    grounding: GroundingConfig
    k: int
    votes: float

    @classmethod
    def of(cls, cfg: AutofocusConfig) -> StrandSettings:
        return cls(cfg.query, cfg.grounding, cfg.merge.k, cfg.experimental.query_votes)


@dataclass
class Strand:
    """The grounded strand of one question: C_cypher and how it was obtained."""

    answers: np.ndarray  # C_cypher (sorted ids)
    query_graph: QueryGraph | None = None  # as grounded: repaired and relaxed
    grounding: GroundingResult | None = None
    repairs: list[Repair] = field(default_factory=list)
    relaxed: list[str] = field(default_factory=list)  # the rungs taken, in order

    @property
    def empty(self) -> bool:
        return len(self.answers) == 0

    def named_exactly(self, skb: SKB, reading: QuestionReading) -> bool:
        """Strong evidence: every constant of the query as grounded is a name the question gives and
        that identifies nodes, and nothing was relaxed (a second reading of a hop is no relaxation), so
        the answers are exactly what the question's own entities give through the graph. The asked class
        (``program.steps.repairs.asked_class``) is read from the question's own words ("bodies of water")."""
        qg = self.query_graph
        if qg is None or self.empty or any(not r.startswith("reading") for r in self.relaxed):
            return False
        names = [s.name_value() or "" for s in qg.constants if not s.extent]
        return bool(names) and all(reading.names(n, Naming.NEAR) and len(named_ids(skb, n)[0]) for n in names)


def parse_mode(grounding: GroundingConfig) -> str:
    """Parse strictly if either switch is strict, so that no guessed type becomes a hard filter
    (``autofocus.cypher.builder``); steps 4 and 5 then apply ``type_mode`` and ``edge_mode``."""
    return "strict" if "strict" in (grounding.type_mode, grounding.edge_mode) else "lenient"


def parse_step(kb: KB, cypher: str | None, target_type: str | None, grounding: GroundingConfig,
               trace: Trace) -> QueryGraph | None:
    """Step 3: the query graph of the LM's Cypher (None when there is no text)."""
    if not cypher:
        trace.flags["valid_cypher"] = False
        return None
    with trace.step("3_parse"):
        qg = parse_cypher(cypher, kb.skb.schema, mode=parse_mode(grounding), target_type=target_type)
    trace.data["query_graph"] = qg.model_dump()
    trace.data["cypher_target_type"] = qg.target_type
    trace.flags["valid_cypher"] = bool(qg.symbols)
    trace.flags["has_triplet"] = bool(qg.triplets)
    trace.flags["has_constant"] = qg.usable
    for d in qg.dropped:
        trace.event("3_parse", "dropped", f"{d.text}: {d.reason}")
    for what in qg.capped:  # the query was cut to the work caps: its answers are not the whole query's
        trace.degrade("3_parse", f"work cap: {what}")
    return qg


def reading_of(kb: KB, question: str, options: QueryConfig) -> QuestionReading:
    """The question's one reading against ``kb``'s schema, in the configured language."""
    return QuestionReading(question, kb.skb, language(options.language))


def repair_step(kb: KB, qg: QueryGraph, target_type: str | Sequence[str] | None, trace: Trace,
                options: QueryConfig | None = None, reading: QuestionReading | None = None) -> Repaired:
    """Step 3b: the query repaired by the configured rules (``program.steps.repairs``); ``target_type``:
    step 1's type, or its plausible types (most likely first); ``reading``: the question's, where the
    caller has it."""
    options = options or QueryConfig()
    reading = reading or reading_of(kb, trace.question, options)
    with trace.step("3_repair"):
        result = repair_query(qg, reading, target_type, options.repairs)
    repaired, repairs = result.query, result.repairs
    for r in repairs:
        trace.event("3_repair", r.kind, r.detail)
    trace.flags["repaired"] = bool(repairs)
    if repairs:
        trace.data["repaired_query_graph"] = repaired.model_dump()
    for why in result.cut:
        trace.degrade("3_repair", why)
    return result


def ground_strand(kb: KB, qg: QueryGraph | None, settings: StrandSettings, trace: Trace,
                  target_type: str | Sequence[str] | None = None, reading: QuestionReading | None = None) -> Strand:
    """Steps 3b-5 for a parsed query: repair (``query.repairs``), candidates, grounding, relaxation;
    ``target_type``: step 1's type, or its plausible types (most likely first; the first is step 2's);
    ``reading``: the question's, where the caller has it."""
    empty = Strand(np.zeros(0, np.int64))
    if qg is None:
        return empty
    repairs: list[Repair] = []
    alternatives: list[tuple[QueryGraph, list[Repair]]] = []
    if settings.query.repairs:
        repaired = repair_step(kb, qg, target_type, trace, settings.query, reading)
        qg, repairs, alternatives = repaired.query, repaired.repairs, repaired.alternatives
    if not qg.usable:
        trace.flags["grounded_nonempty"] = False
        empty.repairs = repairs
        return empty
    result = _ground_once(kb, qg, settings, trace, record=True)
    strand = Strand(result.answers, qg, result, repairs)
    late = False  # the deadline passed: no further grounding
    for alt, alt_repairs in alternatives if strand.empty else []:
        if late := _out_of_time(trace, strand):
            break
        reading = "reading: " + "; ".join(r.detail for r in alt_repairs if r.kind == "path")
        trace.event("5_relax", "reading", reading)
        result = _ground_once(kb, alt, settings, trace, record=False)
        if len(result.answers):  # a reading that grounds nothing is no step away from the query: not counted
            strand = Strand(result.answers, alt, result, alt_repairs, [reading])
            qg = alt
            break
    grounding = settings.grounding
    if strand.empty and grounding.relax and not late:
        for rung, relaxed, widened in relaxations(qg, grounding.relax):
            if len(strand.relaxed) >= grounding.relax_max_rungs or _out_of_time(trace, strand):
                break
            strand.relaxed.append(rung)
            trace.event("5_relax", rung.split(":")[0], rung)
            result = _ground_once(kb, relaxed, settings, trace, record=False, widened=widened)
            if len(result.answers):
                strand = Strand(result.answers, relaxed, result, repairs, strand.relaxed)
                trace.data["relaxed_query_graph"] = relaxed.model_dump()
                break
    trace.data["relaxed"] = strand.relaxed
    trace.data["grounding_rounds"] = strand.grounding.rounds if strand.grounding else []
    # the whole set, so that evaluation scores grounding over all of it; traces.jsonl keeps its size and first ids
    trace.data["grounded_ids"] = strand.answers
    trace.data["num_grounded"] = len(strand.answers)
    trace.flags["grounded_nonempty"] = not strand.empty
    return strand


def _out_of_time(trace: Trace, strand: Strand) -> bool:
    """Whether the question's deadline has passed, recorded as a degradation: the strand stops with
    what it has (no further reading or relaxation), and steps 6-7 still rank."""
    if not deadline_passed():
        return False
    trace.degrade("5_relax", f"the question's deadline passed: no further readings or relaxations after "
                             f"{len(strand.relaxed)} tried")
    return True


def ground_by_votes(kb: KB, queries: list[str], settings: StrandSettings, trace: Trace,
                    target_type: str | Sequence[str] | None = None, reading: QuestionReading | None = None) -> Strand:
    """Self-consistency (``query_samples`` > 1): ground every sampled query and keep the nodes that at
    least ``query_votes`` of the grounding samples agree on, so one bad sample neither empties the
    strand nor fills it with its own mistakes. The first (greedy) sample's trace is kept in full."""
    strands: list[Strand] = []
    primary = next(iter(as_types(target_type)), None)
    for i, cypher in enumerate(queries):
        sub = trace if i == 0 else Trace(system=trace.system, question=trace.question)
        qg = parse_step(kb, cypher, primary, settings.grounding, sub)
        strand = ground_strand(kb, qg, settings, sub, target_type, reading)
        strands.append(strand)
        if i:
            for name, rec in sub.steps.items():
                trace.steps.setdefault(name, type(rec)()).seconds += rec.seconds
    voters = [s for s in strands if not s.empty]
    if not voters:
        return strands[0]
    ids, votes = np.unique(np.concatenate([s.answers for s in voters]), return_counts=True)
    keep = ids[votes >= max(1.0, settings.votes * len(voters))]
    best = max(voters, key=lambda s: int(np.isin(s.answers, keep).sum()))  # its query graph explains the answers
    trace.data["votes"] = {"samples": len(queries), "grounding": len(voters), "kept": len(keep),
                           "sizes": [len(s.answers) for s in strands]}  # fmt: skip
    trace.data["grounded_ids"] = keep
    trace.data["num_grounded"] = len(keep)
    trace.flags["grounded_nonempty"] = len(keep) > 0
    return Strand(keep, best.query_graph, best.grounding, best.repairs, best.relaxed)


def _ground_once(kb: KB, qg: QueryGraph, settings: StrandSettings, trace: Trace, record: bool,
                 widened: frozenset[str] = frozenset()) -> GroundingResult:
    """Steps 4 and 5 for one version of the query."""
    g = settings.grounding
    with trace.step("4_symbols"):
        sc = retrieve_symbol_candidates(
            kb, qg, g.l_max, variant=g.doc_variant_step4, strict=g.type_mode == "strict",
            exact_name_first=g.exact_name_first, exact_name_only=g.exact_name_only, widened=widened,
        )
    if record:
        for kind, detail in sc.events:
            trace.event("4_symbols", kind, detail)
        trace.data["symbol_candidates"] = {
            v: {"search": sc.search_strings.get(v), "ids": ids[:20].tolist()} for v, ids in sc.constants.items()
        }
        trace.data["filters"] = sc.applied_filters
    with trace.step("5_grounding"):
        if g.edge_mode == "lenient":
            qg = qg.model_copy(update={"triplets": [t.model_copy(update={"rel": None}) for t in qg.triplets]})
        result = ground_with_expansion(
            kb.skb, qg, sc.constants, sc.variables, sc.type_masks, settings.k, g.l_max, g.expansion
        )
    if result.cut:
        trace.degrade("5_grounding", result.cut)
    return result


def _distances(qg: QueryGraph) -> dict[str, int]:
    """Hops from the target to every symbol of its component."""
    dist = {qg.target: 0} if qg.target else {}
    frontier = list(dist)
    while frontier:
        nxt = []
        for v in frontier:
            for t in qg.triplets:
                for a, b in ((t.head, t.tail), (t.tail, t.head)):
                    if a == v and b not in dist:
                        dist[b] = dist[v] + 1
                        nxt.append(b)
        frontier = nxt
    return dist


def relaxations(qg: QueryGraph, order: list[str]) -> Iterator[tuple[str, QueryGraph, frozenset[str]]]:
    """Ever looser versions of ``qg``, one rung at a time (see the module docstring), with the constants
    widened so far (searched among name-similar nodes of any type)."""
    cur = qg
    widened: frozenset[str] = frozenset()
    for rung in order:
        if rung == "filters":
            dist = _distances(cur)
            for var in sorted(dist, key=lambda v: -dist[v]):
                sym = cur.symbols[var]
                kept = [c for c in sym.constraints if c.key.lower() in NAME_KEYS]
                if len(kept) < len(sym.constraints):
                    cur = _with_symbol(cur, var, constraints=kept)
                    yield f"filters: {var} without {', '.join(c.key for c in sym.constraints if c not in kept)}", cur, widened
        elif rung == "triplets":
            while len(cur.triplets) > 1:
                dist = _distances(cur)
                ranked = sorted(range(len(cur.triplets)),
                                key=lambda i: -min(dist.get(cur.triplets[i].head, 99), dist.get(cur.triplets[i].tail, 99)))
                for i in ranked:
                    trial = cur.model_copy(update={"triplets": [t for j, t in enumerate(cur.triplets) if j != i]})
                    linked = component_of(trial, trial.target) if trial.target else set()
                    if trial.target and any(trial.symbols[v].is_constant for v in linked
                                            if v != trial.target) and trial.usable:
                        t = cur.triplets[i]
                        # symbols the dropped triplet cut off constrain nothing; kept, they would print as
                        # a disconnected MATCH (a cartesian product in a database)
                        cur = trial.model_copy(update={"symbols": {v: sym for v, sym in trial.symbols.items()
                                                                   if v in linked}})
                        yield f"triplets: dropped ({t.head})-[:{t.rel or 'any'}]-({t.tail})", cur, widened
                        break
                else:
                    break
        elif rung == "constants":
            dist = _distances(cur)
            for var in sorted((v for v in dist if cur.symbols[v].is_constant), key=lambda v: -dist[v]):
                cur = _with_symbol(cur, var, type=None)
                widened = widened | {var}
                yield f"constants: {var} ({cur.symbols[var].name_value()!r}) among similar names of any type", cur, widened
        elif rung == "edges":
            if any(t.rel is not None for t in cur.triplets):
                cur = cur.model_copy(update={"triplets": [t.model_copy(update={"rel": None, "rel_alternatives": []})
                                                          for t in cur.triplets]})
                yield "edges: any relationship type", cur, widened
        else:
            raise ValueError(f"unknown relaxation rung {rung!r} (filters, triplets, constants, edges)")


def _with_symbol(qg: QueryGraph, var: str, **update: object) -> QueryGraph:
    symbols = dict(qg.symbols)
    symbols[var] = symbols[var].model_copy(update=update)
    return qg.model_copy(update={"symbols": symbols})
