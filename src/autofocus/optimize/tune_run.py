"""A whole tuning run of AF-Retriever's settings: the study, its tables and plots, confirmation runs.

``autofocus tune`` and ``autofocus.tune`` are thin wrappers over ``run_tuning``; the Optuna study and
the cached step 1-2 outputs it runs on are ``optimize.tune``.

Output folder (default ``runs/tune-<study>``): ``study.db`` (unless ``storage`` is given),
``llm_outputs.jsonl`` (steps 1-2 per question, reused by every trial and rerun),
``best_config.json`` (for ``autofocus.open(config=...)`` and ``ask``/``eval --config``),
``summary.md``/``summary.json``, ``alpha.*``/``l_max.*`` tables (CSV, markdown) with
``alpha.png``/``l_max.png``, ``history.png``, ``importance.png``, and ``confirm-<split>-<config
hash>/`` evaluation runs with the reranker. Step-8 studies (``rerank_trials``) with a pointwise
judge also write ``prior_weight.*`` (the reranked metrics at each fusion weight) and report the
likelihood fit of that weight (``evaluation.fusion_fit``).

Example:
    result = run_tuning("data/demo", AutofocusConfig(lm=LMConfig(default="local")), TuneOptions(trials=50))
    result.best_config.merge.alpha, result.tuned.metrics["hit@20"]
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from autofocus.config import AutofocusConfig
from autofocus.evaluation.fusion_fit import FusionFit, fit_prior_weight
from autofocus.evaluation.runner import without_waits
from autofocus.optimize import llm_outputs, tune_space
from autofocus.optimize import tune as tuning
from autofocus.options import EvalOptions, TuneOptions
from autofocus.progress import reporter_or_log

if TYPE_CHECKING:
    from autofocus.progress import Reporter

SHOWN_METRICS = ("hit@1", "hit@5", "hit@20", "recall@20", "mrr")
L_MAX_COLUMNS = ("l_max", "processed", "precision", "specificity", "nonempty",
                 "steps1-6 hit@20", "steps1-6 recall@20", "steps1-7 hit@20", "steps1-7 recall@20")  # fmt: skip


class TuningInterrupted(RuntimeError):
    """Ctrl-C during the study or a confirmation run; the message says how to resume."""


@dataclass
class TuningResult:
    """What a tuning run found: the study's best settings, the pre-rerank (or reranked) metrics of
    the base and the tuned config, the sensitivity tables and the confirmation runs."""

    out: Path
    study: str
    storage: str
    spec: tuning.StudySpec
    split: str
    questions: int
    base_config: AutofocusConfig
    best_config: AutofocusConfig
    best_trial: Any  # optuna.trial.FrozenTrial
    baseline: tuning.Evaluation
    tuned: tuning.Evaluation
    complete_trials: int
    trials_run: int
    seconds: float
    pareto_front: list[Any] = field(default_factory=list)
    l_max_rows: list[dict[str, Any]] = field(default_factory=list)
    prior_weight_rows: list[dict[str, Any]] = field(default_factory=list)  # step 8's fusion-weight sweep, if run
    importances: dict[str, float] = field(default_factory=dict)
    confirmed: dict[str, dict[str, Any]] = field(default_factory=dict)  # "tuned on val" -> metric means + run
    fusion_fit: FusionFit | None = None  # step 8's prior weight fitted by likelihood (step-8 studies)
    fit_used: bool = False  # the fit, not the search, set best_config's fusion

    @cached_property
    def gain(self) -> dict[str, Any]:
        """The tuned config against the defaults on the tuning split, paired per question (the
        objective; ``evaluation.statistics.paired_test``). Optimistic: this split chose the settings, so
        a gain within noise here means the study found nothing to trust."""
        from autofocus.evaluation.statistics import paired_test

        metric = self.spec.metric
        a, b = self.baseline.per_question.get(metric, []), self.tuned.per_question.get(metric, [])
        return {"metric": metric, **paired_test(np.asarray(a), np.asarray(b))}

    @property
    def shown_params(self) -> list[str]:
        """The settings this run chose: the study's, and step 8's fusion where the fit set it."""
        return [*self.spec.params, *(["rerank_fusion", "rerank_prior_weight"] if self.fit_used else [])]

    @property
    def best_config_file(self) -> Path:
        return self.out / tuning.BEST_CONFIG_FILE


def config_hash(cfg: AutofocusConfig) -> str:
    data = {k: v for k, v in without_waits(cfg.model_dump(mode="json")).items() if k != "concurrency"}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:8]


def run_tuning(
    skb: Path | str,
    config: AutofocusConfig | None = None,
    options: TuneOptions | None = None,
    *,
    reporter: Reporter | None = None,
    on_study_done: Callable[[TuningResult], None] | None = None,
) -> TuningResult:
    """Tune alpha, l_max, the expansion schedule, type/edge modes and document variants with Optuna.

    Steps 1-2 (LLM) run once per question and are cached in ``out``; each trial runs steps 3-7 only
    and scores the pre-rerank list (paper A.6), unless ``rerank_trials``. A rerun tops the study up
    to ``trials`` complete trials. The best settings go to ``best_config.json``; confirmation runs
    with the reranker (``confirm``) report the full metrics.

    Args:
        config: the base config (default: the saved program's, else the defaults); trial 0.
        options: the study (``TuneOptions``: system, program file, split, trials, storage, metric,
            params, ...).
        reporter: progress bars and status lines (``progress.Reporter``; None: warnings to the log).
        on_study_done: called with the result before the confirmation runs (to print it).

    Raises ``ValueError`` for bad options, ``optimize.tune.StudyMismatchError`` when the named study
    tunes something else, ``TuningInterrupted`` on Ctrl-C (rerun to resume).
    """
    from autofocus import runtime
    from autofocus.evaluation.program_runs import load_split
    from autofocus.index.store import skb_fingerprint
    from autofocus.metrics import as_candidates
    from autofocus.program.systems import registry
    from autofocus.program.systems.afr import AutofocusRetriever

    o = options or TuneOptions()
    system, program_file, split, trials, study, l_max_range = o.system, o.program_file, o.split, o.trials, o.study, o.l_max_range
    params, rerank_trials, test_split, limit, qa_dir = o.params, o.rerank_trials, o.test_split, o.limit, o.qa_dir
    report = reporter_or_log(reporter)
    say = report.note
    system, config = runtime.resolve_system(system, config, program_file)  # a program brings its system
    name, cfg = registry.resolve_config(system, config)
    spec = tuning.StudySpec(
        metric=o.metric,
        second=o.second,
        params=tune_space.parse_params(params if params is None or isinstance(params, str) else ",".join(params),
                                   rerank_trials),
        l_max_range=tune_space.parse_range(l_max_range) if isinstance(l_max_range, str) else tuple(l_max_range),
        rerank=rerank_trials,
        seed=o.seed,
    )  # fmt: skip
    fitted_away = {"rerank_fusion", "rerank_prior_weight"} & set(spec.params)
    if o.fit_prior_weight and (not rerank_trials or fitted_away):
        raise ValueError("--fit-prior-weight needs --rerank-trials and sets "
                         + ", ".join(sorted(fitted_away or {"rerank_fusion", "rerank_prior_weight"}))
                         + " itself: leave them out of --params")  # fmt: skip
    items = load_split(skb, split, qa_dir=qa_dir)[:limit]
    test_items = load_split(skb, test_split, qa_dir=qa_dir) if test_split else []
    out = Path(o.out) if o.out is not None else Path("runs") / f"tune-{study}"
    out.mkdir(parents=True, exist_ok=True)
    storage = o.storage or tuning.default_storage(out)

    kb = runtime.open_kb(skb, cfg.index.embedder, cfg.index.index_kind, cfg.index.doc_budget_tokens)

    def make_program(c: AutofocusConfig, lms: bool = True) -> Any:
        return runtime.assemble(tune_space.system_spec(name, c), kb, c, program_file=program_file, lms=lms)

    prog = make_program(cfg, lms=False)
    if not isinstance(prog, AutofocusRetriever):
        raise ValueError(f"tuning takes AF-Retriever presets; {system!r} is a {type(prog).__name__}")
    variants = {cfg.grounding.doc_variant_step4, cfg.merge.doc_variant_step6, cfg.merge.doc_variant_step7}
    if any(p.startswith("doc_variant") for p in spec.params):
        variants |= set(tune_space.BOTH_VARIANTS)
    for v in sorted(variants):  # opened (or built) once, before any trial
        kb.index(v)

    program_sha = None
    if program_file is not None:
        from autofocus.evaluation.runner import file_sha256

        program_sha = file_sha256(Path(program_file))
    identity = llm_outputs.llm_identity(name, cfg, skb_fingerprint(kb.skb), program_sha)
    cache = llm_outputs.LLMOutputCache(out / llm_outputs.LLM_OUTPUTS_FILE, identity)
    lms_attached: list[bool] = []

    def outputs_for(questions: list[Any], label: str) -> dict[int, llm_outputs.LLMOutput]:
        known = cache.load()
        missing = [q for q in questions if int(q.id) not in known or known[int(q.id)].query != q.query]
        if missing and not lms_attached:
            registry.apply_lms(prog, cfg)
            lms_attached.append(True)
        task, done = f"steps 1-2 ({label})", [len(questions) - len(missing)]

        def tick(_: Any) -> None:
            done[0] += 1
            report.advance(task, done[0], len(questions))

        if missing:
            report.advance(task, done[0], len(questions))
        got, asked = llm_outputs.fill_llm_outputs(prog, questions, cache, concurrency=cfg.runtime.concurrency, on_done=tick)
        failed = sum(llm_outputs.transient(got_one) for got_one in got.values())
        say(
            f"Steps 1-2 on {label}: {len(questions) - asked} cached, {asked} asked now"
            + (f", {failed} LM failures (asked again next run)" if failed else "")
            + (f" ({cache.other_identities} cached lines of other LMs/prompts ignored)" if cache.other_identities else ""),
            "warning" if failed else "info",
        )
        return got

    outputs = outputs_for(items, split)
    candidates = as_candidates(kb.skb.candidate_ids)
    evaluate = tuning.ConfigEvaluator(
        prog, items, outputs, candidates, tuning.metric_ks(spec.metric), make_program, cfg.runtime.concurrency
    )
    tuned_away = set(spec.params) | {"concurrency"}
    if not spec.rerank:  # step 8 only: free to change between runs of a pre-rerank study
        tuned_away |= {"reranker", "context_budget_tokens"}
    spec.identity = {
        "split": split,
        "questions": hashlib.sha256(json.dumps([int(q.id) for q in items]).encode()).hexdigest()[:16],
        "llm_outputs": identity,
        "base_config": {k: v for k, v in without_waits(cfg.model_dump(mode="json")).items() if k not in tuned_away},
    }
    st = tuning.open_study(study, storage, spec)

    kb.embed_queries([q.query for q in items])  # in batches, before any trial is timed
    baseline = evaluate(cfg, rerank=spec.rerank)
    done_before = len(tuning.complete_trials(st))
    start = time.perf_counter()
    report.advance(f"study {study}", min(done_before, trials), trials)

    def on_trial(s: Any, t: Any) -> None:
        try:
            stats = f"best {spec.metric} {tuning.best_trial(s).values[0]:.3f}"
        except ValueError:
            stats = ""
        report.advance(f"study {study}", min(len(tuning.complete_trials(s)), trials), trials, stats)

    try:
        ran = tuning.run_study(st, spec, evaluate, cfg, trials, callback=on_trial)
    except KeyboardInterrupt:
        raise TuningInterrupted(f"Interrupted; run the same command again to resume study {study!r}.") from None
    elapsed = time.perf_counter() - start
    if ran:
        say(
            f"{ran} trial(s) in {elapsed:.1f} s ({elapsed / ran:.3f} s per trial over {len(items)} questions); "
            + f"study {study!r} holds {len(tuning.complete_trials(st))} complete trials ({storage})"
        )

    best = tuning.best_trial(st)
    best_cfg = tune_space.config_with(cfg, best.params)
    tuned = evaluate(best_cfg, rerank=spec.rerank)
    fit = _fit_fusion(tuned, say)
    if o.fit_prior_weight and fit is not None:  # the judge's scores do not depend on the fusion: no new LM call
        best_cfg = tune_space.config_with(best_cfg, {"rerank_fusion": "prior", "rerank_prior_weight": round(fit.weight, 3)})
        tuned = evaluate(best_cfg, rerank=True)
    best_cfg.save(out / tuning.BEST_CONFIG_FILE)

    # sensitivity: alpha (Fig. 2) on the tuning split (and the test split), l_max (Table 19)
    evaluators = {split: evaluate}
    if test_items:
        test_outputs = outputs_for(test_items, test_split or "test")
        evaluators[test_split or "test"] = tuning.ConfigEvaluator(
            prog, test_items, test_outputs, candidates, tuning.metric_ks(spec.metric)
        )
    l_rows, imp = _sensitivity(out, evaluators, cfg, best_cfg, st, baseline.metrics[spec.metric], spec.metric)
    w_rows: list[dict[str, Any]] = []
    if fit is not None or (spec.rerank and "rerank_prior_weight" in spec.params):  # step 8's trust in its judge
        from autofocus.optimize import tune_plots as plots

        w_rows = tuning.sweep_prior_weight(evaluate, best_cfg)
        tuning.write_table(w_rows, ["rerank_prior_weight", *SHOWN_METRICS], out / "prior_weight")
        plots.plot_prior_weight(w_rows, out / plots.PRIOR_WEIGHT_PNG,
                                best_cfg.rerank.rerank_prior_weight if best_cfg.rerank.rerank_fusion == "prior" else None, fit)

    result = TuningResult(
        out=out, study=study, storage=storage, spec=spec, split=split, questions=len(items), base_config=cfg,
        best_config=best_cfg, best_trial=best, baseline=baseline, tuned=tuned,
        complete_trials=len(tuning.complete_trials(st)), trials_run=ran, seconds=elapsed,
        pareto_front=tuning.pareto_front(st) if spec.multi else [], l_max_rows=l_rows, importances=imp,
        prior_weight_rows=w_rows, fusion_fit=fit, fit_used=o.fit_prior_weight and fit is not None,
    )  # fmt: skip
    if on_study_done is not None:
        on_study_done(result)

    if o.confirm:
        runs = [(split, items, "tuned", best_cfg)]
        if o.confirm_defaults:
            runs.append((split, items, "defaults", cfg))
        if test_split:
            runs.append((test_split, test_items, "tuned", best_cfg))
            if o.confirm_defaults:
                runs.append((test_split, test_items, "defaults", cfg))
        for run_split, run_items, label, run_cfg in runs:
            run_dir = out / f"confirm-{run_split}-{config_hash(run_cfg)}"
            say(f"confirmation: {label} settings on {run_split} -> {run_dir}", "section")
            result.confirmed[f"{label} on {run_split}"] = _confirm(
                make_program(run_cfg, lms="lazy"), run_items, run_dir, run_split, reporter
            )
    _write_summary(result)
    return result


def _fit_fusion(tuned: tuning.Evaluation, say: Callable[..., Any]) -> FusionFit | None:
    """The likelihood fit of step 8's prior weight from a reranked evaluation's judge scores; None
    where there are none (not a step-8 study, a judge without per-candidate scores, no answer judged)."""
    if not any(c is not None for c in tuned.fusion_cases):
        return None
    fit = fit_prior_weight(tuned.fusion_cases)
    say(fit.line())
    return fit


def _sensitivity(
    out: Path,
    evaluators: dict[str, Any],
    cfg: AutofocusConfig,
    best: AutofocusConfig,
    study: Any,
    baseline: float,
    metric: str,
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Sweep alpha on each split and l_max on the first (tables and PNGs); history and importances."""
    from autofocus.optimize import tune_plots as plots

    first = next(iter(evaluators))
    curves = {label: tuning.sweep_alpha(ev, best) for label, ev in evaluators.items()}
    for label, rows in curves.items():
        tuning.write_table(
            rows,
            ["alpha", *SHOWN_METRICS, "seconds"],
            out / ("alpha" if label == first else f"alpha_{label}"),
        )
    plots.plot_alpha(curves, out / plots.ALPHA_PNG, default_alpha=cfg.merge.alpha, best_alpha=best.merge.alpha)
    sweep = tuning.sweep_l_max(evaluators[first], best)
    rows = [tuning.flat(r) for r in sweep]
    tuning.write_table(rows, list(L_MAX_COLUMNS), out / "l_max")
    plots.plot_l_max(sweep, out / plots.L_MAX_PNG)
    values = [t.values[0] for t in sorted(tuning.complete_trials(study), key=lambda t: t.number)]
    plots.plot_history(values, out / plots.HISTORY_PNG, metric, baseline=baseline)
    imp = tuning.importances(study)
    if imp:
        plots.plot_importance(imp, out / plots.IMPORTANCE_PNG)
    return rows, imp


def _confirm(
    program: Any,
    items: list[Any],
    run_dir: Path,
    split: str,
    reporter: Reporter | None,
) -> dict[str, Any]:
    """A resumable evaluation run of the program with every step (the reranker too); its mean metrics."""
    from autofocus.evaluation.program_runs import evaluate_program

    done = evaluate_program(program, run_dir, EvalOptions(split=split), questions=items, reporter=reporter)
    if done.interrupted:
        raise TuningInterrupted(f"Interrupted; run the same command again to finish {run_dir}.")
    metrics = done.summary["metrics"]
    return {m: (metrics.get(m) or {}).get("mean") for m in SHOWN_METRICS} | {"run": str(run_dir)}


def _write_summary(result: TuningResult) -> None:
    """``summary.json`` and ``summary.md`` in the output folder."""
    data = {
        "study": result.study,
        "storage": result.storage,
        "spec": result.spec.stored(),
        "complete_trials": result.complete_trials,
        "best_trial": result.best_trial.number,
        "best_params": result.best_trial.params,
        "best_config": str(result.best_config_file),
        "pre_rerank" if not result.spec.rerank else "reranked": {
            "defaults": result.baseline.as_dict(),
            "tuned": result.tuned.as_dict(),
        },
        "tuned_vs_defaults": result.gain,
        "prior_weight_fit": None if result.fusion_fit is None else {**result.fusion_fit.as_dict(), "used": result.fit_used},
        "pareto_front": [{"trial": t.number, "values": t.values, "params": t.params} for t in result.pareto_front],
        "importances": result.importances,
        "confirmation": result.confirmed,
        "seconds_this_run": result.seconds,
        "trials_this_run": result.trials_run,
    }
    (result.out / "summary.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
    (result.out / "summary.md").write_text(_markdown(data, result.base_config, result.best_config, result.shown_params,
                  bool(result.prior_weight_rows)))


def gain_line(gain: dict[str, Any]) -> str:
    """One sentence on whether the tuned settings beat the defaults beyond noise on the tuning split."""
    if gain.get("diff") is None:
        return "Tuned vs defaults: no questions to compare."
    verdict = "beyond noise" if gain["significant"] else "within noise: the defaults are as good"
    return (f"Tuned vs defaults on the tuning split ({gain['metric']}, paired, {gain['n']} questions): "
            f"{100 * gain['diff']:+.1f} points, 95% CI [{100 * gain['low']:+.1f}, {100 * gain['high']:+.1f}], "
            f"p = {gain['p']:.3f}: {verdict}. Optimistic, since this split chose the settings; "
            "confirm on a held-out split (`--test-split`).")


def _markdown(
    data: dict[str, Any], cfg: AutofocusConfig, best: AutofocusConfig, names: list[str], weights: bool
) -> str:
    fmt = tuning.fmt
    lines = [
        f"# Tuning study `{data['study']}`",
        "",
        f"{data['complete_trials']} complete trials; objective {data['spec']['metric']}"
        + (f" and {data['spec']['second']}" if data["spec"]["second"] != "none" else "")
        + f"; best trial {data['best_trial']}. Storage: `{data['storage']}`.",
        "",
        "| setting | defaults | tuned |",
        "|---|---|---|",
        *(f"| {n} | {fmt(cfg.flat()[n])} | {fmt(best.flat()[n])} |" for n in names),
        "",
    ]
    key = "pre_rerank" if "pre_rerank" in data else "reranked"
    lines += [f"## Metrics ({key.replace('_', '-')})", "", "| config | " + " | ".join(SHOWN_METRICS) + " |",
              "|---|" + "---|" * len(SHOWN_METRICS)]  # fmt: skip
    for label, ev in data[key].items():
        lines.append(f"| {label} | " + " | ".join(fmt(ev.get(m)) for m in SHOWN_METRICS) + " |")
    lines += ["", gain_line(data["tuned_vs_defaults"])]
    if data["prior_weight_fit"]:
        fit = data["prior_weight_fit"]
        lines += ["", f"Step 8's prior weight fitted by likelihood: {fit['weight']:.2f} (95% CI {fit['low']:.2f}-"
                  f"{fit['high']:.2f}, {fit['n']} questions with an answer among the judged candidates)"
                  + ("; used in best_config.json." if fit["used"] else "; not used (`--fit-prior-weight` uses it).")]
    if data["confirmation"]:
        lines += ["", "## Confirmation runs (with the reranker)", "",
                  "| settings | " + " | ".join(SHOWN_METRICS) + " | run |", "|---|" + "---|" * (len(SHOWN_METRICS) + 1)]  # fmt: skip
        for label, row in data["confirmation"].items():
            lines.append(
                f"| {label} | " + " | ".join(fmt(row.get(m)) for m in SHOWN_METRICS) + f" | {row['run']} |"
            )
    if data["importances"]:
        lines += ["", "## Parameter importance", "", "| setting | importance |", "|---|---|"]
        lines += [f"| {k} | {v:.3f} |" for k, v in data["importances"].items()]
    lines += ["", "Tables: alpha.md, l_max.md" + (", prior_weight.md" if weights else "") + ". Plots: alpha.png, "
              "l_max.png, " + ("prior_weight.png, " if weights else "") + "history.png, importance.png.", ""]
    return "\n".join(lines)
