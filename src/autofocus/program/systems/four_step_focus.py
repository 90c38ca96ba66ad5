"""4StepFocus (paper 003, Algorithms 1-3) on autofocus's components.

    step 1  triplet generation     self.triplets  (LLM: triplets over node/relation types + target variable)
    step 2  substitution           constants -> nodes by string similarity of names/aliases (rapidfuzz),
                                   then set intersections to a fixpoint (program.grounding.ground_triplets)
    step 3  VSS                    grounded candidates C_filtered first, C_additional fills up to k
    step 4  LLM reranker           self.reranker (pointwise by default); C_filtered stays ahead of C_additional

Where the paper and the authors' code differ, the paper is the default: a constant without an
(almost) exact name match drops its triplets (Algorithm 3) instead of taking the VSS top-1
(``unmatched_constant="vss"``), variables are restricted to their node type (Algorithm 3, line 5).
Edge types are ignored by default (``edge_mode="lenient"``: "restricting it turned out to be
error-prone", section 4); ``edge_mode="strict"`` follows the generated relation and its direction.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

import dspy
import numpy as np
from rapidfuzz import fuzz, process, utils

from autofocus.config import AutofocusConfig
from autofocus.cypher import mapper_for
from autofocus.program.steps.entities import named_node, relation_label
from autofocus.program.steps.grounding import ground_triplets, support_paths
from autofocus.program.steps.llm_call import safe_predict
from autofocus.program.steps.rerank import rerank_candidates
from autofocus.program.steps.rerankers import make_reranker
from autofocus.program.steps.schema_context import SchemaContext
from autofocus.program.steps.vss import merge, step6_rank_grounded, step7_rank_rest
from autofocus.program.systems.base import SeedSystem
from autofocus.query_graph import Dropped, QueryGraph, Symbol, Triplet
from autofocus.signatures.seed_systems import RawTriplet, TripletGeneration
from autofocus.skb.model import SKB
from autofocus.trace import Trace

if TYPE_CHECKING:
    from autofocus.kb import KnowledgeBaseLike

ALIAS_KEYS = frozenset({"alias", "aliases", "synonym", "synonyms", "othernames"})


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


class NameMatcher:
    """String similarity of a name against all node names and aliases of a type, vectorised with
    ``rapidfuzz.process.cdist`` over a cached, pre-processed choice list (built once per SKB).

    Aliases come from string/JSON columns named like ``aliases`` or ``synonyms`` when the SKB has them.
    """

    def __init__(self, skb: SKB) -> None:
        self.skb = skb
        choices = [utils.default_process(n) for n in skb.names]
        owners = [np.arange(skb.num_nodes, dtype=np.int64)]
        for key, col in skb.columns.items():
            if _norm(key) not in ALIAS_KEYS or col.kind not in ("string", "json"):
                continue
            rows = np.flatnonzero(col.present)
            for i in rows.tolist():
                value = col.values[i]
                aliases = json.loads(value) if col.kind == "json" else value
                aliases = aliases if isinstance(aliases, list) else [aliases]
                strings = [utils.default_process(str(a)) for a in aliases if a]
                choices += strings
                owners.append(np.full(len(strings), i, dtype=np.int64))
        self.choices = choices
        self.owner = np.concatenate(owners)
        self._by_type: dict[str | None, tuple[list[str], np.ndarray]] = {None: (self.choices, self.owner)}

    @classmethod
    def of(cls, skb: SKB) -> NameMatcher:
        matcher = skb.__dict__.get("_name_matcher")
        if matcher is None:
            matcher = skb.__dict__["_name_matcher"] = cls(skb)
        return matcher

    def _choices(self, node_type: str | None) -> tuple[list[str], np.ndarray]:
        if node_type is not None and node_type not in self._by_type:  # None (every type) is there from the start
            keep = np.flatnonzero(self.skb.node_type[self.owner] == self.skb.type_code(node_type))
            self._by_type[node_type] = ([self.choices[i] for i in keep.tolist()], self.owner[keep])
        return self._by_type[node_type]

    def match(self, names: list[str], node_type: str | None, cutoff: float) -> list[tuple[np.ndarray, float]]:
        """Per name: the nodes with the best similarity (ties kept) if it reaches ``cutoff`` (0-1), and that score."""
        choices, owner = self._choices(node_type)
        queries = [utils.default_process(n) for n in names]
        out: list[tuple[np.ndarray, float]] = [(np.zeros(0, np.int64), 0.0)] * len(names)
        live = [i for i, q in enumerate(queries) if q]
        if not live or not choices:
            return out
        sims = process.cdist([queries[i] for i in live], choices, scorer=fuzz.ratio, processor=None,
                             score_cutoff=cutoff * 100, dtype=np.float32, workers=-1)
        for row, i in zip(sims, live, strict=True):
            best = float(row.max())
            if best > 0 or cutoff == 0:
                out[i] = (np.unique(owner[row == best]), best / 100)
        return out


def triplets_to_query_graph(
    triplets: list[RawTriplet], target: str, skb: SKB, edge_mode: str = "lenient",
) -> QueryGraph:
    """Algorithm 3's validity rules on the LLM's triplets, as a query graph.

    Constants get a ``name`` constraint and one symbol per (type, name); triplets between two
    constants or from a symbol to itself are dropped. Types and relations are mapped by the Cypher
    parser's ``SchemaMapper``. With ``edge_mode="lenient"`` relations are ignored (any edge type,
    either direction); ``strict`` follows the mapped edge type (turned round when it only fits the
    other way) or, when none maps, any edge type.
    """
    qg = QueryGraph()
    mapper = mapper_for(skb.schema)
    constants: dict[tuple[str, str], str] = {}

    def symbol(term: object) -> str:
        name = (getattr(term, "name", None) or "").strip()
        raw_type = getattr(term, "type", "") or ""
        node_type = mapper.node_type(raw_type).name if raw_type else None
        if name:
            key = (node_type or "", name.lower())
            if key not in constants:
                constants[key] = f"c{len(constants)}"
                qg.symbols[constants[key]] = named_node(constants[key], name, raw_type, mapper)
            return constants[key]
        var = (getattr(term, "variable", None) or "").strip() or f"?anon{len(qg.symbols)}"
        if var not in qg.symbols:
            qg.symbols[var] = Symbol(var=var, type=node_type, label=raw_type)
        elif qg.symbols[var].type is None and node_type is not None:
            qg.symbols[var] = qg.symbols[var].model_copy(update={"type": node_type})
        return var

    for t in triplets:
        head, tail = symbol(t.head), symbol(t.tail)
        text = f"{t.head} -[{t.relation}]-> {t.tail}"
        if head == tail:
            qg.dropped.append(Dropped(text=text, reason="a symbol related to itself"))
        elif qg.symbols[head].is_constant and qg.symbols[tail].is_constant:
            qg.dropped.append(Dropped(text=text, reason="two constants (Algorithm 3, line 9)"))
        elif edge_mode == "lenient":
            qg.triplets.append(Triplet(head=head, tail=tail, rel_label=t.relation, directed=False))
        else:
            edge = mapper.edge_type(relation_label(t.relation), qg.symbols[head].type, qg.symbols[tail].type)
            if edge.name is None:
                qg.dropped.append(Dropped(text=t.relation, reason="unknown relation: any edge type"))
            if edge.flipped:
                head, tail = tail, head
            qg.triplets.append(Triplet(head=head, rel=edge.name, rel_label=t.relation, tail=tail,
                                       directed=edge.name is not None))
    target = target.strip()
    variables = [v for v, s in qg.symbols.items() if not s.is_constant]
    if target in variables:
        qg.target = target
    elif len(variables) == 1:
        qg.target = variables[0]
        qg.dropped.append(Dropped(text=target, reason=f"target is not a variable; using {variables[0]}"))
    else:
        qg.dropped.append(Dropped(text=target, reason="target is not a variable of the triplets"))
    if qg.target is not None:
        qg.target_type = qg.symbols[qg.target].type
    return qg


class FourStepFocus(SeedSystem):
    """Answer a question with the four steps of 4StepFocus; returns ranked node ids and a trace."""

    def __init__(self, kb: KnowledgeBaseLike, config: AutofocusConfig | None = None, system: str = "4stepfocus") -> None:
        super().__init__(kb, config, system)
        self.context = SchemaContext.from_schema(kb.skb.schema)
        self.triplets = dspy.Predict(TripletGeneration)
        self.reranker = make_reranker(self.config, self.config.runtime.lm.for_step("rerank"))

    # --- step 1 -----------------------------------------------------------------------------------
    def generate(self, question: str, trace: Trace) -> QueryGraph | None:
        skb: SKB = self.kb.skb
        with trace.step("1_triplets"):
            pred, _ = safe_predict(
                self.triplets, trace, "1_triplets", kb_description=self.context.kb_description,
                node_types=self.context.node_labels, relation_types=self.context.relationship_labels,
                question=question,
            )
        if pred is None:
            trace.flags["has_triplet"] = False
            return None
        trace.data["triplets"] = [t.model_dump() for t in pred.triplets]
        qg = triplets_to_query_graph(list(pred.triplets), str(pred.target), skb, self.config.grounding.edge_mode)
        trace.data["query_graph"] = qg.model_dump()
        trace.data["target_type"] = qg.target_type
        for d in qg.dropped:
            trace.event("1_triplets", "dropped", f"{d.text}: {d.reason}")
        trace.flags["has_triplet"] = bool(qg.triplets)
        return qg

    # --- step 2 -----------------------------------------------------------------------------------
    def substitute(self, qg: QueryGraph, trace: Trace) -> tuple[np.ndarray, dict[str, np.ndarray], QueryGraph]:
        """Algorithms 2-3: match constants by name similarity, drop the triplets of unmatched ones,
        intersect neighbour sets to a fixpoint; returns C_filtered, the final set of each symbol and
        the query graph of the triplets used."""
        cfg = self.config
        skb: SKB = self.kb.skb
        strict = cfg.grounding.type_mode == "strict"
        matcher = NameMatcher.of(skb)
        sets: dict[str, np.ndarray | None] = {}
        report: dict[str, dict] = {}
        by_type: dict[str | None, list[Symbol]] = {}
        for sym in qg.constants:
            by_type.setdefault(sym.type if strict else None, []).append(sym)
        for node_type, syms in by_type.items():
            names = [s.name_value() or "" for s in syms]
            for sym, name, (ids, score) in zip(syms, names, matcher.match(names, node_type, cfg.systems.name_similarity),
                                               strict=True):
                if len(ids) == 0 and cfg.systems.unmatched_constant == "vss":
                    ids = self._vss_top1(name, node_type)
                    score = float("nan")
                report[sym.var] = {"name": name, "ids": ids[:20].tolist(), "similarity": score}
                if len(ids):
                    sets[sym.var] = ids
                else:
                    trace.event("2_substitution", "constant_unmatched", f"{sym.var}: {name}")
        trace.data["substitutions"] = report
        used = qg.model_copy(update={"triplets": [
            t for t in qg.triplets if all(not qg.symbols[v].is_constant or v in sets for v in (t.head, t.tail))
        ]})
        trace.flags["has_constant"] = bool(sets) and qg.target is not None
        if qg.target is None or not sets or not used.triplets:
            trace.flags["grounded_nonempty"] = False
            return np.zeros(0, np.int64), {}, used
        type_masks = {v: skb.node_type == skb.type_code(s.type) if strict and s.type is not None else None
                      for v, s in qg.symbols.items() if not s.is_constant}
        for v in qg.symbols:
            sets.setdefault(v, None)
        final = ground_triplets(skb, used.triplets, sets, type_masks)
        target = final.get(qg.target)
        filtered = skb.only_candidates(target) if target is not None else np.zeros(0, np.int64)
        trace.data["grounded_ids"] = filtered[:1000].tolist()
        trace.data["num_grounded"] = len(filtered)
        trace.flags["grounded_nonempty"] = len(filtered) > 0
        return filtered, {v: s for v, s in final.items() if s is not None}, used

    def _vss_top1(self, name: str, node_type: str | None) -> np.ndarray:
        """The code's fallback for an unmatched constant, over all nodes of its type (not only candidates)."""
        qvec = self.kb.embed_query(name)
        ids, _ = self.kb.index(self.config.grounding.doc_variant_step4).search(qvec, node_type=node_type, k=1)
        return np.asarray(ids, dtype=np.int64)

    # --- the whole program ------------------------------------------------------------------------
    def forward(self, question: str) -> dspy.Prediction:
        cfg = self.config
        trace = Trace(system=self.system, question=question)
        skb: SKB = self.kb.skb
        filtered, final = np.zeros(0, np.int64), {}
        qg = self.generate(question, trace)
        if qg is not None:
            with trace.step("2_substitution"):
                filtered, final, qg = self.substitute(qg, trace)
        with trace.step("3_vss"):
            qvec = self.kb.embed_query(question)
            variant = cfg.merge.doc_variant_step7
            first, s1 = step6_rank_grounded(self.kb, qvec, filtered, cfg.merge.k, variant)
            rest, s2 = step7_rank_rest(self.kb, qvec, skb.schema.answer_types, filtered, cfg.merge.k - len(first), variant)
        merged = merge(first, rest, cfg.merge.k, dict(zip(first + rest, s1 + s2, strict=True)))
        trace.data["strand"] = {str(i): s for i, s in merged.strand.items()}
        trace.data["pre_rerank"] = merged.ids
        retrieved = {int(i) for v, ids in final.items() if qg is not None and v != qg.target and len(ids) <= 1000
                     for i in ids}
        # no target type: C_additional spans all candidate types, so each candidate is shown with its own
        ranked = rerank_candidates(self.reranker, question, merged.ids, skb, None, retrieved, trace)
        grounded = set(first)
        ranked = [i for i in ranked if i in grounded] + [i for i in ranked if i not in grounded]
        if qg is not None and final:
            trace.data["support"] = {str(i): support_paths(skb, qg, final, i) for i in ranked if i in grounded}
        return dspy.Prediction(ranked_ids=ranked, trace=trace)
