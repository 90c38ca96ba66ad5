"""One validated, serialisable configuration for every program, grouped by
the step each setting changes.

``AutofocusConfig`` holds ``steps`` and one group per stage: ``query`` (steps 1-3), ``grounding``
(steps 4-5), ``merge`` (steps 6-7), ``rerank`` (step 8), ``index`` (embedding and search),
``runtime`` (LMs, concurrency, deadlines), ``systems`` (the other papers' systems) and
``experimental`` (settings no ablation has measured yet). ``steps`` is a ``Steps`` value, which says
once which strands run.

Every setting also has a flat name, its field name (``alpha`` is ``merge.alpha``): names are unique
across groups, so configs saved flat (``best_config.json``, saved programs and run manifests written
before the grouping, the registry's presets, ``afr:alpha=0.5``) load as they did, and overrides take
either form. ``setting_groups`` is that mapping; configs serialise grouped.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from autofocus.config_legacy import LEGACY_SETTINGS, MOVED_FROM_EXPERIMENTAL, moved, older_query_settings
from autofocus.config_lm import LMConfig
from autofocus.language import DEFAULT as DEFAULT_LANGUAGE
from autofocus.language import available as available_languages

DocVariant = Literal["text", "text+rel"]
Reranker = Literal["auto", "none", "pointwise", "listwise", "pairwise", "tournament", "cross-encoder", "bi-encoder"]
# The kinds of reranker `autofocus adapt` trains, with the hard negatives per training question each was
# measured with (docs/results.md, 2026-11-28): the bi-encoder sees every other answer of its batch as a
# negative too, so it needs fewer mined ones.
RERANKER_NEGATIVES: dict[str, int] = {"cross-encoder": 7, "bi-encoder": 3}
RERANKER_KINDS: tuple[str, ...] = tuple(RERANKER_NEGATIVES)
Expansion = Literal["paper", "code"]
RelaxRung = Literal["filters", "triplets", "constants", "edges"]
RepairRule = Literal[
    "via_named_label", "solve", "star_constants", "name_from_question", "orient_by_question", "constrain_mentions",
    "asked_class", "turn_round", "own_links",
]  # fmt: skip
TypeInputName = Literal["prior", "spelled", "reader"]
# the default inputs; ``reader`` (a type reader `autofocus adapt` trained) is listed by choice: on both
# labelled benchmarks it made step 1's type worse where the LM's was right (docs/results.md, 2026-11-28)
TYPE_INPUTS: tuple[str, ...] = ("prior", "spelled")
REPAIR_RULES: tuple[str, ...] = get_args(RepairRule)  # the default order (``program.steps.repairs.RULES``)


class Steps(StrEnum):
    """The steps a program runs: all eight, or one of the paper's ablations, named by what it keeps; the
    program asks these properties once instead of comparing the setting's text."""

    VECTOR_SEARCH = "1+7"  # step 1's type, then vector search: no query
    GROUNDED = "1-5"  # the grounded nodes only, in grounding order
    GROUNDED_RANKED = "1-6"  # the grounded nodes only, ranked by similarity
    RETRIEVAL = "1-7"  # both strands merged, no reranking
    ALL = "1-8"

    @property
    def grounds(self) -> bool:
        """Steps 2-5 run: a query is written and grounded."""
        return self is not Steps.VECTOR_SEARCH

    @property
    def ranks_grounded(self) -> bool:
        """Step 6 orders the grounded nodes by similarity (``1-5`` keeps grounding's order)."""
        return self is not Steps.GROUNDED

    @property
    def searches_rest(self) -> bool:
        """Step 7's vector search runs and is merged in."""
        return self in (Steps.VECTOR_SEARCH, Steps.RETRIEVAL, Steps.ALL)

    @property
    def reranks(self) -> bool:
        """Step 8 runs."""
        return self is Steps.ALL


class _Group(BaseModel):
    """A group of settings: a misspelt setting is an error, not silently dropped."""

    model_config = ConfigDict(extra="forbid")


class QueryConfig(_Group):
    """Steps 1-3: the target type, the query the LM writes, and its repair."""

    target_type_scoring: Literal["auto", "generate"] = Field(
        "auto", description="step 1: auto scores every candidate type where the LM exposes probabilities (the "
        "offline LM) and keeps the likely ones; generate lets the LM write its answer, as the paper does"
    )
    target_type_threshold: float = Field(
        0.3, ge=0.0, le=1.0, description="step 1 scoring: keep the types with p >= this x the best one's; "
        "lower keeps more types for step 7 to search"
    )
    target_type_max: int = Field(2, ge=1, description="step 1 scoring: at most this many types kept")
    target_type_inputs: list[TypeInputName] = Field(
        default_factory=lambda: list(TYPE_INPUTS), description="step 1: its evidence beside the LM's answer, combined "
        "in one place (program.steps.target_type): prior (how the question's nearest nodes split over the types), "
        "spelled (the label the question asks for by name comes first, whatever the others weigh), reader (a trained "
        "type reader's probabilities, where `autofocus adapt` trained one; not a default); [] = the LM's alone"
    )
    type_reader_weight: float = Field(
        1.0, ge=0.0, le=5.0, description="step 1: the trained type reader's probabilities (`autofocus adapt`) raised "
        "to this power multiply the LM's, as the other priors do (0: left out)"
    )
    target_type_prior_k: int = Field(
        20, ge=1, description="step 1's prior: the question's nearest nodes whose types it counts"
    )
    prompt_schema: Literal["graph", "declared"] = Field(
        "graph", description="steps 1-2 see the triples the graph really has and each type's relations (graph), "
        "or schema.json as written (declared, the paper's)"
    )
    step1_kb_description: bool = Field(
        True, description="step 1's prompt says what the knowledge base is about (its schema's description)"
    )
    step1_type_parts: Literal["full", "no_examples", "no_relations", "names"] = Field(
        "no_relations", description="step 1's prompt describes each candidate type (prompt_schema graph): full "
        "(its description, relationships and an example node), without the example, without the relationships "
        "(the default: the type is right as often, on three labelled benchmarks, and the LM gives it more "
        "probability where nodes have few relationships: docs/results.md), or names (no descriptions at all); "
        "shorter prompts cost a new prompt cache less"
    )
    query_format: Literal["cypher", "typed"] = Field(
        "cypher", description="step 2 writes Cypher (the paper's) or a typed JSON query graph, which LMs with "
        "structured outputs fill more reliably"
    )
    constrain: Literal["auto", "grammar", "json_schema", "off"] = Field(
        "auto", description="step 2: constrain decoding to the schema: a grammar (llama.cpp), JSON-schema enums "
        "(typed format, structured outputs) or off; auto picks what the step's LM takes"
    )
    repairs: list[RepairRule] = Field(
        default_factory=lambda: list(REPAIR_RULES),
        description="step 3b: the rules that repair the query against the schema and the question, run in this order "
        "([] = the paper's: none; a shorter list is an ablation; docs/grounding.md describes each)",
    )
    language: str = Field(
        DEFAULT_LANGUAGE, description="the language of the questions: the words step 1's cue and step 3b's rules read "
        "(a module of autofocus.language: en, fr)"
    )
    class_type_floor: float = Field(
        0.1, ge=0.0, le=1.0, description="step 3b: beside the types step 1 kept, the types it scored at least this "
        "likely are labels whose class node the question may name (\"Which rivers ...\": a class of natural objects "
        "where step 1 kept location); 1: the kept types only"
    )

    @model_validator(mode="before")
    @classmethod
    def _older_settings(cls, data: Any) -> Any:
        """Configs written before the lists name their entries by settings (``config_legacy``)."""
        return older_query_settings(data, REPAIR_RULES, TYPE_INPUTS) if isinstance(data, Mapping) else data

    @field_validator("language")
    @classmethod
    def _known_language(cls, v: str) -> str:
        if v not in available_languages():
            raise ValueError(f"no language resource {v!r}; available: {', '.join(available_languages())}")
        return v


class GroundingConfig(_Group):
    """Steps 4-5: the nodes each query symbol may be, and the nodes that satisfy the whole query."""

    l_max: int = Field(
        100, ge=1, description="step 4-5: at most this many candidate nodes per constant (the paper's l_max); "
        "higher finds misspelt constants, lower is faster and stricter"
    )
    expansion: Expansion = Field(
        "paper", description="step 5: how the candidates per constant grow until k answers ground: paper "
        "(l -> l^1.5 + 0.5, Algorithm 1) or code (l -> 1.5 l, the authors' code)"
    )
    type_mode: Literal["strict", "lenient"] = Field(
        "strict", description="step 4: a symbol's candidates must have the query's label (strict) or may have "
        "any (lenient, for SKBs whose labels an LM confuses)"
    )
    edge_mode: Literal["strict", "lenient"] = Field(
        "strict", description="step 5: follow the query's relationship types (strict) or any edge between the "
        "symbols (lenient)"
    )
    doc_variant_step4: DocVariant = Field(
        "text", description="step 4 matches constants against node documents without (text) or with their "
        "relations (text+rel)"
    )
    exact_name_first: bool = Field(
        True, description="step 4: nodes whose name equals a constant's (case-insensitive) come before similar ones"
    )
    exact_name_only: bool = Field(
        True, description="step 4: a constant whose name identifies nodes is those nodes (name-similar ones when relaxed)"
    )
    relax: list[RelaxRung] = Field(
        default_factory=lambda: ["filters", "triplets", "constants", "edges"],
        description="step 5: relaxations tried in order while grounding is empty ([] = the paper's: none)",
    )
    relax_max_rungs: int = Field(6, ge=0, description="step 5: at most this many relaxations per question")


class MergeConfig(_Group):
    """Steps 6-7: how the grounded nodes and the vector search share the k places."""

    k: int = Field(20, ge=1, description="candidates returned (and reranked) per question")
    alpha: float = Field(
        2 / 3, ge=0.0, le=1.0, description="share of the k places the grounded strand may take (Algorithm 1); "
        "higher trusts the query more than similarity"
    )
    alpha_rule: Literal["fixed", "evidence"] = Field(
        "evidence", description="fixed: alpha*k places (paper); evidence: fewer the weaker the grounding evidence "
        "(relaxed, huge or off-type grounded sets: the alpha_* factors below)"
    )
    alpha_relaxed: float = Field(
        0.5, ge=0.0, le=1.0, description="evidence rule (alpha_rule): alpha factor per relaxation"
    )
    alpha_repaired: float = Field(
        1.0, ge=0.0, le=1.0, description="evidence rule: alpha factor for a repaired query"
    )
    alpha_large: float = Field(0.5, ge=0.0, le=1.0, description="evidence rule: alpha factor for a huge grounded set")
    alpha_large_size: int = Field(1000, ge=1, description="evidence rule: a grounded set above this is huge")
    alpha_disagree: float = Field(
        0.5, ge=0.0, le=1.0, description="evidence rule: alpha factor when step 2's target label is not step 1's"
    )
    merge_rule: Literal["block", "score", "evidence"] = Field(
        "evidence", description="block: the grounded candidates before VSS's (paper, Algorithm 1 line 13); "
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
        "evidence rule's factor"
    )
    doc_variant_step6: DocVariant = Field(
        "text", description="step 6 orders the grounded nodes by similarity to documents without (text) or with "
        "their relations (text+rel)"
    )
    doc_variant_step7: DocVariant = Field(
        "text+rel", description="step 7's vector search over documents without (text) or with their relations "
        "(text+rel); the only index steps 1+7 use"
    )
    step6_order: Literal["vss", "round"] = Field(
        "vss", description="step 6: grounded nodes by similarity (vss) or earlier expansion rounds first (round, "
        "the authors' code)"
    )
    step7_exclude: Literal["grounded", "none"] = Field(
        "grounded", description="step 7 skips the grounded nodes (grounded: Algorithm 1 line 12) or searches all "
        "and drops duplicates at the merge (none, the authors' code)"
    )
    step7_types: Literal["step1", "agree"] = Field(
        "agree", description="step 7 searches step 1's types only (step1, the paper's) or also the query's label "
        "when it grounded (agree), so one wrong step-1 guess does not exclude the answer's type"
    )
    named_last: bool = Field(
        True, description="after steps 7 and 8, candidates whose whole name the question writes verbatim go last: "
        "a question names the nodes it starts from, not its answers (false: the paper's order)"
    )


class RerankConfig(_Group):
    """Step 8: the LM reranker and what it sees."""

    reranker: Reranker = Field(
        "auto", description="step 8's method: auto is the program's trained reranker where it has one "
        "(`autofocus adapt`), else none for the offline LMs (their yes/no judge did not beat steps 1-7's order on "
        "the demo or WordNet) and listwise for hosted ones; none returns steps 1-7's order (no LM call); pointwise "
        "scores yes/no, also on a local LM; cross-encoder and bi-encoder need a program made by `autofocus adapt` "
        "with that kind"
    )
    rerank_depth: int | None = Field(
        10, ge=1, description="step 8 reorders only the first this many of the k candidates; the rest keep "
        "their order below them (None: all k, as in the paper; worth trying with a strong hosted LM)"
    )
    rerank_evidence: bool = Field(
        True, description="step 8: a grounded candidate's description shows the graph path that satisfied the query"
    )
    rerank_keep_block: bool = Field(
        False, description="step 8: where steps 6-7 kept the grounded block for strong evidence (merge.merge_rule evidence), "
        "the reranker orders inside the block and inside the rest, not across them"
    )
    rerank_fusion: Literal["none", "rrf", "prior"] = Field(
        "none", description="none: the reranker's order (paper); rrf: reciprocal rank fusion of the "
        "reranker's order with the retrieval order, for rerankers weaker than steps 1-7; prior: the reranker's "
        "log-odds plus rerank_prior_weight x the log-rank prior of steps 1-7's order"
    )
    rerank_fusion_k: int = Field(60, ge=1, description="rrf: the rank offset k of 1/(k + rank) (60: Cormack et al.)")
    rerank_prior_weight: float = Field(
        1.0, ge=0.0, le=10.0, description="prior: weight of -ln(1 + retrieval rank) against the reranker's "
        "log-odds (0: the reranker alone; large: steps 1-7's order); a setting to tune (`autofocus tune`)"
    )
    context_budget_tokens: int = Field(
        3500, ge=256, description="tokens of candidate descriptions in one reranker prompt; raise it for LMs with "
        "long contexts, lower it for small ones"
    )
    yes_no_description_tokens: int | None = Field(
        128, ge=16, description="yes/no scoring: each candidate's description in at most this many tokens "
        "(None: fitted to the whole context budget)"
    )


class IndexConfig(_Group):
    """How node documents and questions are embedded and searched (steps 1, 4, 6, 7)."""

    embedder: str = Field(
        "local:all-MiniLM-L6-v2", description="embedding model of documents and questions (local:NAME offline, or "
        "a hosted one); each embedder has its own index (`autofocus index build`)"
    )
    index_kind: Literal["flat", "hnsw", "ivf"] = Field(
        "flat", description="FAISS index of whole-type searches (steps 4, 7): flat is exact; hnsw and ivf are "
        "approximate and faster on large graphs"
    )
    doc_budget_tokens: int | None = Field(
        None, ge=32, description="node documents embedded in at most this many tokens (None: the embedder's "
        "trained length, 128 for MiniLM)"
    )


class RuntimeConfig(_Group):
    """Which LMs run, how many questions at once, and how long to wait: never what a ranking is."""

    lm: LMConfig = Field(default_factory=LMConfig, description="the LM of each LLM step and how long to wait for it")
    concurrency: int = Field(4, ge=1, description="questions answered at once (each on its own thread)")
    lm_concurrency: int | None = Field(
        None, ge=1, description="LM calls in flight per LM for the whole process (None: concurrency); lower it for "
        "rate-limited hosted LMs"
    )
    question_deadline_s: float | None = Field(
        1800.0, gt=0, description="a question makes no LM call after this many seconds (then it is degraded)"
    )
    max_question_chars: int | None = Field(
        4000, ge=1, description="a longer question is refused before any LM call, naming this setting: every LLM "
        "step's prompt holds it whole, and an LM's context window does not (raise it for long-context LMs; None: "
        "no bound)"
    )
    scan_ahead: bool = Field(
        True, description="steps 3-7: embed the question and run step 7's exact whole-type scan on a worker thread "
        "while steps 3-5 run (the same rankings; false: one after the other, for one-core machines)"
    )
    scan_shards: int = Field(
        1, ge=1, le=64, description="scan_ahead: split each whole-type scan into this many ranges, each on "
        "its own thread"
    )
    seed: int = Field(0, description="random seed of the steps that sample (HybGRAG's choice of in-context examples)")

    @property
    def lm_in_flight(self) -> int:
        """The per-LM cap: question threads and their fan-out share it instead of multiplying."""
        return self.lm_concurrency if self.lm_concurrency is not None else self.concurrency


class SystemsConfig(_Group):
    """Settings of the seed papers' other systems (``4stepfocus``, ``hybgrag``); FocusedRetriever's
    k-hat_max is ``grounding.l_max``."""

    name_similarity: float = Field(
        0.95, ge=0.0, le=1.0, description="4StepFocus: a constant matches a node whose name is at least this similar"
    )
    unmatched_constant: Literal["drop", "vss"] = Field(
        "drop", description="4StepFocus: a constant no name matches drops its triplets (drop, the paper's) or takes "
        "the most similar node (vss, the authors' code)"
    )
    critic_rounds: int = Field(4, ge=1, description="HybGRAG: T, the maximum router/critic iterations")
    critic_examples: int = Field(30, ge=0, description="HybGRAG: commenter in-context examples from the train split")
    ego_radius: int = Field(2, ge=1, description="HybGRAG: hops of the hybrid module's ego-graphs")


class ExperimentalConfig(_Group):
    """Settings no ablation has measured yet (step 2's self-consistency): apart from the step groups until
    one decides whether they join ``query`` or go. Off by default."""

    query_samples: int = Field(
        1, ge=1, description="step 2 self-consistency: >1 samples this many queries and grounds the nodes most of "
        "them agree on (1: off; each sample is one more LM call)"
    )
    query_temperature: float = Field(
        0.7, ge=0.0, le=2.0, description="self-consistency: temperature of the extra samples"
    )
    query_votes: float = Field(
        0.5, gt=0.0, le=1.0, description="self-consistency: keep nodes grounded by at least this share of the "
        "samples that ground"
    )


# the groups, in the order ``autofocus config show`` prints them
GROUPS: dict[str, type[_Group]] = {
    "query": QueryConfig, "grounding": GroundingConfig, "merge": MergeConfig, "rerank": RerankConfig,
    "index": IndexConfig, "runtime": RuntimeConfig, "systems": SystemsConfig, "experimental": ExperimentalConfig,
}  # fmt: skip


@cache
def setting_groups() -> dict[str, str]:
    """Flat setting name -> its group (``"alpha" -> "merge"``), read off the group models; a name in
    two groups is a programming error."""
    out: dict[str, str] = {}
    for group, model in GROUPS.items():
        for name in model.model_fields:
            if name in out or name in GROUPS or name in AutofocusConfig.model_fields:
                raise TypeError(f"setting {name!r} of group {group!r} is not unique")
            out[name] = group
    return out


def nest_settings(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` in the grouped form: flat names (``alpha``) and dotted ones (``merge.alpha``) go into
    their group; groups given whole are merged with them (the flat and dotted names win).

    A name no group or top-level field has raises ``ValueError`` naming the closest known one, at the
    top as in a group: a misspelt setting would otherwise run with its default.
    """
    groups = {**setting_groups(), **dict.fromkeys(LEGACY_SETTINGS, "query")}
    out: dict[str, Any] = {}
    loose: list[tuple[str, str, Any]] = []
    for key, value in data.items():
        group, dot, name = key.partition(".")
        if dot and group == "experimental" and name in MOVED_FROM_EXPERIMENTAL:
            loose.append((moved(name), name, value))
        elif dot and group in GROUPS:
            loose.append((group, name, value))
        elif key in GROUPS:
            given = value.model_dump() if isinstance(value, BaseModel) else value
            out[key] = dict(given) if isinstance(given, Mapping) else given
            if key == "experimental" and isinstance(given, Mapping):
                loose.extend((moved(n), n, out[key].pop(n)) for n in list(given) if n in MOVED_FROM_EXPERIMENTAL)
        elif key in groups:
            loose.append((groups[key], key, value))
        elif key not in AutofocusConfig.model_fields:
            raise ValueError(f"unknown setting {key!r}{closest(key)}; `autofocus config show` lists them")
        else:
            out[key] = value
    for group, name, value in loose:
        if name not in GROUPS[group].model_fields and name not in LEGACY_SETTINGS:
            raise ValueError(f"unknown setting {group}.{name}{closest(name)}; `autofocus config show` lists them")
        target = out.setdefault(group, {})
        if not isinstance(target, dict):
            raise ValueError(f"setting {group}.{name} given, but {group} is not a group of settings: {target!r}")
        target[name] = value
    return out


def closest(name: str) -> str:
    """`` (did you mean 'alpha'?)`` for the known setting most like ``name``, or nothing."""
    known = [*setting_groups(), *GROUPS, *AutofocusConfig.model_fields, *LMConfig.model_fields]
    found = difflib.get_close_matches(name.rpartition(".")[2], known, n=1, cutoff=0.7)
    return f" (did you mean {found[0]!r}?)" if found else ""


def invalid(exc: ValidationError, where: str) -> ValueError:
    """A config's validation errors as one line: ``where`` (a file), then each setting by its dotted
    name and what is wrong with it, an unknown one with the closest known name."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            parts.append(f"unknown setting {loc}{closest(loc)}")
        else:
            msg = re.sub(r"^Value error, ", "", err["msg"])
            parts.append(f"{loc}: {msg}" if loc else msg)
    return ValueError(f"{where}: " + "; ".join(parts))


def flat_settings(data: Mapping[str, Any]) -> dict[str, Any]:
    """A config dump, grouped or flat, as flat names -> values: the form run identities and tuning
    studies compare, unchanged by how a file groups its settings."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key in GROUPS and isinstance(value, Mapping):
            out.update(value)
        else:
            out[key] = value
    return out


class AutofocusConfig(BaseModel):
    """Every setting of a program, grouped by the step it changes; see the module docstring."""

    steps: Steps = Field(
        Steps.ALL, description="the steps that run: 1-8, or the paper's ablations 1+7 (type + vector search), 1-5 "
        "(grounded nodes only), 1-6, 1-7 (no reranking, no step-8 LM calls)"
    )
    trained: str | None = Field(
        None, description="folder of the models `autofocus adapt` trained on this knowledge base (a reranker for "
        "step 8, a type reader for step 1); a program file made by adapt names its own"
    )
    query: QueryConfig = Field(default_factory=QueryConfig, description=QueryConfig.__doc__)
    grounding: GroundingConfig = Field(default_factory=GroundingConfig, description=GroundingConfig.__doc__)
    merge: MergeConfig = Field(default_factory=MergeConfig, description=MergeConfig.__doc__)
    rerank: RerankConfig = Field(default_factory=RerankConfig, description=RerankConfig.__doc__)
    index: IndexConfig = Field(default_factory=IndexConfig, description=IndexConfig.__doc__)
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig, description=RuntimeConfig.__doc__)
    systems: SystemsConfig = Field(default_factory=SystemsConfig, description=SystemsConfig.__doc__)
    experimental: ExperimentalConfig = Field(default_factory=ExperimentalConfig, description=ExperimentalConfig.__doc__)

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _grouped(cls, data: Any) -> Any:
        """Flat (``{"alpha": 0.5}``) and dotted (``{"merge.alpha": 0.5}``) names into their groups; an
        unknown name is an error at the top as in a group."""
        return nest_settings(data) if isinstance(data, Mapping) else data

    @field_validator("steps", mode="before")
    @classmethod
    def _check_steps(cls, v: Any) -> Steps:
        allowed = [s.value for s in Steps]
        if v not in allowed:
            raise ValueError(f"steps must be one of {sorted(allowed)} (the paper's ablations), got {v!r}")
        return Steps(v)

    @property
    def doc_variants(self) -> list[str]:
        """The document variants whose indexes these steps search: step 7's alone for ``1+7``."""
        step7 = self.merge.doc_variant_step7
        used = {self.grounding.doc_variant_step4, self.merge.doc_variant_step6, step7} if self.steps.grounds else {step7}
        return sorted(used)

    def updated(self, settings: Mapping[str, Any]) -> AutofocusConfig:
        """A copy with ``settings`` (flat, dotted or grouped names) applied and validated; an unknown
        name raises ``ValueError``. A group's settings not named keep their values."""
        data = self.model_dump()
        for key, value in nest_settings(settings).items():
            if key in GROUPS and isinstance(value, Mapping):
                data[key].update(value)
            else:
                data[key] = value
        try:
            return AutofocusConfig.model_validate(data)
        except ValidationError as exc:
            raise invalid(exc, "settings") from None

    def flat(self, mode: Literal["python", "json"] = "python") -> dict[str, Any]:
        """Flat setting name -> value (``flat_settings`` of this config's dump)."""
        return flat_settings(self.model_dump(mode=mode))

    def save(self, path: Path) -> None:
        path.write_text(self.model_dump_json(indent=2))

    @classmethod
    def load(cls, path: Path) -> AutofocusConfig:
        """The config in a JSON file; ``ValueError`` in one line naming the file and what is wrong."""
        try:
            return cls.model_validate(json.loads(Path(path).read_text()))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not JSON ({exc})") from None
        except ValidationError as exc:
            raise invalid(exc, str(path)) from None


@dataclass(frozen=True)
class Setting:
    """One setting as ``autofocus config show`` lists it."""

    group: str  # "" for the top level
    name: str  # the flat name; ``lm.default`` for the LM's fields
    value: Any
    default: Any
    description: str


def describe(cfg: AutofocusConfig) -> Iterator[Setting]:
    """Every setting of ``cfg`` with its default and description, group by group (the LM's fields
    one by one)."""

    def fields(model: BaseModel, group: str, prefix: str = "") -> Iterator[Setting]:
        for name, info in type(model).model_fields.items():
            value = getattr(model, name)
            if isinstance(value, BaseModel):
                yield from fields(value, group, f"{prefix}{name}.")
            else:
                default = info.get_default(call_default_factory=True)
                yield Setting(group, prefix + name, value, default, info.description or "")

    top = {n: i for n, i in AutofocusConfig.model_fields.items() if n not in GROUPS}
    for name, info in top.items():
        yield Setting("", name, getattr(cfg, name), info.get_default(call_default_factory=True), info.description or "")
    for group in GROUPS:
        yield from fields(getattr(cfg, group), group)
