"""One validated, serialisable configuration for every program (architecture principle 6)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, field_validator

DocVariant = Literal["text", "text+rel"]
Reranker = Literal["auto", "none", "pointwise", "listwise", "pairwise", "tournament"]
Expansion = Literal["paper", "code"]
RelaxRung = Literal["filters", "triplets", "constants", "edges"]


LM_STEPS: tuple[str, ...] = ("target_type", "cypher", "rerank")


class LMConfig(BaseModel):
    """Which LM each LLM step uses (a DSPy/LiteLLM model string, or ``local`` for the offline GGUF),
    and how long to wait for it.

    ``timeout_s`` and ``num_retries`` left at None come from ``AUTOFOCUS_LM_TIMEOUT`` and
    ``AUTOFOCUS_LM_RETRIES``, else from ``autofocus.lm``'s defaults (``get_lm``).
    """

    default: str = "local"
    target_type: str | None = None
    cypher: str | None = None
    rerank: str | None = None
    temperature: float = 0.0
    max_tokens: int = 512
    timeout_s: float | None = Field(None, gt=0, description="seconds to wait for one LM answer")
    num_retries: int | None = Field(None, ge=0, description="retries of a timed-out or failed LM request")

    def for_step(self, step: str) -> str:
        if step not in LM_STEPS:
            raise ValueError(f"unknown LLM step {step!r}; steps: {', '.join(LM_STEPS)}")
        return getattr(self, step) or self.default

    def client_options(self) -> dict[str, float | int | None]:
        """The keyword arguments ``autofocus.lm.get_lm`` takes from this config."""
        return {"temperature": self.temperature, "max_tokens": self.max_tokens, "timeout": self.timeout_s,
                "num_retries": self.num_retries}


class AutofocusConfig(BaseModel):
    k: int = Field(20, ge=1)
    alpha: float = Field(2 / 3, ge=0.0, le=1.0)
    l_max: int = Field(100, ge=1)
    expansion: Expansion = "paper"
    type_mode: Literal["strict", "lenient"] = "strict"
    edge_mode: Literal["strict", "lenient"] = "strict"
    query_format: Literal["cypher", "typed"] = "cypher"
    doc_variant_step4: DocVariant = "text"
    doc_variant_step6: DocVariant = "text"
    doc_variant_step7: DocVariant = "text+rel"
    step6_order: Literal["vss", "round"] = "vss"  # round: the reference code's expansion-round-first order
    step7_exclude: Literal["grounded", "none"] = "grounded"  # grounded: Algorithm 1 line 12; none: dedup at merge
    exact_name_first: bool = True  # step 4: exact (case-insensitive) name matches before VSS hits
    exact_name_only: bool = Field(
        True, description="step 4: a constant whose name identifies nodes is those nodes (name-similar ones when relaxed)"
    )
    repair: bool = Field(True, description="step 3b: repair labels, relationships, directions and hops the schema rejects")
    repair_mentions: bool = Field(
        True, description="step 3b: link entities the question names and the query left out to the target (with repair)"
    )
    repair_asked: bool = Field(
        True, description="step 3b: answer with the label the question asks for, one schema hop from the query's answers"
    )
    relax: list[RelaxRung] = Field(
        default_factory=lambda: ["filters", "triplets", "constants", "edges"],
        description="step 5: relaxations tried in order while grounding is empty ([] = the paper's: none)",
    )
    relax_max_rungs: int = Field(6, ge=0, description="at most this many relaxations per question")
    alpha_rule: Literal["fixed", "evidence"] = Field(
        "evidence", description="fixed: alpha*k slots (paper); evidence: fewer for weaker grounding evidence"
    )
    alpha_relaxed: float = Field(0.5, ge=0.0, le=1.0, description="evidence rule: alpha factor per relaxation")
    alpha_repaired: float = Field(1.0, ge=0.0, le=1.0, description="evidence rule: alpha factor for a repaired query")
    alpha_large: float = Field(0.5, ge=0.0, le=1.0, description="evidence rule: alpha factor for a huge grounded set")
    alpha_large_size: int = Field(1000, ge=1, description="evidence rule: a grounded set above this is huge")
    alpha_disagree: float = Field(0.5, ge=0.0, le=1.0, description="evidence rule: factor when step 2's target label is not step 1's")
    merge_rule: Literal["block", "score", "evidence"] = Field(
        "evidence", description="steps 6-7 merge: block: the grounded candidates before VSS's (paper, Algorithm 1 line 13); "
        "score: one list by similarity, the grounded ones raised by grounded_bonus; evidence: block where the "
        "query's constants are names the question gives and nothing was relaxed, else score"
    )
    merge_order: Literal["score", "rrf"] = Field(
        "score", description="the fused order where merge_rule does not keep the block: score: one similarity scale, "
        "grounded candidates raised by grounded_bonus; rrf: reciprocal rank fusion of the VSS order of all k "
        "candidates with step 6's grounded order, the grounded strand weighted by the evidence rule's factor"
    )
    grounded_bonus: float = Field(
        0.1, ge=0.0, le=2.0, description="score merge: cosine similarity added to a grounded candidate, times the "
        "evidence rule's factor (alpha_rule evidence)"
    )
    target_type_scoring: Literal["auto", "generate"] = Field(
        "auto", description="step 1: auto scores every candidate type where the LM exposes probabilities"
    )
    target_type_threshold: float = Field(0.3, ge=0.0, le=1.0, description="step 1 scoring: keep types with p >= this x the best")
    target_type_max: int = Field(2, ge=1, description="step 1 scoring: at most this many types kept")
    target_type_cue: float = Field(
        4.0, ge=1.0, description="step 1 scoring: weight of the type the question names after its question word (1: off)"
    )
    target_type_prior_k: int = Field(
        20, ge=0, description="step 1 scoring: weigh the types by how the question's k nearest nodes split over them (0: off)"
    )
    query_samples: int = Field(
        1, ge=1, description="step 2: >1 samples this many queries and grounds the nodes most of them agree on"
    )
    query_temperature: float = Field(0.7, ge=0.0, le=2.0, description="step 2: temperature of the extra samples")
    query_votes: float = Field(
        0.5, gt=0.0, le=1.0, description="self-consistency: keep nodes grounded by at least this share of the samples that ground"
    )
    prompt_schema: Literal["graph", "declared"] = Field(
        "graph", description="steps 1-2 see the triples the graph has and each type's relations (graph) or schema.json (declared)"
    )
    constrain: Literal["auto", "grammar", "json_schema", "off"] = Field(
        "auto",
        description="step 2: constrain decoding to the schema: a grammar (llama.cpp), JSON-schema enums (typed "
        "format, structured outputs) or off; auto picks what the step's LM takes",
    )
    step7_types: Literal["step1", "agree"] = Field(
        "agree", description="step1: step 1's type only (paper); agree: also the query's label when it grounded"
    )
    reranker: Reranker = "auto"
    rerank_fusion: Literal["none", "rrf", "prior"] = Field(
        "none", description="step 8: none: the reranker's order (paper); rrf: reciprocal rank fusion of the "
        "reranker's order with the retrieval order, for rerankers weaker than steps 1-7; prior: the reranker's "
        "log-odds plus rerank_prior_weight x the log-rank prior of steps 1-7's order"
    )
    rerank_prior_weight: float = Field(
        1.0, ge=0.0, le=10.0, description="prior: weight of -ln(1 + retrieval rank) against the reranker's "
        "log-odds (0: the reranker alone; large: steps 1-7's order); a setting to tune (`autofocus tune`)"
    )
    rerank_evidence: bool = Field(
        True, description="step 8: a grounded candidate's description shows the graph path that satisfied the query"
    )
    rerank_fusion_k: int = Field(60, ge=1, description="rrf: the rank offset k of 1/(k + rank) (60: Cormack et al.)")
    named_last: bool = Field(
        True, description="after steps 7 and 8, candidates whose whole name the question writes verbatim go last: "
        "a question names the nodes it starts from, not its answers (false: the paper's order)"
    )
    rerank_keep_block: bool = Field(
        False, description="step 8: where steps 6-7 kept the grounded block for strong evidence (merge_rule evidence), "
        "the reranker orders inside the block and inside the rest, not across them"
    )
    rerank_depth: int | None = Field(
        10, ge=1, description="step 8 reorders only the first this many of the k candidates; the rest keep "
        "their order below them (None: all k, as in the paper)"
    )
    context_budget_tokens: int = Field(3500, ge=256)
    yes_no_description_tokens: int | None = Field(
        128, ge=16, description="step 8 yes/no scoring: each candidate's description in at most this many tokens (None: the context budget)"
    )
    doc_budget_tokens: int | None = Field(
        None, ge=32, description="node documents embedded in at most this many tokens (None: the embedder's trained length, 128 for MiniLM)"
    )
    steps: str = "1-8"
    concurrency: int = Field(4, ge=1)
    lm_concurrency: int | None = Field(
        None, ge=1, description="LM calls in flight per LM for the whole process (None: `concurrency`)"
    )
    question_deadline_s: float | None = Field(
        1800.0, gt=0, description="a question makes no LM call after this many seconds (then it is degraded)"
    )
    embedder: str = "local:all-MiniLM-L6-v2"
    index_kind: Literal["flat", "hnsw", "ivf"] = Field(
        "flat", description="FAISS index of whole-type searches (steps 4, 7): flat is exact; hnsw is approximate"
    )
    scan_ahead: bool = Field(
        True, description="steps 3-7: embed the question and run step 7's exact whole-type scan on a worker thread "
        "while steps 3-5 run (the same rankings as one after the other; False: one after the other)",
    )
    scan_shards: int = Field(
        1, ge=1, le=64, description="scan_ahead: split each whole-type scan into this many ranges, each on its own thread"
    )
    lm: LMConfig = Field(default_factory=LMConfig)
    seed: int = 0
    # other systems (program/four_step_focus.py, program/hybgrag.py); FocusedRetriever's k-hat_max is l_max
    name_similarity: float = Field(0.95, ge=0.0, le=1.0)  # 4StepFocus: constant <-> node name match cutoff
    unmatched_constant: Literal["drop", "vss"] = "drop"  # 4StepFocus: paper drops its triplets; code: VSS top 1
    critic_rounds: int = Field(4, ge=1)  # HybGRAG: T, the maximum router/critic iterations
    critic_examples: int = Field(30, ge=0)  # HybGRAG: commenter in-context examples from the train split
    ego_radius: int = Field(2, ge=1)  # HybGRAG: hops of the hybrid module's ego-graphs

    @field_validator("steps")
    @classmethod
    def _check_steps(cls, v: str) -> str:
        allowed = {"1+7", "1-5", "1-6", "1-7", "1-8"}
        if v not in allowed:
            raise ValueError(f"steps must be one of {sorted(allowed)} (the paper's ablations), got {v!r}")
        return v

    @property
    def lm_in_flight(self) -> int:
        """The per-LM cap: question threads and their fan-out share it instead of multiplying."""
        return self.lm_concurrency if self.lm_concurrency is not None else self.concurrency

    @property
    def last_step(self) -> int:
        return int(self.steps[-1])

    @property
    def doc_variants(self) -> list[str]:
        """The document variants whose indexes these steps search: step 7's alone for ``1+7``."""
        used = {self.doc_variant_step7} if self.steps == "1+7" else {self.doc_variant_step4, self.doc_variant_step6,
                                                                      self.doc_variant_step7}
        return sorted(used)

    def save(self, path: Path) -> None:
        path.write_text(self.model_dump_json(indent=2))

    @classmethod
    def load(cls, path: Path) -> AutofocusConfig:
        return cls.model_validate(json.loads(path.read_text()))
