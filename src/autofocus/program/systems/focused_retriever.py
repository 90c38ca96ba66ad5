"""FocusedRetriever (paper 000, Algorithm 1), AF-Retriever's predecessor, on autofocus's components.

    line 1      DERIVE_CYPHER       self.cypher       (FR's prompt: labels, properties, relations; no target type)
    line 2      REGEX               program.steps.grounded_strand.parse_step (target type from the RETURN variable)
    lines 3-9   SYMBOL_CANDIDATES + GROUND_TRIPLETS: program.steps.grounded_strand.ground_strand (repair and
                relaxation off in the preset), top k-hat_max per constant, k-hat <- k-hat^1.5 + 0.5
    line 10     VSS on C_cypher     program.vss.step6_rank_grounded, the alpha best by similarity
    line 11     DERIVE_TARGET_TYPE  self.target_type  (AF's step-1 signature; used by the VSS strand only)
    line 12     VSS on the rest     program.vss.step7_rank_rest over C(y'.type) minus C_cypher
    lines 13-14 merge + RERANK      Y_cypher + Y_vss, then self.reranker (pairwise by default)

Settings map onto ``AutofocusConfig``: k-hat_max is ``l_max`` (the same bound, named l in AF; the FR
preset sets the paper's 1,500,000), alpha is the fraction ``alpha`` of ``k`` (the paper's alpha = 12
of k = 20 is 0.6), strict/lenient parsing is ``type_mode``, the reranker is ``reranker``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import dspy
import numpy as np

from autofocus.config import AutofocusConfig
from autofocus.program.steps.grounded_strand import StrandSettings, ground_strand, parse_step
from autofocus.program.steps.grounding import support_paths
from autofocus.program.steps.llm_call import safe_predict
from autofocus.program.steps.rerank import rerank_candidates
from autofocus.program.steps.rerankers import make_reranker
from autofocus.program.steps.schema_context import SchemaContext
from autofocus.program.steps.vss import grounded_slots, merge, step6_rank_grounded, step7_rank_rest
from autofocus.program.systems.afr import derive_target_type
from autofocus.program.systems.base import SeedSystem
from autofocus.query_graph import QueryGraph
from autofocus.signatures import target_type_signature
from autofocus.signatures.seed_systems import DeriveCypher
from autofocus.skb.model import SKB
from autofocus.trace import Trace

if TYPE_CHECKING:
    from autofocus.kb import KnowledgeBaseLike


class FocusedRetriever(SeedSystem):
    """Answer a question with FocusedRetriever's Cypher, grounding, merge and rerank steps."""

    def __init__(self, kb: KnowledgeBaseLike, config: AutofocusConfig | None = None, system: str = "focusedretriever") -> None:
        super().__init__(kb, config, system)
        if self.config.query.query_format != "cypher":
            raise ValueError(f"{system}: FocusedRetriever derives Cypher; query_format={self.config.query.query_format} "
                             "is an AF-Retriever option")
        schema = kb.skb.schema
        self.context = SchemaContext.from_schema(schema)
        self.properties = sorted({t.name_field for t in schema.node_types.values()} | set(self.context.attribute_names))
        types = self.context.candidate_types
        self.cypher = dspy.Predict(DeriveCypher)
        self.target_type = dspy.Predict(target_type_signature(types)) if len(types) > 1 else None
        self.reranker = make_reranker(self.config, self.config.runtime.lm.for_step("rerank"))

    # --- lines 1-2 --------------------------------------------------------------------------------
    def derive_query_graph(self, question: str, trace: Trace) -> QueryGraph | None:
        with trace.step("2_query"):
            pred, raw = safe_predict(
                self.cypher, trace, "2_query", question=question, node_labels=self.context.node_labels,
                properties=self.properties, relation_labels=self.context.relationship_labels,
            )
        cypher = str(pred.cypher) if pred is not None else raw
        trace.data["cypher"] = cypher
        return parse_step(self.kb, cypher, None, self.config.grounding, trace)

    # --- lines 3-9 --------------------------------------------------------------------------------
    def ground(self, qg: QueryGraph, trace: Trace) -> tuple[np.ndarray, dict[str, np.ndarray], QueryGraph]:
        """C_cypher (candidate types only), the final candidate set of every symbol and the graph grounded."""
        strand = ground_strand(self.kb, qg, StrandSettings.of(self.config), trace)
        grounded = self.kb.skb.only_candidates(strand.answers)
        trace.data["grounded_ids"] = grounded
        trace.data["num_grounded"] = len(grounded)
        trace.flags["grounded_nonempty"] = len(grounded) > 0
        final = strand.grounding.final_sets if strand.grounding is not None else {}
        return grounded, final, strand.query_graph or qg

    # --- line 11 ----------------------------------------------------------------------------------
    def predict_target_type(self, question: str, trace: Trace) -> str | None:
        return derive_target_type(self.target_type, self.context, question, trace)

    # --- the whole program ------------------------------------------------------------------------
    def forward(self, question: str) -> dspy.Prediction:
        cfg = self.config
        trace = Trace(system=self.system, question=question)
        skb: SKB = self.kb.skb
        grounded, final = np.zeros(0, np.int64), {}
        qg = self.derive_query_graph(question, trace)
        if qg is not None:
            grounded, final, qg = self.ground(qg, trace)
        qvec = self.kb.embed_query(question)
        with trace.step("6_vss_grounded"):
            y_cypher, s6 = step6_rank_grounded(self.kb, qvec, grounded, grounded_slots(cfg.merge.alpha, cfg.merge.k),
                                               cfg.merge.doc_variant_step6)
        y_type = self.predict_target_type(question, trace)
        trace.data["target_type"] = y_type
        types = [y_type] if y_type in skb.node_type_names else self.context.candidate_types
        with trace.step("7_vss_rest"):
            y_vss, s7 = step7_rank_rest(self.kb, qvec, types, grounded, cfg.merge.k - len(y_cypher), cfg.merge.doc_variant_step7)
        merged = merge(y_cypher, y_vss, cfg.merge.k, dict(zip(y_cypher + y_vss, s6 + s7, strict=True)))
        trace.data["strand"] = {str(i): s for i, s in merged.strand.items()}
        trace.data["pre_rerank"] = merged.ids
        retrieved = {int(i) for v, ids in final.items() if qg is not None and v != qg.target and len(ids) <= 1000
                     for i in ids}
        # the grounded strand has the Cypher's type, the VSS strand y': each candidate is shown with its own
        ranked = rerank_candidates(self.reranker, question, merged.ids, skb, None, retrieved, trace)
        if qg is not None and final:
            on_graph = set(y_cypher)
            trace.data["support"] = {str(i): support_paths(skb, qg, final, i) for i in ranked if i in on_graph}
        return dspy.Prediction(ranked_ids=ranked, trace=trace)
