"""What ``autofocus tune`` searches: the tunable settings of AF-Retriever (steps 3-8, never an LLM step's
prompt), their ranges, the study's names for them (flat) and a trial's config and system spec."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import optuna

from autofocus.config import AutofocusConfig, setting_groups


@dataclass(frozen=True)
class Param:
    """One tunable ``AutofocusConfig`` field: categorical ``choices``, or a numeric range."""

    kind: str  # "float" | "int" | "cat"
    choices: tuple[Any, ...] = ()
    low: float = 0.0
    high: float = 1.0
    log: bool = False
    step: int | None = None
    rerank_only: bool = False  # matters only when trials rerank


BOTH_VARIANTS = ("text", "text+rel")
SPACE: dict[str, Param] = {
    "alpha": Param("float", low=0.0, high=1.0),
    "l_max": Param("int", low=1, high=300, log=True),
    "expansion": Param("cat", ("paper", "code")),
    "type_mode": Param("cat", ("strict", "lenient")),
    "edge_mode": Param("cat", ("strict", "lenient")),
    "doc_variant_step4": Param("cat", BOTH_VARIANTS),
    "doc_variant_step6": Param("cat", BOTH_VARIANTS),
    "doc_variant_step7": Param("cat", BOTH_VARIANTS),
    "step6_order": Param("cat", ("vss", "round")),
    "step7_exclude": Param("cat", ("grounded", "none")),
    "exact_name_first": Param("cat", (True, False)),
    "exact_name_only": Param("cat", (True, False)),
    "alpha_rule": Param("cat", ("fixed", "evidence")),
    "alpha_relaxed": Param("float", low=0.0, high=1.0),
    "alpha_large": Param("float", low=0.0, high=1.0),
    "alpha_large_size": Param("int", low=20, high=100_000, log=True),
    "alpha_disagree": Param("float", low=0.0, high=1.0),
    "step7_types": Param("cat", ("step1", "agree")),
    "merge_rule": Param("cat", ("block", "score", "evidence")),
    "grounded_bonus": Param("float", low=0.0, high=0.5),
    "k": Param("int", low=5, high=50, step=5, rerank_only=True),
    "reranker": Param("cat", ("pointwise", "listwise", "pairwise", "tournament"), rerank_only=True),
    "rerank_keep_block": Param("cat", (False, True), rerank_only=True),
    "rerank_depth": Param("int", low=5, high=50, step=5, rerank_only=True),
    "rerank_fusion": Param("cat", ("none", "rrf", "prior"), rerank_only=True),
    "rerank_fusion_k": Param("int", low=1, high=100, log=True, rerank_only=True),
    "rerank_prior_weight": Param("float", low=0.0, high=3.0, rerank_only=True),
    "class_type_floor": Param("float", low=0.0, high=1.0),
}
DEFAULT_PARAMS: tuple[str, ...] = (
    "alpha", "l_max", "expansion", "type_mode", "edge_mode",
    "doc_variant_step4", "doc_variant_step6", "doc_variant_step7",
    "alpha_rule", "alpha_relaxed", "alpha_large", "alpha_disagree",
)  # fmt: skip


def parse_params(text: str | None, rerank: bool) -> list[str]:
    """The tuned settings from a comma list, by flat (``alpha``) or grouped name (``merge.alpha``);
    studies name them flat (None: the default list, plus ``k`` when trials rerank)."""
    if text is None or not text.strip():
        return [*DEFAULT_PARAMS, *(["k"] if rerank else [])]
    groups = setting_groups()
    names = [_flat_name(p.strip(), groups) for p in text.split(",") if p.strip()]
    unknown = [n for n in names if n not in SPACE]
    if unknown:
        raise ValueError(f"unknown tunable setting(s) {unknown}; choose from {', '.join(SPACE)}")
    needs_rerank = [n for n in names if SPACE[n].rerank_only]
    if needs_rerank and not rerank:
        raise ValueError(
            f"{', '.join(needs_rerank)} only change(s) step 8, which pre-rerank trials do not run: "
            "add --rerank-trials or leave them out"
        )
    return list(dict.fromkeys(names))


def _flat_name(name: str, groups: Mapping[str, str]) -> str:
    group, dot, flat = name.partition(".")
    return flat if dot and groups.get(flat) == group else name


def parse_range(text: str) -> tuple[int, int]:
    """``"1:300"`` -> ``(1, 300)``."""
    lo, sep, hi = text.partition(":")
    try:
        low, high = int(lo), int(hi)
    except ValueError:
        low = high = 0
    if not sep or not 1 <= low < high:
        raise ValueError(f"expected LOW:HIGH with 1 <= LOW < HIGH, got {text!r}")
    return low, high


def suggest(trial: optuna.Trial, names: Sequence[str], l_max_range: tuple[int, int]) -> dict[str, Any]:
    """Ask the trial for a value of each tuned setting."""
    out: dict[str, Any] = {}
    for name in names:
        p = SPACE[name]
        if p.kind == "cat":
            out[name] = trial.suggest_categorical(name, list(p.choices))
        elif p.kind == "float":
            out[name] = trial.suggest_float(name, p.low, p.high, log=p.log)
        else:
            low, high = l_max_range if name == "l_max" else (int(p.low), int(p.high))
            out[name] = trial.suggest_int(name, low, high, log=p.log, step=p.step or 1)
    return out


def in_space(base: AutofocusConfig, names: Sequence[str], l_max_range: tuple[int, int]) -> dict[str, Any]:
    """The base config's values of the tuned settings that lie inside the space (to enqueue as trial 0)."""
    out: dict[str, Any] = {}
    values = base.flat()
    for name in names:
        p, value = SPACE[name], values[name]
        low, high = l_max_range if name == "l_max" else (p.low, p.high)
        step_ok = p.step is None or (value - low) % p.step == 0
        if (p.kind == "cat" and value in p.choices) or (p.kind != "cat" and low <= value <= high and step_ok):
            out[name] = value
    return out


def config_with(base: AutofocusConfig, params: Mapping[str, Any]) -> AutofocusConfig:
    """``base`` with a trial's values; the study names them flat (``alpha``), the config groups them."""
    return base.updated(params)


def system_spec(name: str, cfg: AutofocusConfig) -> str:
    """A registry spec that builds preset ``name`` with exactly ``cfg``.

    Building applies the preset's defaults over the config it is given (``afr-code`` sets alpha,
    l_max, ...), which would undo tuned values; the spec repeats those fields as options. The
    name stays, so saved programs of that preset still load.
    """
    from autofocus.program.systems.registry import resolve_config

    again, wanted = resolve_config(name, cfg)[1].flat(), cfg.flat()
    changed = [k for k in wanted if again[k] != wanted[k]]
    spec = name + (":" + ",".join(f"{k}={wanted[k]}" for k in changed) if changed else "")
    if resolve_config(spec, cfg)[1] != cfg:
        raise ValueError(f"cannot express this config as options of system {name!r}: {', '.join(changed)}")
    return spec
