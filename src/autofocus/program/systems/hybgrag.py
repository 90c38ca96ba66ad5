"""HybGRAG (paper 004, Algorithm 1): a retriever bank with an LLM router, and a critic (LLM validator +
LLM commenter) that refines the routing for up to T rounds, on autofocus's components.

    router      self.router     topic entities, useful relations, and the module: knowledge graph or text
    text RM     VSS of the question over the candidate types (the same ranking as the ``vss`` baseline)
    hybrid RM   entities linked by step 4 (exact name first, else VSS top 1); ego-graph of radius
                ``ego_radius`` over the useful relations per entity; their intersection, restricted to
                the candidate types, ranked by VSS
    validator   self.validator  is the top document aligned with the question? Context: its document and
                the reasoning paths "entity -> relation -> ... -> document"
    commenter   self.commenter  one of Table 4's error types; the router gets Table 4's feedback text

The commenter's in-context examples are collected on the training split as the paper says (section
3.2): with a ground-truth critic, keep the router actions whose feedback led to an accepted next
attempt (``critic_examples``, 30 by default), plus accepted router actions (router demos) and
validator judgements (two per candidate type). Without a training split it runs zero-shot. An LM
outage during the collection stops it: that question runs zero-shot and is marked degraded, nothing
is cached, and the next question collects again.
Deviation: the commenter also sees an ``observation`` (linked entities, ego-graph and intersection
sizes, top document), which is what tells "no intersection" from "incorrect intersection"; and
HybGRAG's disambiguation of same-name entities by the gold answer (appendix C.1.1) is not used.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import dspy
import numpy as np

from autofocus.config import AutofocusConfig
from autofocus.cypher import mapper_for
from autofocus.program.steps.entities import named_node, relation_label
from autofocus.program.steps.llm_call import safe_predict
from autofocus.program.steps.schema_context import SchemaContext
from autofocus.program.steps.symbols import retrieve_symbol_candidates
from autofocus.program.steps.vss import step7_rank_rest
from autofocus.program.systems.base import SeedSystem
from autofocus.query_graph import QueryGraph
from autofocus.signatures.seed_systems import FEEDBACK, HybComment, HybRoute, HybValidate, TopicEntity
from autofocus.skb.documents import render_document
from autofocus.skb.model import SKB
from autofocus.trace import Trace
from autofocus.usage import map_concurrently, question_deadline

if TYPE_CHECKING:
    from autofocus.kb import KnowledgeBaseLike
    from autofocus.skb.qa import QAItem

KG, TEXT = "knowledge graph", "text documents"
MAX_PATHS = 5
VALIDATION_DOC_TOKENS = 384  # the critic's top document when the config leaves the (embedding) budget unset
ROUTER_DEMOS = 10
Demos = tuple[list[dspy.Example], list[dspy.Example], list[dspy.Example]]  # router, validator, commenter
# examples collected per KB and (config, LM): the evaluation runner builds one program per thread
_COLLECTED: weakref.WeakKeyDictionary[object, dict[tuple[str, str], Demos]] = weakref.WeakKeyDictionary()
_COLLECT_LOCK = threading.Lock()


@dataclass
class Action:
    """The router's decision s_t with the relational aspect (E_t, R_t) it identified."""

    entities: list[TopicEntity]
    relations: list[str]
    source: str

    def describe(self) -> str:
        ents = ", ".join(f"{e.name} ({e.type})" for e in self.entities) or "none"
        return f"topic entities: {ents}; useful relations: {', '.join(self.relations) or 'none'}; source: {self.source}"


@dataclass
class RetrieverBankResult:
    """What a retrieval module returned, and what the critic needs to judge it."""

    ids: list[int]
    module: str  # "hybrid" | "text"
    linked: dict[str, int | None] = field(default_factory=dict)  # "name (type)" -> node id
    relations: dict[str, str | None] = field(default_factory=dict)  # as written -> SKB edge type
    ego: dict[str, np.ndarray] = field(default_factory=dict)  # "name (type)" -> candidate ids in its ego-graph
    pool: np.ndarray | None = None  # the intersection (None for the text module)
    note: str = ""

    def observation(self, skb: SKB) -> str:
        lines = [f"module used: {'hybrid (knowledge graph + documents)' if self.module == 'hybrid' else 'text'}"]
        if self.note:
            lines.append(self.note)
        for label, node in self.linked.items():
            where = f"'{skb.name(node)}' ({skb.type_of(node)})" if node is not None else "no node"
            size = f", ego-graph with {len(self.ego[label])} candidates" if label in self.ego else ""
            lines.append(f"entity {label}: linked to {where}{size}")
        for raw, rel in self.relations.items():
            lines.append(f"relation {raw}: {rel or 'not a relation type of the knowledge base'}")
        if self.pool is not None:
            lines.append(f"intersection: {len(self.pool)} candidates")
        lines.append(f"top document: '{skb.name(self.ids[0])}'" if self.ids else "nothing retrieved")
        return "\n".join(lines)


def ego_graph(skb: SKB, source: int, edge_types: list[str], radius: int) -> np.ndarray:
    """Mask of the nodes within ``radius`` hops of ``source`` over ``edge_types`` (either direction)."""
    seen = np.zeros(skb.num_nodes, dtype=bool)
    seen[source] = True
    frontier = np.array([source], dtype=np.int64)
    for _ in range(radius):
        reached = skb.graph.neighbour_mask(frontier, edge_types, "both") & ~seen
        seen |= reached
        frontier = np.flatnonzero(reached)
        if len(frontier) == 0:
            break
    seen[source] = False
    return seen


def _hops(skb: SKB, node: int, edge_types: list[str]) -> list[tuple[str, np.ndarray]]:
    rows = np.array([node], dtype=np.int64)
    out = []
    for e in edge_types:
        for direction in ("out", "in"):
            nbrs = skb.graph.adjacency(e, direction).gather(rows)[1]
            if len(nbrs):
                out.append((e, np.unique(nbrs)))
    return out


def reasoning_paths(skb: SKB, source: int, node: int, edge_types: list[str], radius: int,
                    limit: int = MAX_PATHS) -> list[str]:
    """Verbalised paths "entity -> relation -> ... -> node" of at most two hops (the validator's context)."""
    name = skb.name
    paths: list[str] = []
    from_source = _hops(skb, source, edge_types)
    for e, nbrs in from_source:
        if np.isin(node, nbrs):
            paths.append(f"{name(source)} -> {e} -> {name(node)}")
    if radius >= 2:
        for e1, n1 in from_source:
            for e2, n2 in _hops(skb, node, edge_types):
                for mid in np.setdiff1d(np.intersect1d(n1, n2), [source, node])[:limit].tolist():
                    paths.append(f"{name(source)} -> {e1} -> {name(mid)} -> {e2} -> {name(node)}")
    return paths[:limit]


def oracle_feedback(action: Action, retrieval: RetrieverBankResult, gold: set[int]) -> tuple[str, str]:
    """The ground-truth critic of Table 4 (used to collect in-context examples on training questions)."""
    if retrieval.module == "text":
        return ("no entity", "") if action.source == KG else ("incorrect retrieval module", "")
    for raw, rel in retrieval.relations.items():
        if rel is None:
            return "incorrect entity/relation", raw
    for label, node in retrieval.linked.items():
        if node is None or not gold & set(retrieval.ego.get(label, np.zeros(0, np.int64)).tolist()):
            return "incorrect entity/relation", label.rsplit(" (", 1)[0]
    if len(retrieval.linked) == 1:
        return "missing entity", ""
    pool = retrieval.pool if retrieval.pool is not None else np.zeros(0, np.int64)
    if len(pool) == 0:
        return "no intersection", ""
    if not gold & set(pool.tolist()):
        return "incorrect intersection", ""
    return "missing entity", ""


class ExamplesUnavailable(RuntimeError):
    """The LM failed (no answer) while collecting in-context examples."""


def feedback_text(error_type: str, item: str) -> str:
    return FEEDBACK.get(error_type, FEEDBACK["incorrect retrieval module"]).format(item=item or "?")


class HybGRAG(SeedSystem):
    """Answer a question with HybGRAG's router, retriever bank and critic loop."""

    def __init__(self, kb: KnowledgeBaseLike, config: AutofocusConfig | None = None, system: str = "hybgrag") -> None:
        super().__init__(kb, config, system)
        self.context = SchemaContext.from_schema(kb.skb.schema)
        self.router = dspy.Predict(HybRoute)
        self.validator = dspy.Predict(HybValidate)
        self.commenter = dspy.Predict(HybComment)
        self._examples_ready = self.config.systems.critic_examples == 0

    # --- router -----------------------------------------------------------------------------------
    def route(self, question: str, feedback: str, trace: Trace) -> Action:
        with trace.step("router"):
            pred, _ = safe_predict(
                self.router, trace, "router", kb_description=self.context.kb_description,
                entity_types=self.context.node_labels, relation_types=self.context.relationship_labels,
                question=question, feedback=feedback,
            )
        if pred is None:
            return Action([], [], TEXT)
        return Action(list(pred.topic_entities), [str(r) for r in pred.useful_relations], str(pred.source))

    # --- retriever bank ---------------------------------------------------------------------------
    def retrieve(self, question: str, action: Action, trace: Trace) -> RetrieverBankResult:
        with trace.step("retrieve"):
            if action.source == KG and action.entities:
                return self._hybrid(question, action)
            note = "the router chose the knowledge graph without entities" if action.source == KG else ""
            return RetrieverBankResult(ids=self._text(question), module="text", note=note)

    def _text(self, question: str) -> list[int]:
        cfg = self.config
        qvec = self.kb.embed_query(question)
        types = self.kb.skb.schema.answer_types
        return step7_rank_rest(self.kb, qvec, types, np.zeros(0, np.int64), cfg.merge.k, cfg.merge.doc_variant_step7)[0]

    def _hybrid(self, question: str, action: Action) -> RetrieverBankResult:
        cfg = self.config
        skb: SKB = self.kb.skb
        mapper = mapper_for(skb.schema)
        labels = [f"{e.name} ({e.type})" for e in action.entities]
        qg = QueryGraph(symbols={f"e{i}": named_node(f"e{i}", e.name, e.type, mapper) for i, e in enumerate(action.entities)})
        sc = retrieve_symbol_candidates(self.kb, qg, 1, variant=cfg.grounding.doc_variant_step4,
                                        strict=cfg.grounding.type_mode == "strict", exact_name_first=True)
        linked = {lab: (int(sc.constants[f"e{i}"][0]) if f"e{i}" in sc.constants else None)
                  for i, lab in enumerate(labels)}
        relations = {r: mapper.edge_type(relation_label(r), None, None).name for r in action.relations}
        edge_types = sorted({r for r in relations.values() if r is not None}) or skb.graph.edge_types
        out = RetrieverBankResult(ids=[], module="hybrid", linked=linked, relations=relations)
        sources = [node for node in linked.values() if node is not None]
        if not sources:
            out.note = "no topic entity could be linked to a node; text retrieval was used"
            out.module, out.ids = "text", self._text(question)
            return out
        pool: np.ndarray | None = None
        for label, node in linked.items():
            if node is None:
                continue
            mask = ego_graph(skb, node, edge_types, cfg.systems.ego_radius)
            out.ego[label] = skb.only_candidates(np.flatnonzero(mask))
            pool = mask if pool is None else pool & mask
        out.pool = skb.only_candidates(np.flatnonzero(pool) if pool is not None else np.zeros(0, np.int64))
        if len(out.pool):
            qvec = self.kb.embed_query(question)
            ids, _ = self.kb.index(cfg.merge.doc_variant_step7).search(qvec, candidates=out.pool, k=cfg.merge.k)
            out.ids = [int(i) for i in ids]
        return out

    # --- critic -----------------------------------------------------------------------------------
    def validation_context(self, retrieval: RetrieverBankResult) -> str:
        """The top document and the reasoning paths from the topic entities to it."""
        skb: SKB = self.kb.skb
        top = retrieval.ids[0]
        doc = render_document(skb, top, "text", self.config.index.doc_budget_tokens or VALIDATION_DOC_TOKENS)
        edge_types = sorted({r for r in retrieval.relations.values() if r is not None}) or skb.graph.edge_types
        paths = [p for node in retrieval.linked.values() if node is not None
                 for p in reasoning_paths(skb, node, top, edge_types, self.config.systems.ego_radius)]
        context = f"{skb.name(top)} ({skb.type_of(top)})\n{doc}"
        return context + ("\nReasoning paths:\n" + "\n".join(paths[:MAX_PATHS]) if paths else "")

    def validate(self, question: str, retrieval: RetrieverBankResult, trace: Trace) -> bool | None:
        """The validator's verdict on the top document; None when it gave none: the critic loop then
        stops with this round's answer, which does not count as accepted."""
        if not retrieval.ids:
            return False
        with trace.step("validator"):
            pred, _ = safe_predict(self.validator, trace, "validator", question=question,
                                   document=self.validation_context(retrieval))
        if pred is None:
            trace.event("validator", "no_verdict", "stopped with this round's answer, not accepted")
            return None
        return bool(pred.aligned)

    def comment(self, question: str, action: Action, retrieval: RetrieverBankResult, trace: Trace) -> str:
        skb: SKB = self.kb.skb
        with trace.step("commenter"):
            pred, _ = safe_predict(
                self.commenter, trace, "commenter", question=question,
                topic_entities=[f"{e.name} ({e.type})" for e in action.entities], useful_relations=action.relations,
                retrieval_module=action.source if action.source in (KG, TEXT) else TEXT,
                observation=retrieval.observation(skb),
            )
        if pred is None:
            return "The retrieved document is incorrect."
        return feedback_text(str(pred.error_type), str(pred.wrong_item or ""))

    # --- Algorithm 1 ------------------------------------------------------------------------------
    def forward(self, question: str) -> dspy.Prediction:
        trace = Trace(system=self.system, question=question)
        self.ensure_examples(trace)
        history = ""
        rounds: list[dict] = []
        retrieval = RetrieverBankResult(ids=[], module="text")
        accepted = False
        for t in range(self.config.systems.critic_rounds):
            action = self.route(question, history, trace)
            retrieval = self.retrieve(question, action, trace)
            verdict = self.validate(question, retrieval, trace)
            accepted = verdict is True
            record = {"action": action.describe(), "module": retrieval.module, "top": retrieval.ids[:5],
                      "observation": retrieval.observation(self.kb.skb), "accepted": verdict}
            rounds.append(record)
            if verdict is not False or t == self.config.systems.critic_rounds - 1:
                break
            feedback = self.comment(question, action, retrieval, trace)
            record["feedback"] = feedback
            history += (f"Attempt {t + 1}: {action.describe()}.\n"
                        f"The retrieved document is incorrect. Feedback: {feedback}\n")
        trace.data["rounds"] = rounds
        trace.flags["accepted"] = accepted
        if retrieval.pool is not None:  # the hybrid module's graph-restricted set plays C_cypher's part
            trace.data["grounded_ids"] = retrieval.pool[:1000].tolist()
            trace.data["num_grounded"] = len(retrieval.pool)
        strand = "grounded" if retrieval.module == "hybrid" else "vss"
        trace.data["strand"] = dict.fromkeys(map(str, retrieval.ids), strand)
        trace.data["pre_rerank"] = retrieval.ids
        return dspy.Prediction(ranked_ids=list(retrieval.ids), trace=trace)

    # --- in-context examples from the training split -----------------------------------------------
    def ensure_examples(self, trace: Trace) -> None:
        """Collect the in-context examples once per KB, config and LM, from the KB's training split
        (``kb.source``: the SKB path) if it has one; loaded or optimised demos win. The collection is
        not bound by the question's deadline; an LM outage during it degrades this question, and the
        next one collects again."""
        if self._examples_ready:
            return
        with _COLLECT_LOCK:
            if self._examples_ready:
                return
            self._examples_ready = True
            source = getattr(self.kb, "source", None)
            if source is None or self.router.demos or self.validator.demos or self.commenter.demos:
                return
            from autofocus.skb.qa import load_qa, splits_available

            lm = self.router.lm or dspy.settings.lm
            key = (self.config.model_dump_json(), str(getattr(lm, "model", type(lm).__name__)))
            shared = _COLLECTED.setdefault(self.kb, {})
            if key not in shared:
                items = load_qa(source, "train") if "train" in splits_available(source) else []
                start = time.perf_counter()
                try:
                    with question_deadline(None):
                        self.collect_examples(items)
                except ExamplesUnavailable as exc:
                    self._examples_ready = False
                    trace.degrade("critic", f"collecting in-context examples failed, ran zero-shot: {exc}")
                    return
                shared[key] = (self.router.demos, self.validator.demos, self.commenter.demos)
                trace.event("critic", "examples_collected",
                            f"{len(self.commenter.demos)} commenter, {len(self.router.demos)} router, "
                            f"{len(self.validator.demos)} validator examples from {len(items)} training questions "
                            f"in {time.perf_counter() - start:.1f} s")
            router, validator, commenter = shared[key]
            self.router.demos, self.validator.demos, self.commenter.demos = list(router), list(validator), list(commenter)

    def collect_examples(self, items: Sequence[QAItem]) -> int:
        """Run router + retrieval on training questions with the ground-truth critic; keep the commenter
        feedback that led to an accepted next attempt, accepted router actions and validator verdicts.

        Questions are visited in a seeded random order (the paper samples random experiences), at most
        ``5 * critic_examples`` of them, ``concurrency`` at a time; the examples are merged in that order,
        so the result does not depend on thread timing. Returns the number of commenter examples.
        Raises ``ExamplesUnavailable`` (and keeps no example) when an LM call gave no answer: examples
        from a failing LM would be a biased sample.
        """
        cfg = self.config
        order = np.random.default_rng(cfg.runtime.seed).permutation(len(items))[: max(10, 5 * cfg.systems.critic_examples)].tolist()
        comments: list[dspy.Example] = []
        routes: list[dspy.Example] = []
        verdicts: dict[tuple[str, bool], dspy.Example] = {}
        batch = max(1, cfg.runtime.concurrency)
        for start in range(0, len(order), batch):
            if len(comments) >= cfg.systems.critic_examples:
                break
            chunk = [items[pos] for pos in order[start:start + batch]]
            for comment, route, seen, outage in map_concurrently(self._experience, chunk, batch):
                if outage is not None:
                    raise ExamplesUnavailable(outage)
                if comment is not None:
                    comments.append(comment)
                if route is not None and len(routes) < ROUTER_DEMOS:
                    routes.append(route)
                for key, example in seen:
                    verdicts.setdefault(key, example)
        self.commenter.demos = comments[: cfg.systems.critic_examples]
        self.router.demos = routes
        self.validator.demos = [verdicts[key] for key in sorted(verdicts)]  # at most a yes and a no per type
        return len(self.commenter.demos)

    def _experience(self, item: QAItem) -> tuple[dspy.Example | None, dspy.Example | None,
                                                 list[tuple[tuple[str, bool], dspy.Example]], str | None]:
        """One training question: (the commenter example whose feedback led to success, the accepted
        router action, validator verdicts keyed by (top type, correct), the first LM outage if any)."""
        skb: SKB = self.kb.skb
        question, gold = str(item.query), {int(a) for a in item.answer_ids}
        trace = Trace(system=self.system, question=question)
        history, previous = "", None
        verdicts: list[tuple[tuple[str, bool], dspy.Example]] = []
        for t in range(self.config.systems.critic_rounds):
            action = self.route(question, history, trace)
            if trace.degraded:
                return None, None, [], f"{trace.degraded[0].step}: {trace.degraded[0].error}"
            retrieval = self.retrieve(question, action, trace)
            ok = bool(retrieval.ids) and retrieval.ids[0] in gold
            if retrieval.ids:
                verdicts.append(((skb.type_of(retrieval.ids[0]), ok), dspy.Example(
                    question=question, document=self.validation_context(retrieval), aligned=ok)))
            if ok:
                route = dspy.Example(  # the schema fields are the same for all: left out
                    question=question, feedback=history, topic_entities=action.entities,
                    useful_relations=action.relations, source=action.source)
                return previous, route, verdicts, None
            error, wrong = oracle_feedback(action, retrieval, gold)
            previous = dspy.Example(
                question=question, topic_entities=[f"{e.name} ({e.type})" for e in action.entities],
                useful_relations=action.relations, retrieval_module=action.source if action.source in (KG, TEXT)
                else TEXT, observation=retrieval.observation(skb), error_type=error, wrong_item=wrong)
            history += (f"Attempt {t + 1}: {action.describe()}.\n"
                        f"The retrieved document is incorrect. Feedback: {feedback_text(error, wrong)}\n")
        return None, None, verdicts, None
