"""AF-Retriever (paper Algorithm 1) as a DSPy module: LLM steps 1, 2 and 8 are named sub-modules,
steps 3-7 are the deterministic functions of this package.

    step 1  target type          self.target_type   (skipped when the SKB has one candidate type)
    step 2  text-to-Cypher       self.cypher        (or self.query_graph for the typed query format)
    step 3  parse                autofocus.cypher.parse_cypher
    step 4  symbol candidates    program.symbols.retrieve_symbol_candidates
    step 5  grounding            program.grounding.ground_with_expansion
    step 6  VSS on grounded      program.vss.step6_rank_grounded
    step 7  VSS on the rest      program.vss.step7_rank_rest + merge
    step 8  rerank               self.reranker      (pointwise / listwise / pairwise / tournament)
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import dspy
import numpy as np

from autofocus.config import AutofocusConfig
from autofocus.cypher import parse_cypher
from autofocus.program.steps.grounding import GroundingResult, ground_with_expansion, support_paths
from autofocus.program.steps.llm_call import safe_predict
from autofocus.program.steps.rerank import make_reranker
from autofocus.program.steps.schema_context import SchemaContext
from autofocus.program.steps.symbols import retrieve_symbol_candidates
from autofocus.program.steps.typed_query import spec_to_cypher
from autofocus.program.steps.vss import grounded_slots, merge, step6_rank_grounded, step7_rank_rest
from autofocus.program.systems.base import RetrievalProgram
from autofocus.query_graph import QueryGraph
from autofocus.signatures import TextToCypher, TextToQueryGraph, target_type_signature
from autofocus.trace import Trace

if TYPE_CHECKING:
    from autofocus.kb import KnowledgeBaseLike


def closest_type(raw: str, types: list[str]) -> str | None:
    """Salvage a node type from free text: exact, normalised, contained, then closest."""
    norm = {re.sub(r"[^a-z0-9]", "", t.lower()): t for t in types}
    text = re.sub(r"\[\[\s*##.*?##\s*\]\]", " ", raw)  # DSPy's field markers are not the answer
    text = text.strip().strip("\"'`.").lower()
    key = re.sub(r"[^a-z0-9]", "", text)
    if key in norm:
        return norm[key]
    hits = [t for n, t in norm.items() if n and n in key]
    if len(hits) == 1:
        return hits[0]
    close = difflib.get_close_matches(key, list(norm), n=1, cutoff=0.75)
    return norm[close[0]] if close else None


def derive_target_type(
    predictor: dspy.Module | None, context: SchemaContext, question: str, trace: Trace
) -> str | None:
    """Step 1, shared by every system that predicts a target type; salvages malformed output."""
    types = context.candidate_types
    if predictor is None:
        return types[0]
    with trace.step("1_target_type"):
        pred, raw = safe_predict(
            predictor,
            trace,
            "1_target_type",
            kb_description=context.kb_description,
            candidate_types=types,
            question=question,
        )
    if pred is not None:
        return str(pred.target_type)
    salvaged = closest_type(raw, types) if raw else None
    trace.event("1_target_type", "salvaged" if salvaged else "invalid", raw or "")
    return salvaged


def parse_mode(config: AutofocusConfig) -> str:
    """Parse strictly if either switch is strict, so that no guessed type becomes a hard filter
    (``autofocus.cypher.builder``); steps 4 and 5 then apply ``type_mode`` and ``edge_mode``."""
    return "strict" if "strict" in (config.type_mode, config.edge_mode) else "lenient"


@dataclass
class Retrieval:
    """Steps 3-7 of one question: the pre-rerank list and what step 8 and the trace need."""

    ids: list[int]  # pre-rerank order, at most k
    strand: dict[int, str]  # id -> "grounded" | "vss" | "both"
    grounded: np.ndarray  # the whole grounded set C_cypher (the trace keeps its size and first ids)
    query_graph: QueryGraph | None = None  # as grounded (edge types dropped in lenient edge mode)
    grounding: GroundingResult | None = None  # None when step 5 did not run

    def neighbourhood(self, limit: int = 1000) -> set[int]:
        """Nodes the grounding matched for the non-target symbols (step 8's retrieved context)."""
        if self.grounding is None or self.query_graph is None:
            return set()
        target = self.query_graph.target
        sets = [ids for var, ids in self.grounding.final_sets.items() if var != target and len(ids) <= limit]
        return {int(i) for ids in sets for i in ids}


class AutofocusRetriever(RetrievalProgram):
    """Answer a question over an SKB with the eight steps of AF-Retriever; returns ranked node ids and a trace.

    ``llm_steps`` (steps 1-2) depends on the question and the LMs only; ``retrieve`` (steps 3-7)
    takes their outputs and any config, calls no LM and keeps no state, so a tuner runs the
    first once per question and the second once per trial, from any thread.
    """

    def __init__(self, kb: KnowledgeBaseLike, config: AutofocusConfig | None = None, system: str = "afr") -> None:
        super().__init__()
        self.kb = kb
        self.config = config or AutofocusConfig()
        self.system = system
        schema = kb.skb.schema
        self.context = SchemaContext.from_schema(schema)
        types = self.context.candidate_types
        self.target_type = dspy.Predict(target_type_signature(types)) if len(types) > 1 else None
        self.cypher = dspy.Predict(TextToCypher)
        self.query_graph = dspy.Predict(TextToQueryGraph)
        self.reranker = make_reranker(self.config, self.config.lm.for_step("rerank"))

    # --- steps 1 and 2: the LLM calls -------------------------------------------------------------
    def predict_target_type(self, question: str, trace: Trace) -> str | None:
        return derive_target_type(self.target_type, self.context, question, trace)

    def derive_query(self, question: str, target_type: str | None, trace: Trace) -> str | None:
        """Step 2: the Cypher text (a typed query is rendered as Cypher); None or "" when it failed."""
        inputs = self.context.query_inputs(question, target_type)
        with trace.step("2_query"):
            if self.config.query_format == "typed":
                pred, _ = safe_predict(self.query_graph, trace, "2_query", **inputs)
                cypher = spec_to_cypher(pred.query) if pred is not None else None
            else:
                pred, raw = safe_predict(self.cypher, trace, "2_query", **inputs)
                cypher = str(pred.cypher) if pred is not None else raw
        trace.data["cypher"] = cypher
        return cypher

    def llm_steps(self, question: str, trace: Trace) -> tuple[str | None, str | None]:
        """Steps 1-2: ``(target type, Cypher text)``; no query for the ``1+7`` ablation."""
        y_type = self.predict_target_type(question, trace)
        trace.data["target_type"] = y_type
        cypher = self.derive_query(question, y_type, trace) if self.config.steps != "1+7" else None
        return y_type, cypher

    # --- step 3 -----------------------------------------------------------------------------------
    def parse(
        self, cypher: str | None, target_type: str | None, cfg: AutofocusConfig, trace: Trace
    ) -> QueryGraph | None:
        if not cypher:
            trace.flags["valid_cypher"] = False
            return None
        schema = self.kb.skb.schema
        with trace.step("3_parse"):
            qg = parse_cypher(cypher, schema, mode=parse_mode(cfg), target_type=target_type)
        trace.data["query_graph"] = qg.model_dump()
        trace.flags["valid_cypher"] = bool(qg.symbols)
        trace.flags["has_triplet"] = bool(qg.triplets)
        trace.flags["has_constant"] = qg.usable
        for d in qg.dropped:
            trace.event("3_parse", "dropped", f"{d.text}: {d.reason}")
        return qg

    # --- steps 4 and 5 ----------------------------------------------------------------------------
    def ground(
        self, qg: QueryGraph, cfg: AutofocusConfig, trace: Trace
    ) -> tuple[QueryGraph, GroundingResult] | None:
        """Symbol candidates and grounding; None when the graph has nothing to ground."""
        skb = self.kb.skb
        if not qg.usable:
            trace.flags["grounded_nonempty"] = False
            return None
        with trace.step("4_symbols"):
            sc = retrieve_symbol_candidates(
                self.kb,
                qg,
                cfg.l_max,
                variant=cfg.doc_variant_step4,
                strict=cfg.type_mode == "strict",
                exact_name_first=cfg.exact_name_first,
            )
        for kind, detail in sc.events:
            trace.event("4_symbols", kind, detail)
        trace.data["symbol_candidates"] = {
            v: {"search": sc.search_strings.get(v), "ids": ids[:20].tolist()}
            for v, ids in sc.constants.items()
        }
        trace.data["filters"] = sc.applied_filters
        with trace.step("5_grounding"):
            if cfg.edge_mode == "lenient":
                qg = qg.model_copy(
                    update={"triplets": [t.model_copy(update={"rel": None}) for t in qg.triplets]}
                )
            result = ground_with_expansion(
                skb, qg, sc.constants, sc.variables, sc.type_masks, cfg.k, cfg.l_max, cfg.expansion
            )
        trace.data["grounding_rounds"] = result.rounds
        # the whole set, so that evaluation scores grounding over all of it; traces.jsonl keeps its
        # size and first ids (``evaluate.traces.to_jsonable``)
        trace.data["grounded_ids"] = result.answers
        trace.data["num_grounded"] = len(result.answers)
        trace.flags["grounded_nonempty"] = len(result.answers) > 0
        return qg, result

    # --- steps 3-7 --------------------------------------------------------------------------------
    def retrieve(
        self,
        question: str,
        target_type: str | None,
        cypher: str | None,
        config: AutofocusConfig | None = None,
        trace: Trace | None = None,
    ) -> Retrieval:
        """Steps 3-7 for given step 1-2 outputs under ``config`` (default: the program's); no LM calls."""
        cfg = config or self.config
        trace = trace if trace is not None else Trace(system=self.system, question=question)
        skb = self.kb.skb
        qvec = self.kb.embed_query(question)

        grounded = np.zeros(0, np.int64)
        round_of: dict[int, int] = {}
        used: tuple[QueryGraph, GroundingResult] | None = None
        if cfg.steps != "1+7":
            qg = self.parse(cypher, target_type, cfg, trace)
            if qg is not None:
                trace.data["cypher_target_type"] = qg.target_type
                used = self.ground(qg, cfg, trace)
                if used is not None:
                    grounded, round_of = used[1].answers, used[1].round_of

        step6: list[int] = []
        scores: dict[int, float] = {}
        if cfg.steps != "1+7":
            n6 = cfg.k if cfg.steps == "1-5" else grounded_slots(cfg.alpha, cfg.k)
            with trace.step("6_vss_grounded"):
                if cfg.steps == "1-5":
                    order = sorted(grounded.tolist(), key=lambda i: (round_of.get(i, 0), i))
                    step6 = order[:n6]
                else:
                    step6, s6 = step6_rank_grounded(
                        self.kb,
                        qvec,
                        grounded,
                        n6,
                        cfg.doc_variant_step6,
                        round_of if cfg.step6_order == "round" else None,
                    )
                    scores.update(zip(step6, s6, strict=True))
        step7: list[int] = []
        if cfg.steps in ("1+7", "1-7", "1-8"):
            types = [target_type] if target_type in skb.node_type_names else self.context.candidate_types
            exclude = grounded if cfg.step7_exclude == "grounded" else np.zeros(0, np.int64)
            n7 = cfg.k - len(step6) if cfg.step7_exclude == "grounded" else cfg.k
            with trace.step("7_vss_rest"):
                step7, s7 = step7_rank_rest(self.kb, qvec, types, exclude, n7, cfg.doc_variant_step7)
            for i, s in zip(step7, s7, strict=True):
                scores.setdefault(i, s)
        merged = merge(step6, step7, cfg.k, scores)
        trace.data["strand"] = {str(i): s for i, s in merged.strand.items()}
        trace.data["pre_rerank"] = merged.ids
        qg_used, grounding = used if used is not None else (None, None)
        return Retrieval(merged.ids, merged.strand, grounded, qg_used, grounding)

    # --- the whole program ------------------------------------------------------------------------
    def forward(self, question: str) -> dspy.Prediction:
        cfg = self.config
        trace = Trace(system=self.system, question=question)
        skb = self.kb.skb
        y_type, cypher = self.llm_steps(question, trace)
        found = self.retrieve(question, y_type, cypher, cfg, trace)
        ranked = found.ids
        if cfg.steps == "1-8" and self.reranker is not None and ranked:
            with trace.step("8_rerank"):
                ranked = self.reranker(
                    question=question,
                    candidates=ranked,
                    skb=skb,
                    target_type=y_type,
                    retrieved=found.neighbourhood(),
                    trace=trace,
                )
        if found.grounding is not None and found.query_graph is not None:
            trace.data["support"] = {
                str(i): support_paths(skb, found.query_graph, found.grounding.final_sets, i)
                for i in ranked[: cfg.k]
                if found.strand.get(i) in ("grounded", "both")
            }
        return dspy.Prediction(ranked_ids=[int(i) for i in ranked], trace=trace)
