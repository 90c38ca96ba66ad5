"""Named systems and presets: ``afr``, ``afr:steps=1-7``, ``afr:reranker=pairwise,alpha=0.5``, ...

A spec is ``NAME[:key=value,...]``; the keys override ``AutofocusConfig`` settings by flat name
(``alpha``) or grouped (``merge.alpha``), so every preset is an ordinary, serialisable config plus a
program class.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import dspy

from autofocus.config import AutofocusConfig, nest_settings

if TYPE_CHECKING:
    from autofocus.kb import KnowledgeBaseLike

ProgramFactory = Callable[["KnowledgeBaseLike", AutofocusConfig, str], dspy.Module]

_SYSTEMS: dict[str, tuple[ProgramFactory, dict[str, object]]] = {}


def register(name: str, factory: ProgramFactory, **defaults: object) -> None:
    _SYSTEMS[name] = (factory, defaults)


def systems() -> list[str]:
    _load_builtin()
    return sorted(_SYSTEMS)


def parse_spec(spec: str) -> tuple[str, dict[str, str]]:
    name, _, rest = spec.partition(":")
    overrides: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        key, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"bad preset option {part!r} in {spec!r}: expected key=value")
        overrides[key.strip()] = value.strip()
    return name.strip(), overrides


def resolve_config(spec: str, base: AutofocusConfig | None = None) -> tuple[str, AutofocusConfig]:
    """The system name and the config after applying the preset's defaults and the spec's overrides."""
    _load_builtin()
    name, overrides = parse_spec(spec)
    if name not in _SYSTEMS:
        raise ValueError(f"unknown system {name!r}; known: {', '.join(sorted(_SYSTEMS))}")
    try:
        nest_settings(overrides)
    except ValueError as e:
        raise ValueError(f"{e} (in {spec!r})") from None
    return name, (base or AutofocusConfig()).updated(_SYSTEMS[name][1]).updated(overrides)


# the LM step (``LMConfig`` field) of each LLM sub-module, by its attribute name on the program
STEP_OF: dict[str, str] = {
    "target_type": "target_type", "cypher": "cypher", "query_graph": "cypher", "triplets": "cypher",
    "router": "cypher", "commenter": "cypher", "validator": "rerank", "reranker": "rerank",
}  # fmt: skip


def apply_lms(program: dspy.Module, config: AutofocusConfig) -> None:
    """Give each predictor the LM its step is configured with (``config.runtime.lm``), capped per LM.

    A predictor under an attribute ``STEP_OF`` does not know raises ``ValueError``: left alone it
    would run on whatever LM happens to be configured globally, or none.
    """
    from autofocus.lm import get_lm
    from autofocus.usage import limit_lm_concurrency

    predictors = program.named_predictors()
    unknown = sorted({name for name, _ in predictors if name.split(".")[0] not in STEP_OF})
    if unknown:
        raise ValueError(
            f"{type(program).__name__} has LLM predictors with no LM step: {', '.join(unknown)}; "
            f"add their attribute to autofocus.program.systems.registry.STEP_OF (known: {', '.join(STEP_OF)})"
        )
    limit_lm_concurrency(config.runtime.lm_in_flight)
    lms: dict[str, dspy.LM] = {}
    for name, predictor in predictors:
        spec = config.runtime.lm.for_step(STEP_OF[name.split(".")[0]])
        if spec not in lms:
            lms[spec] = get_lm(spec, **config.runtime.lm.client_options())
        predictor.lm = lms[spec]


def build_program(spec: str, kb: KnowledgeBaseLike, config: AutofocusConfig | None = None, *, with_lms: bool = True) -> dspy.Module:
    """Build a system by spec; ``with_lms=False`` leaves LMs to ``dspy.configure`` (tests, scripted LMs)."""
    name, cfg = resolve_config(spec, config)
    factory = _SYSTEMS[name][0]
    program = factory(kb, cfg, spec)
    if with_lms:
        apply_lms(program, cfg)
    return program


# what autofocus adds to AF-Retriever's grounded strand, switched off (the papers' methods as published)
PAPER: dict[str, object] = {
    "repairs": [], "relax": [], "exact_name_only": False, "alpha_rule": "fixed", "step7_types": "step1",
    "target_type_scoring": "generate", "target_type_inputs": [], "constrain": "off", "prompt_schema": "declared",
    "rerank_evidence": False, "merge_rule": "block", "rerank_depth": None, "named_last": False,
}  # fmt: skip


def _load_builtin() -> None:
    if _SYSTEMS:
        return
    from autofocus.program.systems.afr import AutofocusRetriever
    from autofocus.program.systems.baselines import BM25Retriever, VSSRetriever
    from autofocus.program.systems.focused_retriever import FocusedRetriever
    from autofocus.program.systems.four_step_focus import FourStepFocus
    from autofocus.program.systems.hybgrag import HybGRAG

    def afr(kb: KnowledgeBaseLike, cfg: AutofocusConfig, spec: str) -> dspy.Module:
        return AutofocusRetriever(kb, cfg, system=spec)

    register("afr", afr)
    # AF-Retriever as the paper has it (no repair, relaxation, type scoring, constrained decoding, graph-derived
    # prompts, evidence-weighted slots or grounding evidence in step 8), its ablations (paper Table 5), rerankers (Table 6) and the authors' code
    register("afr-paper", afr, **PAPER)
    for steps in ("1+7", "1-5", "1-6", "1-7"):
        register(f"afr-steps{steps}", afr, steps=steps)
    for method in ("pointwise", "listwise", "pairwise", "tournament"):
        register(f"afr-{method}", afr, reranker=method)
    register("afr-code", afr, l_max=3, expansion="code", step6_order="round", step7_exclude="none", alpha=0.65,
             reranker="listwise", **{**PAPER, "exact_name_first": False})
    # the other systems of the seed papers, with their papers' defaults
    register("bm25", lambda kb, cfg, spec: BM25Retriever(kb, cfg, system=spec), reranker="none")
    register("vss", lambda kb, cfg, spec: VSSRetriever(kb, cfg, system=spec), reranker="none")
    register("vss-rerank", lambda kb, cfg, spec: VSSRetriever(kb, cfg, system=spec), reranker="pointwise",
             rerank_depth=None)
    register("4stepfocus", lambda kb, cfg, spec: FourStepFocus(kb, cfg, system=spec), reranker="pointwise",
             edge_mode="lenient", rerank_depth=None)
    register("focusedretriever", lambda kb, cfg, spec: FocusedRetriever(kb, cfg, system=spec), reranker="pairwise",
             alpha=0.6, l_max=1_500_000, expansion="paper", **PAPER)
    register("hybgrag", lambda kb, cfg, spec: HybGRAG(kb, cfg, system=spec), reranker="none")
