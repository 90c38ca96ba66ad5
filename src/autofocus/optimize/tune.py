"""The tuning study: AF-Retriever's non-LLM settings searched with Optuna over step 1-2 outputs computed once
(paper A.6); what it searches is ``optimize.tune_space``, the kept LLM outputs ``optimize.llm_outputs``.

Why trials are cheap: the target type (step 1) and the Cypher or typed query (step 2) do not depend
on any tuned setting, so they are asked once per question and kept in ``llm_outputs.jsonl``
(reused by every trial and by later runs of the same study); a trial then runs only steps 3-7
(``AutofocusRetriever.retrieve``: parsing, grounding, vector search; no LM) and scores the
pre-rerank list, as the paper's A.6 tables do with hit@20 and recall@20. Only with
``rerank=True`` does a trial call the reranker (step 8), which makes ``k`` and the reranker worth
tuning and LLM calls a meaningful second objective.

Studies live in Optuna storage (SQLite file by default, any RDB URL to share one study between
machines) and resume: ``run_study(..., n_trials=N)`` tops the study up to N complete trials, it
never adds N more. A study remembers what it tunes (metric, space, split, LM outputs, base config)
and refuses to mix in trials of anything else.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from optuna.study import MaxTrialsCallback
from optuna.trial import FrozenTrial, TrialState

from autofocus.config import AutofocusConfig
from autofocus.evaluation.fusion_fit import FusionCase, case_from_trace
from autofocus.metrics import DEFAULT_KS, Candidates, compute_metrics, dspy_metric, prepare
from autofocus.optimize.llm_outputs import LLMOutput
from autofocus.optimize.tune_space import DEFAULT_PARAMS, config_with, in_space, suggest
from autofocus.trace import Trace
from autofocus.usage import map_concurrently

STUDY_DB_FILE = "study.db"
BEST_CONFIG_FILE = "best_config.json"
SECOND_OBJECTIVES = ("none", "latency", "lm_calls")
ALPHA_GRID: tuple[float, ...] = tuple(round(a, 2) for a in np.linspace(0.0, 1.0, 21))
L_MAX_GRID: tuple[int, ...] = (0, 1, 2, 3, 10, 33, 100, 333)  # paper Table 19; 0 = no grounding (steps 1+7)
PRIOR_WEIGHT_GRID: tuple[float, ...] = (0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)  # 0 = the judge's own order


# --- evaluating one config ------------------------------------------------------------------------------


@dataclass
class Evaluation:
    """Means over the questions of one config: metrics, grounding (paper Table 19), cost."""

    metrics: dict[str, float]
    grounding: dict[str, float | None]
    seconds: float  # per question, steps 3-7 (and 8 when reranking)
    lm_calls: float  # per question: the cached steps 1-2 plus any reranking
    n: int
    per_question: dict[str, list[float]] = field(default_factory=dict, repr=False)  # metric -> values, in item order
    fusion_cases: list[FusionCase | None] = field(default_factory=list, repr=False)  # step 8's scores, when reranked

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.metrics,
            **self.grounding,
            "seconds": self.seconds,
            "lm_calls": self.lm_calls,
            "n": self.n,
        }


def metric_ks(metric: str) -> tuple[int, ...]:
    """Cut-offs to compute: the usual ones and the objective's (validated like DSPy metrics)."""
    dspy_metric(metric)  # raises a clear ValueError for an unknown name
    extra = int(metric.split("@")[1]) if "@" in metric else 1
    return tuple(sorted({*DEFAULT_KS, extra}))


class ConfigEvaluator:
    """Scores any config on a question set from the cached step 1-2 outputs.

    Args:
        program: an ``AutofocusRetriever`` (its ``retrieve`` runs steps 3-7 for a given config).
        items: questions with ``id``, ``query`` and ``answer_ids``.
        outputs: step 1-2 outputs by question id.
        candidates: the SKB's candidate ids (STaRK metric semantics).
        ks: metric cut-offs.
        make_program: builds a program for a config; needed only to rerank (step 8 per config).
        concurrency: questions reranked at once (pre-rerank trials run in the calling thread).
    """

    def __init__(
        self,
        program: Any,
        items: Sequence[Any],
        outputs: Mapping[int, LLMOutput],
        candidates: Candidates | None,
        ks: Sequence[int] = DEFAULT_KS,
        make_program: Callable[[AutofocusConfig], Any] | None = None,
        concurrency: int = 1,
    ) -> None:
        missing = [int(it.id) for it in items if int(it.id) not in outputs]
        if missing:
            raise ValueError(f"no step 1-2 outputs for question(s) {missing[:10]}")
        self.program = program
        self.items = list(items)
        self.outputs = outputs
        self.candidates = candidates
        self.ks = tuple(ks)
        self.make_program = make_program
        self.concurrency = concurrency

    def _one(self, program: Any, cfg: AutofocusConfig, item: Any, rerank: bool) -> dict[str, Any]:
        out = self.outputs[int(item.id)]
        trace = Trace(system=program.system, question=item.query)
        start = time.perf_counter()
        found = program.retrieve(item.query, out.target_type, out.cypher, cfg, trace)
        ranked = found.ids
        fusion = None
        if rerank:
            evidence = program.evidence(found, cfg, trace)
            ranked = program.rerank(item.query, out.target_type, found, evidence, cfg, trace)
            fusion = case_from_trace(trace.data, item.answer_ids)
        seconds = time.perf_counter() - start
        grounded, gold = prepare(found.grounded, item.answer_ids, self.candidates)
        hits = int(np.isin(gold, grounded).sum())
        return {
            "metrics": compute_metrics(ranked, item.answer_ids, self.candidates, ks=self.ks),
            "processed": found.grounding is not None,
            "nonempty": grounded.size > 0,
            "precision": hits / grounded.size if grounded.size else None,
            "specificity": hits / gold.size if gold.size else None,
            "seconds": seconds,
            "lm_calls": out.lm_calls + (trace.steps["8_rerank"].lm_calls if "8_rerank" in trace.steps else 0),
            "fusion": fusion,
        }

    def __call__(self, cfg: AutofocusConfig, rerank: bool = False) -> Evaluation:
        if rerank:
            if self.make_program is None:
                raise ValueError("reranking trials need make_program (a program per config)")
            program = self.make_program(cfg)
            rows = map_concurrently(
                lambda it: self._one(program, cfg, it, True), self.items, self.concurrency
            )
        else:
            rows = [self._one(self.program, cfg, it, False) for it in self.items]
        names = list(rows[0]["metrics"]) if rows else []
        metrics = {m: float(np.mean([r["metrics"][m] for r in rows])) for m in names}
        processed = [r for r in rows if r["processed"]]
        precision = [r["precision"] for r in processed if r["precision"] is not None]
        specificity = [r["specificity"] for r in processed if r["specificity"] is not None]
        n = len(rows)
        grounding = {
            "processed": len(processed) / n if n else None,
            "precision": float(np.mean(precision)) if precision else None,
            "specificity": float(np.mean(specificity)) if specificity else None,
            "nonempty": sum(r["nonempty"] for r in rows) / n if n else None,
        }
        return Evaluation(
            metrics=metrics,
            grounding=grounding,
            seconds=float(np.mean([r["seconds"] for r in rows])) if rows else 0.0,
            lm_calls=float(np.mean([r["lm_calls"] for r in rows])) if rows else 0.0,
            n=n,
            per_question={m: [float(r["metrics"][m]) for r in rows] for m in names},
            fusion_cases=[r["fusion"] for r in rows] if rerank else [],
        )


# --- the study ------------------------------------------------------------------------------------------


class StudyMismatchError(RuntimeError):
    """The named study tunes something else; the message lists the differences."""


@dataclass
class StudySpec:
    """What a study optimises; stored in the study and checked on every resume."""

    metric: str = "hit@20"
    second: str = "none"
    params: list[str] = field(default_factory=lambda: list(DEFAULT_PARAMS))
    l_max_range: tuple[int, int] = (1, 300)
    rerank: bool = False
    seed: int = 0
    identity: dict[str, Any] = field(default_factory=dict)  # split, questions, LM outputs, base config

    def __post_init__(self) -> None:
        self.metric = self.metric.strip().lower()
        metric_ks(self.metric)
        if self.second not in SECOND_OBJECTIVES:
            raise ValueError(
                f"second objective must be one of {', '.join(SECOND_OBJECTIVES)}, got {self.second!r}"
            )
        if self.second == "lm_calls" and not self.rerank:
            raise ValueError(
                "pre-rerank trials make the same LLM calls whatever the settings (steps 1-2, asked once): "
                "use --second lm_calls with --rerank-trials, or --second latency"
            )
        self.l_max_range = tuple(self.l_max_range)  # type: ignore[assignment]

    @property
    def multi(self) -> bool:
        return self.second != "none"

    @property
    def directions(self) -> list[str]:
        return ["maximize", "minimize"] if self.multi else ["maximize"]

    def stored(self) -> dict[str, Any]:
        data = asdict(self)
        data["l_max_range"] = list(self.l_max_range)
        return data


def default_storage(out_dir: Path) -> str:
    return f"sqlite:///{(Path(out_dir) / STUDY_DB_FILE).resolve()}"


def _diff(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list[str]:
    lines: list[str] = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            lines += _diff(a, b, f"{prefix}{key}.")
        elif a != b:
            lines.append(f"{prefix}{key}: {a!r} -> {b!r}")
    return lines


def make_storage(url: str) -> str | optuna.storages.RDBStorage:
    """The storage for ``url``; a SQLite file gets WAL journaling and ``synchronous=NORMAL``.

    Optuna commits each suggested value on its own; with SQLite's default rollback journal every
    commit waits for an fsync (0.22 s of storage per 8-parameter trial measured here, 0.03 s with
    WAL). WAL keeps the file consistent and shareable by processes on one machine; machines that
    share a study use a server database URL instead.
    """
    if not url.startswith("sqlite:"):
        return url
    from sqlalchemy import event

    storage = optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": {"timeout": 60}})

    def pragmas(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    event.listen(storage.engine, "connect", pragmas)
    storage.engine.dispose()  # connections opened while creating the tables lack the pragmas
    return storage


def open_study(name: str, storage: str, spec: StudySpec) -> optuna.Study:
    """Create the study, or load it after checking that it tunes the same thing (seeded TPE either way)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=spec.seed)
    study = optuna.create_study(
        study_name=name,
        storage=make_storage(storage),
        directions=spec.directions,
        sampler=sampler,
        load_if_exists=True,
    )
    stored = study.user_attrs.get("spec")
    wanted = json.loads(json.dumps(spec.stored()))
    if stored is None:
        if study.trials:
            raise StudyMismatchError(f"study {name!r} in {storage} was not made by `autofocus tune`")
        study.set_user_attr("spec", wanted)
        with warnings.catch_warnings():  # experimental since Optuna 3.2, still so in 5.0
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names([spec.metric, spec.second] if spec.multi else [spec.metric])
    else:
        diff = _diff(stored, wanted)
        if diff:
            raise StudyMismatchError(
                f"study {name!r} in {storage} tunes something else; refusing to mix trials:\n  "
                + "\n  ".join(diff)
                + "\nUse another --study name (or another --storage)."
            )
    return study


def complete_trials(study: optuna.Study) -> list[FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))


def run_study(
    study: optuna.Study,
    spec: StudySpec,
    evaluate: ConfigEvaluator,
    base: AutofocusConfig,
    n_trials: int,
    callback: Callable[[optuna.Study, FrozenTrial], None] | None = None,
) -> int:
    """Top the study up to ``n_trials`` complete trials; returns how many ran now.

    A new study's first trial is the base config (where it lies inside the space), so the
    defaults are a measured point and TPE starts from them. Several processes may run this on
    one storage: ``MaxTrialsCallback`` stops each once the study holds ``n_trials`` complete ones.
    """
    done = len(complete_trials(study))
    remaining = n_trials - done
    if remaining <= 0:
        return 0
    if not study.trials:
        start = in_space(base, spec.params, spec.l_max_range)
        if start:
            study.enqueue_trial(start)

    def objective(trial: optuna.Trial) -> float | tuple[float, float]:
        params = suggest(trial, spec.params, spec.l_max_range)
        ev = evaluate(config_with(base, params), rerank=spec.rerank)
        trial.set_user_attr("eval", ev.as_dict())
        value = ev.metrics[spec.metric]
        if spec.second == "latency":
            return value, ev.seconds
        if spec.second == "lm_calls":
            return value, ev.lm_calls
        return value

    callbacks = [MaxTrialsCallback(n_trials, states=(TrialState.COMPLETE,))]
    if callback is not None:
        callbacks.append(callback)
    study.optimize(objective, n_trials=remaining, callbacks=callbacks)
    return len(complete_trials(study)) - done


def pareto_front(study: optuna.Study) -> list[FrozenTrial]:
    """Non-dominated trials (one objective: the best trial), best first objective first."""
    if len(study.directions) == 1:
        return [study.best_trial] if complete_trials(study) else []
    return sorted(study.best_trials, key=lambda t: (-t.values[0], t.values[1], t.number))


def best_trial(study: optuna.Study) -> FrozenTrial:
    """The best trial: highest metric; with two objectives, the Pareto trial with the highest metric
    (ties: the cheaper, then the earlier)."""
    front = pareto_front(study)
    if not front:
        raise ValueError("the study has no complete trial yet")
    return front[0]


def importances(study: optuna.Study) -> dict[str, float]:
    """Optuna's parameter importances for the first objective ({} with too few trials or one value)."""
    trials = complete_trials(study)
    if len(trials) < 4 or len({t.values[0] for t in trials}) < 2:
        return {}
    try:
        # the evaluator ranks what leads to *low* target values (and warns so): negate the maximised metric
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return dict(optuna.importance.get_param_importances(study, target=lambda t: -t.values[0]))
    except (ValueError, RuntimeError):
        return {}


# --- sensitivity sweeps (paper Fig. 2 and Table 19) --------------------------------------------------------


def sweep_alpha(
    evaluate: ConfigEvaluator, cfg: AutofocusConfig, grid: Sequence[float] = ALPHA_GRID
) -> list[dict[str, Any]]:
    """Pre-rerank metrics of ``cfg`` with alpha varied (the other settings as in ``cfg``)."""
    return [{"alpha": float(a), **evaluate(config_with(cfg, {"alpha": float(a)})).as_dict()} for a in grid]


def sweep_prior_weight(
    evaluate: ConfigEvaluator, cfg: AutofocusConfig, grid: Sequence[float] = PRIOR_WEIGHT_GRID
) -> list[dict[str, Any]]:
    """Reranked metrics with step 8's prior fusion at each weight (the other settings as in ``cfg``):
    how far the judge should be trusted over steps 1-7's order. Step 8's LM calls are the same at
    every weight, so past the first point they come from the LM cache."""
    return [
        {"rerank_prior_weight": float(w),
         **evaluate(config_with(cfg, {"rerank_fusion": "prior", "rerank_prior_weight": float(w)}), rerank=True).as_dict()}
        for w in grid
    ]  # fmt: skip


def sweep_l_max(
    evaluate: ConfigEvaluator, cfg: AutofocusConfig, grid: Sequence[int] = L_MAX_GRID
) -> list[dict[str, Any]]:
    """Table 19: per ``l_max``, grounding precision/specificity, the grounded strand alone
    (steps 1-6 with all k slots) and the pre-rerank pipeline (steps 1-7); 0 = no grounding (1+7)."""
    rows: list[dict[str, Any]] = []
    for l_max in grid:
        if l_max == 0:
            full = evaluate(config_with(cfg, {"steps": "1+7"}))
            rows.append({"l_max": 0, **full.grounding, "steps1-6": {}, "steps1-7": full.metrics})
            continue
        at = config_with(cfg, {"l_max": int(l_max)})
        strand = evaluate(config_with(at, {"steps": "1-6", "alpha": 1.0}))
        full = evaluate(at)
        rows.append(
            {"l_max": int(l_max), **strand.grounding, "steps1-6": strand.metrics, "steps1-7": full.metrics}
        )
    return rows


def flat(row: Mapping[str, Any]) -> dict[str, Any]:
    """One-level dict for CSV/markdown (nested metric dicts become ``steps1-6 hit@20`` etc.)."""
    out: dict[str, Any] = {}
    for k, v in row.items():
        if isinstance(v, Mapping):
            out.update({f"{k} {m}": x for m, x in v.items()})
        else:
            out[k] = v
    return out


def fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def write_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], stem: Path) -> tuple[Path, Path]:
    """``stem.csv`` and ``stem.md`` with the given columns."""
    import csv

    csv_path, md_path = stem.with_suffix(".csv"), stem.with_suffix(".md")
    with csv_path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(columns)
        for r in rows:
            writer.writerow(["" if r.get(c) is None else r.get(c) for c in columns])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in columns) + " |" for r in rows]
    md_path.write_text("\n".join(lines) + "\n")
    return csv_path, md_path
