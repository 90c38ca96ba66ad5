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
import functools
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import dspy
import numpy as np

from autofocus.config import AutofocusConfig, MergeConfig, QueryConfig
from autofocus.language import language
from autofocus.lm import is_local_spec
from autofocus.local_lm.decoding import warm_tokenizer
from autofocus.local_lm.scoring import choice_probabilities
from autofocus.local_lm.slots import keep_start, share_prompt_starts
from autofocus.program.steps.constrain import (
    QUERY_END,
    QUERY_STOP,
    cypher_grammar,
    grammar_config,
    query_opening,
    query_spec_grammar,
)
from autofocus.program.steps.grounded_strand import (
    Strand,
    StrandSettings,
    ground_by_votes,
    ground_strand,
    parse_step,
)
from autofocus.program.steps.grounding import GroundingResult, support_paths
from autofocus.program.steps.llm_call import ANSWER_START, answer_header, call_adapter, prefills, safe_predict
from autofocus.program.steps.nearest_demos import NearestDemos, as_examples, step_demos
from autofocus.program.steps.reading import QuestionReading, Readings
from autofocus.program.steps.rerank import rerank_candidates
from autofocus.program.steps.rerankers import make_reranker
from autofocus.program.steps.schema_context import SchemaContext
from autofocus.program.steps.target_type import TypeInput, combine, kept, spelled
from autofocus.program.steps.typed_query import spec_to_cypher
from autofocus.program.steps.vss import (
    SCAN_SLACK,
    ScanAhead,
    evidence_factor,
    grounded_first,
    grounded_slots,
    merge,
    named_in_question,
    named_last,
    step6_rank_grounded,
    step7_rank_rest,
)
from autofocus.program.systems.base import RetrievalProgram
from autofocus.program.trained import load_trained
from autofocus.query_graph import QueryGraph, as_types
from autofocus.signatures import TextToCypher, TextToQueryGraph, target_type_signature, typed_query_signature
from autofocus.skb.documents import path_text
from autofocus.skb.schema_graph import schema_graph
from autofocus.trace import Trace

if TYPE_CHECKING:
    from autofocus.kb import KnowledgeBaseLike


_STARTS_LOCK = threading.Lock()  # the first questions in flight wait while one of them shares the starts


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


def step1_inputs(predictor: dspy.Predict, context: SchemaContext, question: str) -> dict[str, object]:
    """Step 1's inputs that ``predictor``'s signature takes (a saved program's may take fewer)."""
    return {k: v for k, v in context.target_type_inputs(question).items() if k in predictor.signature.input_fields}


def derive_target_type(
    predictor: dspy.Module | None, context: SchemaContext, question: str, trace: Trace,
    demos: list[dspy.Example] | None = None,
) -> str | None:
    """Step 1, shared by every system that predicts a target type; salvages malformed output. ``demos``
    replace the predictor's own for this call."""
    types = context.candidate_types
    if predictor is None:
        return types[0]
    predictor, inputs, demos = as_examples(predictor, demos, step1_inputs(predictor, context, question))
    with trace.step("1_target_type"):
        pred, raw = safe_predict(predictor, trace, "1_target_type", demos=demos, **inputs)
    if pred is not None:
        return str(pred.target_type)
    salvaged = closest_type(raw, types) if raw else None
    trace.event("1_target_type", "salvaged" if salvaged else "invalid", raw or "")
    return salvaged


def score_target_types(
    predictor: dspy.Predict, context: SchemaContext, question: str, trace: Trace, threshold: float, most: int,
    inputs: Callable[[], list[TypeInput]] | None = None, demos: list[dspy.Example] | None = None,
) -> list[str] | None:
    """Step 1 from the LM's probabilities: every candidate type scored as the whole answer to step 1's
    prompt, combined with the other ``inputs()`` (``program.steps.target_type``); the types within
    ``threshold`` of the best (most likely first, at most ``most``). None where the LM exposes no
    probabilities, so the caller lets it write its answer instead. ``demos`` replace the predictor's own
    for this call."""
    lm = predictor.lm or dspy.settings.lm
    types = context.candidate_types
    asked, step_inputs, demos = as_examples(predictor, demos, step1_inputs(predictor, context, question))
    with trace.step("1_target_type"):
        messages = call_adapter(lm).format(asked.signature, predictor.demos if demos is None else demos, step_inputs)
        start = "" if prefills(lm) else answer_header(asked.signature)  # else the messages end with it
        try:
            probs = choice_probabilities(lm, messages, types, assistant_prefix=start, suffix="\n\n")
        except Exception as exc:  # the generated answer takes over
            trace.event("1_target_type", "scoring_error", f"{type(exc).__name__}: {exc}"[:300])
            return None
        if probs is None:
            return None
        lm_probs = dict(zip(types, probs, strict=True))
        others = inputs() if inputs is not None else []
    combined = combine(types, [TypeInput("lm", lm_probs), *others]) if others else lm_probs
    if others:
        trace.data["target_type_lm_probs"] = {t: round(p, 4) for t, p in lm_probs.items()}
        trace.data["target_type_inputs"] = [i.name for i in others]
    ranked = sorted(combined.items(), key=lambda tp: -tp[1])
    trace.data["target_type_probs"] = {t: round(p, 4) for t, p in ranked}
    record_call(predictor, step_inputs, dspy.Prediction(target_type=ranked[0][0]))
    return kept(combined, threshold, most)


def record_call(predictor: dspy.Predict, inputs: dict[str, Any], pred: dspy.Prediction) -> None:
    """Put an answer found without calling ``predictor`` (scored by probabilities) into DSPy's trace as
    a call would: bootstrapping makes its demos from that trace, and would otherwise find none."""
    calls = dspy.settings.trace
    if calls is not None and dspy.settings.max_trace_size > 0:
        if len(calls) >= dspy.settings.max_trace_size:
            calls.pop(0)
        calls.append((predictor, dict(inputs), pred))


def vss_type_prior(kb: KnowledgeBaseLike, question: str, types: list[str], k: int, variant: str) -> dict[str, float]:
    """How the question's ``k`` nearest candidate nodes split over the types (add-one smoothed): a small LM
    reads "which methods can throw KeyError?" as asking for an exception, the embeddings do not."""
    skb = kb.skb
    mask = np.isin(skb.node_type, [skb.type_code(t) for t in types])
    ids, _ = kb.index(variant).search(kb.embed_query(question), candidates=mask, k=k)
    counts = np.bincount(skb.node_type[np.asarray(ids, dtype=np.int64)], minlength=len(skb.node_type_names))
    return {t: (int(counts[skb.type_code(t)]) + 1) / (len(ids) + len(types)) for t in types}


@dataclass
class Retrieval:
    """Steps 3-7 of one question: the pre-rerank list and what step 8 and the trace need."""

    ids: list[int]  # pre-rerank order, at most k
    strand: dict[int, str]  # id -> "grounded" | "vss" | "both"
    grounded: np.ndarray  # the whole grounded set C_cypher (the trace keeps its size and first ids)
    query_graph: QueryGraph | None = None  # as grounded: repaired and relaxed
    grounding: GroundingResult | None = None  # None when step 5 did not run
    strong_evidence: bool = False  # the merge kept the grounded block for names the question gives
    named: set[int] = field(default_factory=set)  # candidates the question names (``named_last``): they stay last

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
        graph = self.config.query.prompt_schema == "graph"
        query = self.config.query
        self.context = (SchemaContext.from_skb(kb.skb, query.step1_type_parts) if graph
                        else SchemaContext.from_schema(kb.skb.schema))  # fmt: skip
        types = self.context.candidate_types
        described = graph and query.step1_type_parts != "names"
        self.target_type = (dspy.Predict(target_type_signature(types, described, query.step1_kb_description))
                            if len(types) > 1 else None)  # fmt: skip
        self.cypher = dspy.Predict(TextToCypher)
        sg = schema_graph(kb.skb)
        self.query_graph = dspy.Predict(
            typed_query_signature(sg.labels, sg.rel_names) if self.step2_mode() == "json_schema" and sg.rel_names
            else TextToQueryGraph
        )
        self.trained = load_trained(self.config.trained, kb)
        self.reranker = make_reranker(self.config, self.config.runtime.lm.for_step("rerank"), self.trained)
        self._grammars: dict[tuple[object, ...], str] = {}  # step 2 grammars by header and step 1's types
        # question -> (step 1's type(s), step 2's query, step 1's type probabilities)
        self.recorded: dict[str, tuple[str | list[str] | None, str | None, dict[str, float] | None]] | None = None
        self.nearest_demos: NearestDemos | None = None  # per-question demos of steps 1-2 (a program file's)
        self.starts_shared = False  # the prompt starts shared by all questions are in the LM server's slots
        self._type_starts: set[str | None] = set()  # types whose step-2 start is saved (``keep_type_start``)
        self.readings = Readings()  # the questions' readings, made once per question

    def reading(self, question: str, query: QueryConfig | None = None) -> QuestionReading:
        """The question's one reading (``program.steps.reading``) in ``query.language`` (default: the program's),
        shared by step 1's cue and steps 3-7."""
        return self.readings.get(question, self.kb.skb, language((query or self.config.query).language))

    def needs_lm(self, question: object) -> bool:
        replayed = isinstance(question, str) and question in (self.recorded or {}) and self.recorded[question][0] is not None
        step8_lm = self.config.steps.reranks and getattr(self.reranker, "uses_lm", False)
        return not (replayed and not step8_lm)

    # --- steps 1 and 2: the LLM calls -------------------------------------------------------------
    def predict_target_type(self, question: str, trace: Trace,
                            demos: list[dspy.Example] | None = None) -> str | list[str] | None:
        """Step 1: the types kept by their probabilities where the LM has them, else the one it writes, with
        the other inputs (``type_inputs``); ``demos`` replace the step's own for this call."""
        cfg = self.config
        inputs = functools.partial(self.type_inputs, question)
        if self.target_type is not None and cfg.query.target_type_scoring == "auto":
            found = score_target_types(self.target_type, self.context, question, trace,
                                       cfg.query.target_type_threshold, cfg.query.target_type_max, inputs, demos)
            if found:
                return found if len(found) > 1 else found[0]
        written = derive_target_type(self.target_type, self.context, question, trace, demos)
        types = self.context.candidate_types
        named = (spelled(types, self.reading(question, cfg.query).asked_label)
                 if self.target_type is not None and written and "spelled" in cfg.query.target_type_inputs else None)
        if named is None:
            return written
        found = kept(combine(types, [TypeInput("lm", {written: 1.0}), named]), cfg.query.target_type_threshold,
                     cfg.query.target_type_max)
        trace.data["target_type_inputs"] = [named.name]
        return found if len(found) > 1 else found[0]

    def question_demos(self, question: str, trace: Trace) -> dict[str, list[dspy.Example]]:
        """Steps 1 and 2's demos for this question (``nearest_demos``), by step; empty without a pool."""
        near = self.nearest_demos
        if near is None:
            return {}
        chosen = near.nearest(question, self.kb.embed_query(question))
        trace.data["nearest_demos"] = [near.pool[i].question for i in chosen]
        steps = {"target_type": self.target_type, "cypher": self.cypher}
        return {s: step_demos(steps[s], near.pool, chosen) for s in near.steps if steps.get(s) is not None}

    def type_inputs(self, question: str) -> list[TypeInput]:
        """Step 1's inputs beside the LM's answer (``program.steps.target_type``), as ``target_type_inputs``
        lists them: how the question's nearest nodes split over the types (``prior``), the label the
        question asks for by name (``spelled``)."""
        cfg, types = self.config, self.context.candidate_types
        inputs: list[TypeInput] = []
        reader = self.trained.type_reader if self.trained is not None else None
        for name in cfg.query.target_type_inputs:
            if name == "prior":
                inputs.append(TypeInput("prior", vss_type_prior(self.kb, question, types, cfg.query.target_type_prior_k,
                                                                cfg.merge.doc_variant_step7)))
            elif name == "spelled" and (named := spelled(types, self.reading(question, cfg.query).asked_label)) is not None:
                inputs.append(named)
            elif name == "reader" and reader is not None and cfg.query.type_reader_weight:
                read = reader.probabilities(self.kb.embed_query(question))
                inputs.append(TypeInput("reader", {t: read.get(t, 0.0) ** cfg.query.type_reader_weight for t in types}))
        return inputs

    def derive_query(self, question: str, target_type: str | list[str] | None, trace: Trace,
                     sample: int = 0, demos: list[dspy.Example] | None = None) -> str | None:
        """Step 2: the Cypher text (a typed query is rendered as Cypher); None or "" when it failed.
        ``sample`` > 0 asks for another query at ``query_temperature`` (self-consistency); ``demos``
        replace the Cypher step's own for this call."""
        types = as_types(target_type)  # step 2 asks for the most likely type, as in the paper; step 7 searches all kept
        inputs = self.context.query_inputs(question, types[0] if types else None)
        config = self._step2_constraint(types)
        if sample:
            config = {**config, "temperature": self.config.experimental.query_temperature, "rollout_id": sample}
        with trace.step("2_query"):
            if self.config.query.query_format == "typed":
                adapter = dspy.JSONAdapter() if self.step2_mode() == "json_schema" else dspy.settings.adapter
                with dspy.context(adapter=adapter):
                    pred, _ = safe_predict(self.query_graph, trace, "2_query", config=config, **inputs)
                cypher = spec_to_cypher(pred.query) if pred is not None else None
            else:
                self.keep_type_start(types[0] if types else None)
                predictor, inputs, demos = as_examples(self.cypher, demos, inputs, before="target_type")
                pred, raw = safe_predict(predictor, trace, "2_query", demos=demos, config=config, **inputs)
                cypher = str(pred.cypher) if pred is not None else raw
                if ANSWER_START in config and cypher and QUERY_STOP not in cypher:
                    cypher += QUERY_END  # where the grammar's answer stopped: its end is fixed
        if self.step2_mode() != "off":
            trace.data["constrained"] = self.step2_mode()
        return cypher

    def share_prompt_starts(self) -> None:
        """Before the first LM call: the start that every question's step-1 prompt shares, and every
        step-2 prompt's, evaluated once into the local LM server's slots (``local_lm.slots``), not once
        per slot by the first questions in flight. Nothing for other LMs."""
        with _STARTS_LOCK:
            if self.starts_shared:
                return
            types = self.context.candidate_types
            families: dict[int, tuple[Any, list[tuple[Any, Any]]]] = {}
            steps: list[tuple[dspy.Predict, Callable[[str, str], dict[str, object]]]] = []
            if (step1 := self.target_type) is not None:
                steps.append((step1, lambda q, t: step1_inputs(step1, self.context, q)))
            if self.config.query.query_format == "cypher":
                steps.append((self.cypher, self.context.query_inputs))
                if self.step2_mode() == "grammar":
                    warm_tokenizer(self.cypher.lm or dspy.settings.lm)
            for predictor, inputs in steps:  # each step's messages as its call makes them
                lm = predictor.lm or dspy.settings.lm
                adapter = call_adapter(lm)
                pair = tuple(adapter.format(predictor.signature, predictor.demos, inputs(q, t))
                             for q, t in (("Which one?", types[0]), ("What else is there?", types[-1])))
                families.setdefault(id(lm), (lm, []))[1].append(pair)
            for lm, pairs in families.values():
                share_prompt_starts(lm, pairs)
            self.starts_shared = True

    def keep_type_start(self, target_type: str | None) -> None:
        """Step 2's prompt start for ``target_type`` (the schema part shown for it, up to the question)
        saved in the local LM server's prompt cache on the first question asking for that type and
        restored for the others (``local_lm.slots.keep_start``). Nothing for other LMs."""
        if target_type in self._type_starts:
            return
        lm = self.cypher.lm or dspy.settings.lm
        adapter = call_adapter(lm)
        family = tuple(adapter.format(self.cypher.signature, self.cypher.demos, self.context.query_inputs(q, target_type))
                       for q in ("Which one?", "What else is there?"))
        keep_start(lm, family, f"evaluating step 2's prompt start for {target_type} (saved for later questions)")
        self._type_starts.add(target_type)

    def step2_mode(self) -> str:
        """How step 2 is constrained: a GBNF grammar (llama.cpp servers), JSON-schema structured outputs
        with enums (the typed format on LMs that support them), or not at all (repair alone)."""
        mode = self.config.query.constrain
        if mode != "auto":
            return mode
        if is_local_spec(self.config.runtime.lm.for_step("cypher")):
            return "grammar"
        return "json_schema" if self.config.query.query_format == "typed" else "off"

    def _step2_constraint(self, types: list[str] | None = None) -> dict[str, object]:
        """Per-call LM config that constrains step 2 to the schema (``program.steps.constrain``); a Cypher
        query starts at step 1's type(s)."""
        if self.step2_mode() != "grammar":
            return {}
        sg = schema_graph(self.kb.skb)
        typed = self.config.query.query_format == "typed"
        predictor = self.query_graph if typed else self.cypher
        header = not prefills(predictor.lm or dspy.settings.lm)  # else the call gives the answer's header
        targets = tuple(t for t in types or [] if t in sg.labels)
        opened = not header and not typed and bool(targets)  # and the query's opening: it stops at its end
        key = (header, "typed") if typed else (header, *targets)
        if key not in self._grammars:
            self._grammars[key] = (
                query_spec_grammar(sg, self.context.attribute_names, header=header) if typed
                else cypher_grammar(sg, self.context.attribute_names, targets=list(targets) or None, header=header,
                                    opened=opened)
            )
        config = grammar_config(self._grammars[key])
        if opened:  # the text the grammar fixes at both ends is the prompt's or appended, not generated
            config.update({ANSWER_START: query_opening(list(targets)), "stop": [QUERY_STOP]})
        return config

    def llm_steps(self, question: str, trace: Trace) -> tuple[str | list[str] | None, str | None]:
        """Steps 1-2: ``(target type, Cypher text)``; no query for the ``1+7`` ablation. With
        ``recorded`` outputs of another run (``autofocus eval --replay``, ``ask --query``), those instead of
        the LM's."""
        if self.recorded is not None and question in self.recorded:
            y_type, cypher, probs = self.recorded[question]
            if y_type is None:  # a query given without step 1's answer (``ask --query``): step 1 runs
                y_type = self.predict_target_type(question, trace, self.question_demos(question, trace).get("target_type"))
            elif probs:
                trace.data["target_type_probs"] = probs
            trace.event("2_query", "replayed", "step 2's query given (a recorded run or ask --query)")
            trace.data["target_type"], trace.data["cypher"] = y_type, cypher
            return y_type, cypher if self.config.steps.grounds else None
        if not self.starts_shared:
            self.share_prompt_starts()
        demos = self.question_demos(question, trace)
        y_type = self.predict_target_type(question, trace, demos.get("target_type"))
        trace.data["target_type"] = y_type
        if not self.config.steps.grounds:
            return y_type, None
        queries = [self.derive_query(question, y_type, trace, sample=i, demos=demos.get("cypher"))
                   for i in range(self.config.experimental.query_samples)]
        cypher = queries[0] if len(queries) == 1 else [q or "" for q in queries]
        trace.data["cypher"] = cypher
        return y_type, cypher

    # --- steps 3-7 --------------------------------------------------------------------------------
    def retrieve(
        self,
        question: str,
        target_type: str | list[str] | None,
        cypher: str | list[str] | None,
        config: AutofocusConfig | None = None,
        trace: Trace | None = None,
    ) -> Retrieval:
        """Steps 3-7 for given step 1-2 outputs under ``config`` (default: the program's); no LM calls.

        ``target_type`` is step 1's type, or the types it kept (most likely first).
        """
        cfg = config or self.config
        trace = trace if trace is not None else Trace(system=self.system, question=question)
        types1 = as_types(target_type)
        if not (cfg.runtime.scan_ahead and cfg.steps.searches_rest):
            return self._retrieve(question, types1, cypher, cfg, trace, None)
        with ScanAhead(self.kb, question, cfg.merge.doc_variant_step7, depth=cfg.merge.k + SCAN_SLACK,
                       types=self._step7_base_types(types1), shards=cfg.runtime.scan_shards) as ahead:
            try:
                return self._retrieve(question, types1, cypher, cfg, trace, ahead)
            finally:
                trace.data["scan_ahead"] = ahead.summary()

    def _retrieve(self, question: str, types1: list[str], cypher: str | list[str] | None, cfg: AutofocusConfig,
                  trace: Trace, ahead: ScanAhead | None) -> Retrieval:
        """Steps 3-7; with ``ahead`` the question's vector and step 7's scans come from it (started
        before step 3), else the question is embedded first and step 7 scans after grounding."""
        steps, m = cfg.steps, cfg.merge
        qvec = self.kb.embed_query(question) if ahead is None else None
        reading = self.reading(question, cfg.query)
        strand = self._grounded_strand(types1, cypher, cfg, trace, ahead, reading) if steps.grounds else (
            Strand(np.zeros(0, np.int64)))
        grounded = strand.answers
        round_of = strand.grounding.round_of if strand.grounding is not None else {}

        step6: list[int] = []
        scores: dict[int, float] = {}
        factor = 1.0  # the grounded strand's weight against the evidence (``merge.alpha_rule``)
        if steps.grounds:
            factor, why = evidence_factor(strand, types1, m)
            alpha = m.alpha * factor
            if why is not None:
                trace.data["alpha"] = {"value": alpha, "why": why}
            n6 = grounded_slots(alpha, m.k) if steps.ranks_grounded else m.k
            with trace.step("6_vss_grounded"):
                if not steps.ranks_grounded:
                    step6 = sorted(grounded.tolist(), key=lambda i: (round_of.get(i, 0), i))[:n6]
                else:
                    if qvec is None and ahead is not None:
                        qvec = ahead.question_vector()
                    step6, s6 = step6_rank_grounded(self.kb, qvec, grounded, n6, m.doc_variant_step6,
                                                    round_of if m.step6_order == "round" else None)
                    scores.update(zip(step6, s6, strict=True))
        step7: list[int] = []
        if steps.searches_rest:
            types = self.step7_types(types1, strand, m, trace)
            exclude = grounded if m.step7_exclude == "grounded" else np.zeros(0, np.int64)
            n7 = m.k - len(step6) if m.step7_exclude == "grounded" else m.k
            with trace.step("7_vss_rest"):
                heads = None
                if ahead is not None:
                    qvec = ahead.question_vector() if qvec is None else qvec
                    heads = ahead.heads(types) if n7 > 0 else None
                step7, s7 = step7_rank_rest(self.kb, qvec, types, exclude, n7, m.doc_variant_step7, heads=heads)
            for i, s in zip(step7, s7, strict=True):
                scores.setdefault(i, s)
        bonus = rrf_weight = None
        strong = m.merge_rule == "evidence" and strand.named_exactly(self.kb.skb, reading)
        if m.merge_rule != "block" and step6 and step7 and not strong:
            if m.doc_variant_step6 != m.doc_variant_step7:  # both strands on step 7's scale
                s67 = self.kb.index(m.doc_variant_step7).scores(qvec, np.asarray(step6))
                scores.update(zip(step6, np.asarray(s67).tolist(), strict=True))
            bonus = m.grounded_bonus * factor
            rrf_weight = factor if m.merge_order == "rrf" else None
        if m.merge_rule != "block" and step6:
            trace.data["merge"] = {"order": "block" if bonus is None else m.merge_order, "strong_evidence": strong,
                                   "grounded_bonus": None if bonus is None else round(bonus, 4)}
        merged = merge(step6, step7, m.k, scores, bonus, rrf_weight)
        ids, named = merged.ids, set()
        if m.named_last:
            named = named_in_question(self.kb.skb, ids, reading)
            ids = named_last(ids, named)
            if named:
                trace.data["named_last"] = sorted(named)
        trace.data["strand"] = {str(i): s for i, s in merged.strand.items()}
        trace.data["pre_rerank"] = ids
        return Retrieval(ids, merged.strand, grounded, strand.query_graph, strand.grounding, strong and bool(step6),
                         named)  # fmt: skip

    def _grounded_strand(self, types1: list[str], cypher: str | list[str] | None, cfg: AutofocusConfig,
                         trace: Trace, ahead: ScanAhead | None, reading: QuestionReading) -> Strand:
        """Steps 3-5: the query (or the sampled queries, by their votes) parsed, repaired and grounded."""
        settings = StrandSettings.of(cfg)
        plausible = plausible_types(types1, trace, cfg.query.class_type_floor)
        if isinstance(cypher, list):
            return ground_by_votes(self.kb, cypher, settings, trace, plausible, reading)
        qg = parse_step(self.kb, cypher, types1[0] if types1 else None, cfg.grounding, trace)
        if ahead is not None and qg is not None and cfg.merge.step7_types == "agree":
            ahead.scan([t for t in [qg.target_type] if t in self.context.candidate_types])  # in case it grounds
        return ground_strand(self.kb, qg, settings, trace, plausible, reading)

    def _step7_base_types(self, types1: list[str]) -> list[str]:
        """Step 7's types as far as step 1 decides them (``step7_types`` may add the query's label)."""
        known = self.kb.skb.node_type_names
        return [t for t in types1 if t in known] or list(self.context.candidate_types)

    def step7_types(self, types1: list[str], strand: Strand, merge: MergeConfig, trace: Trace) -> list[str]:
        """The types step 7 searches: step 1's, and the query's own target label when grounding found
        answers of it (the graph agrees with step 2), so one wrong guess does not exclude the other."""
        types = self._step7_base_types(types1)  # step 1 gave nothing usable: every candidate type
        label = strand.query_graph.target_type if strand.query_graph is not None else None
        if merge.step7_types == "agree" and label in self.context.candidate_types and label not in types and not strand.empty:
            types.append(label)
            trace.event("7_vss_rest", "types_disagree", f"step 1: {', '.join(types1) or 'none'}; query: {label}")
        trace.data["step7_types"] = types
        return types

    # --- step 8 ------------------------------------------------------------------------------------
    def evidence(self, found: Retrieval, cfg: AutofocusConfig, trace: Trace) -> dict[int, str]:
        """Per grounded candidate of the top k, the graph paths that satisfied the query, as text: a
        multi-hop answer's own relations may not reach the facts the question asks (recorded as support)."""
        skb = self.kb.skb
        if found.grounding is None or found.query_graph is None:
            return {}
        support = {
            i: support_paths(skb, found.query_graph, found.grounding.final_sets, i)
            for i in found.ids[: cfg.merge.k]
            if found.strand.get(i) in ("grounded", "both")
        }
        trace.data["support"] = {str(i): paths for i, paths in support.items()}
        return {i: "; ".join(dict.fromkeys(path_text(skb, p) for p in paths)) for i, paths in support.items()}

    def rerank(
        self, question: str, y_type: str | list[str] | None, found: Retrieval, evidence: dict[int, str],
        cfg: AutofocusConfig, trace: Trace,
    ) -> list[int]:
        """Step 8 on what steps 3-7 found; the program and ``autofocus tune``'s reranking trials both call
        this, so a tuned step-8 setting is tuned on the prompts the program sends."""
        if self.reranker is None or not found.ids:
            return found.ids
        ranked = rerank_candidates(self.reranker, question, found.ids, self.kb.skb, y_type, found.neighbourhood(), trace,
                                   evidence=evidence if cfg.rerank.rerank_evidence else None, config=cfg)  # fmt: skip
        if cfg.rerank.rerank_keep_block and found.strong_evidence:
            ranked = grounded_first(ranked, found.strand)
            trace.data.setdefault("rerank", {})["block_kept"] = sum(s != "vss" for s in found.strand.values())
        return named_last(ranked, found.named)

    # --- the whole program ------------------------------------------------------------------------
    def forward(self, question: str) -> dspy.Prediction:
        cfg = self.config
        trace = Trace(system=self.system, question=question)
        y_type, cypher = self.llm_steps(question, trace)
        found = self.retrieve(question, y_type, cypher, cfg, trace)
        evidence = self.evidence(found, cfg, trace)
        ranked = self.rerank(question, y_type, found, evidence, cfg, trace) if cfg.steps.reranks else found.ids
        return dspy.Prediction(ranked_ids=[int(i) for i in ranked], trace=trace)


def plausible_types(types1: list[str], trace: Trace, floor: float) -> list[str]:
    """Step 1's kept types, then the others it scored at least ``floor`` (``query.class_type_floor``) likely:
    the labels step 3b's asked class may settle the target on (a small LM's second reading of "rivers" is
    natural_object)."""
    probs = trace.data.get("target_type_probs") or {}
    return [*types1, *(t for t, p in probs.items() if p >= floor and t not in types1)]

