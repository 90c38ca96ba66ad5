"""``autofocus tune``: an Optuna study over AF-Retriever's settings, then plots and a confirmation run.

Output folder (``--out``, default ``runs/tune-<study>``): ``study.db`` (unless ``--storage``),
``llm_outputs.jsonl`` (steps 1-2 per question, reused by every trial and rerun),
``best_config.json`` (for ``ask``/``eval --config``), ``summary.md``/``summary.json``,
``alpha.*``/``l_max.*`` tables (CSV, markdown) with ``alpha.png``/``l_max.png``, ``history.png``,
``importance.png``, and ``confirm-<split>-<config hash>/`` evaluation runs with the reranker.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from autofocus.cli_app import app
from autofocus.config import AutofocusConfig
from autofocus.console import make_console, safe
from autofocus.runtime import open_kb

console = make_console()
err_console = make_console(stderr=True)

EXIT_MISMATCH = 2
EXIT_INTERRUPTED = 130
SHOWN_METRICS = ("hit@1", "hit@5", "hit@20", "recall@20", "mrr")


def config_hash(cfg: AutofocusConfig) -> str:
    data = {k: v for k, v in cfg.model_dump(mode="json").items() if k != "concurrency"}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:8]


def _fail(message: str, code: int = 1) -> typer.Exit:
    err_console.print(f"[red]{safe(message)}[/]")
    return typer.Exit(code)


@app.command("tune")
def tune_command(
    skb: Annotated[Path, typer.Option(help="SKB directory (or STaRK processed directory)", exists=True)],
    split: Annotated[str, typer.Option(help="QA split the study optimises on")] = "val",
    trials: Annotated[
        int, typer.Option(help="complete trials the study should hold (a rerun tops up)", min=1)
    ] = 200,
    study: Annotated[str, typer.Option(help="study name (several machines may share one)")] = "afr-tune",
    storage: Annotated[
        str | None, typer.Option(help="Optuna storage URL, e.g. sqlite:///x.db or postgresql://...")
    ] = None,
    out: Annotated[Path | None, typer.Option(help="output folder (default runs/tune-<study>)")] = None,
    metric: Annotated[str, typer.Option(help="objective: hit@k, recall@k or mrr (pre-rerank)")] = "hit@20",
    second: Annotated[
        str, typer.Option(help="second objective for a Pareto front: none|latency|lm_calls")
    ] = "none",
    params: Annotated[
        str | None, typer.Option(help="comma list of settings to tune (default: alpha,l_max,expansion,...)")
    ] = None,
    l_max_range: Annotated[str, typer.Option(help="l_max search range LOW:HIGH (log scale)")] = "1:300",
    rerank_trials: Annotated[
        bool, typer.Option("--rerank-trials", help="rerank in every trial (LLM calls; tunes k too)")
    ] = False,
    seed: Annotated[int, typer.Option(help="TPE sampler seed")] = 0,
    limit: Annotated[int | None, typer.Option(help="only the first N questions of the split", min=1)] = None,
    system: Annotated[str, typer.Option(help="AF-Retriever preset, e.g. afr or afr-code")] = "afr",
    config: Annotated[Path | None, typer.Option(help="base config JSON", exists=True)] = None,
    program: Annotated[
        Path | None, typer.Option(help="optimised program from `autofocus optimize`", exists=True)
    ] = None,
    lm: Annotated[
        str | None, typer.Option(help="DSPy LM string for every step, or local / local-small")
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option(help="questions asked in parallel (threads)", min=1)
    ] = None,
    confirm: Annotated[
        bool, typer.Option("--confirm/--no-confirm", help="evaluate the best config with the reranker")
    ] = True,
    confirm_defaults: Annotated[
        bool, typer.Option("--confirm-defaults", help="also evaluate the base config with the reranker")
    ] = False,
    test_split: Annotated[
        str | None, typer.Option(help="also confirm (and sweep alpha) on this split, e.g. test")
    ] = None,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="show progress bars")] = True,
) -> None:
    """Tune alpha, l_max, the expansion schedule, type/edge modes and document variants with Optuna.

    Steps 1-2 (LLM) run once per question and are cached in the output folder; each trial runs
    steps 3-7 only and scores the pre-rerank list (paper A.6). The best settings are written as a
    config file for ``ask``/``eval --config``; a confirmation run with the reranker reports the
    full metrics.
    """
    from autofocus.commands import eval as eval_cmd
    from autofocus.evaluate.runner import progress_bar
    from autofocus.optimize import tune as tuning
    from autofocus.program.systems import registry
    from autofocus.program.systems.afr import AutofocusRetriever

    saved_cfg = None
    if program is not None:
        from autofocus.optimize.saved import read_program_config

        system, saved_cfg = read_program_config(program)
    base_cfg = eval_cmd._config(config, lm, None, None, concurrency, base=saved_cfg)
    try:
        name, cfg = registry.resolve_config(system, base_cfg)
        spec = tuning.StudySpec(
            metric=metric,
            second=second,
            params=tuning.parse_params(params, rerank_trials),
            l_max_range=tuning.parse_range(l_max_range),
            rerank=rerank_trials,
            seed=seed,
        )
    except ValueError as exc:
        raise _fail(str(exc)) from None
    items = eval_cmd._load_items(skb, split)[:limit]
    test_items = eval_cmd._load_items(skb, test_split) if test_split else []
    out = out or Path("runs") / f"tune-{study}"
    out.mkdir(parents=True, exist_ok=True)
    storage = storage or tuning.default_storage(out)

    kb = open_kb(skb, cfg.embedder, cfg.index_kind)
    lms_attached: list[Any] = []

    def make_program(c: AutofocusConfig, with_lms: bool = True) -> Any:
        prog = registry.build_program(tuning.system_spec(name, c), kb, c, with_lms=with_lms)
        if program is not None:
            from autofocus.optimize.saved import load_program_state

            load_program_state(prog, program)
        return prog

    prog = make_program(cfg, with_lms=False)
    if not isinstance(prog, AutofocusRetriever):
        raise _fail(f"`autofocus tune` tunes AF-Retriever presets; {system!r} is a {type(prog).__name__}")
    variants = {cfg.doc_variant_step4, cfg.doc_variant_step6, cfg.doc_variant_step7}
    if any(p.startswith("doc_variant") for p in spec.params):
        variants |= set(tuning.BOTH_VARIANTS)
    for v in sorted(variants):  # opened (or built) once, before any trial
        kb.index(v)

    from autofocus.index.store import skb_fingerprint
    from autofocus.metrics import as_candidates

    program_sha = None
    if program is not None:
        from autofocus.evaluate.runner import file_sha256

        program_sha = file_sha256(program)
    identity = tuning.llm_identity(name, cfg, skb_fingerprint(kb.skb), program_sha)
    cache = tuning.LLMOutputCache(out / tuning.LLM_OUTPUTS_FILE, identity)

    def outputs_for(questions: list[Any], label: str) -> dict[int, tuning.LLMOutput]:
        known = cache.load()
        missing = [q for q in questions if int(q.id) not in known or known[int(q.id)].query != q.query]
        if missing and not lms_attached:
            registry.apply_lms(prog, cfg)
            lms_attached.append(True)
        with progress_bar(err_console, progress and bool(missing)) as bar:
            task = bar.add_task(
                f"steps 1-2 ({label})",
                total=len(questions),
                completed=len(questions) - len(missing),
                stats="",
            )
            got, asked = tuning.fill_llm_outputs(
                prog, questions, cache, concurrency=cfg.concurrency, on_done=lambda _: bar.advance(task)
            )
        failed = sum(tuning.transient(o) for o in got.values())
        console.print(
            f"Steps 1-2 on {label}: {len(questions) - asked} cached, {asked} asked now"
            + (f", [yellow]{failed} LM failures (asked again next run)[/]" if failed else "")
            + (
                f" ({cache.other_identities} cached lines of other LMs/prompts ignored)"
                if cache.other_identities
                else ""
            )
        )
        return got

    outputs = outputs_for(items, split)
    candidates = as_candidates(kb.skb.candidate_ids)
    evaluate = tuning.ConfigEvaluator(
        prog, items, outputs, candidates, tuning.metric_ks(spec.metric), make_program, cfg.concurrency
    )
    tuned_away = set(spec.params) | {"concurrency"}
    if not spec.rerank:  # step 8 only: free to change between runs of a pre-rerank study
        tuned_away |= {"reranker", "context_budget_tokens"}
    spec.identity = {
        "split": split,
        "questions": hashlib.sha256(json.dumps([int(q.id) for q in items]).encode()).hexdigest()[:16],
        "llm_outputs": identity,
        "base_config": {k: v for k, v in cfg.model_dump(mode="json").items() if k not in tuned_away},
    }
    try:
        st = tuning.open_study(study, storage, spec)
    except tuning.StudyMismatchError as exc:
        raise _fail(str(exc), EXIT_MISMATCH) from None

    kb.embed_queries([q.query for q in items])  # in batches, before any trial is timed
    baseline = evaluate(cfg, rerank=spec.rerank)
    done_before = len(tuning.complete_trials(st))
    start = time.perf_counter()
    with progress_bar(err_console, progress) as bar:
        task = bar.add_task(f"study {study}", total=trials, completed=min(done_before, trials), stats="")

        def on_trial(s: Any, t: Any) -> None:
            try:
                best = tuning.best_trial(s).values[0]
                stats = f"best {spec.metric} {best:.3f}"
            except ValueError:
                stats = ""
            bar.update(task, completed=min(len(tuning.complete_trials(s)), trials), stats=stats)

        try:
            ran = tuning.run_study(st, spec, evaluate, cfg, trials, callback=on_trial)
        except KeyboardInterrupt:
            raise _fail(
                f"Interrupted; run the same command again to resume study {study!r}.", EXIT_INTERRUPTED
            ) from None
    elapsed = time.perf_counter() - start
    if ran:
        console.print(
            f"{ran} trial(s) in {elapsed:.1f} s ({elapsed / ran:.3f} s per trial over {len(items)} questions); "
            + safe(f"study {study!r} holds {len(tuning.complete_trials(st))} complete trials ({storage})")
        )

    best = tuning.best_trial(st)
    best_cfg = tuning.config_with(cfg, best.params)
    best_cfg.save(out / tuning.BEST_CONFIG_FILE)
    tuned = evaluate(best_cfg, rerank=spec.rerank)

    # sensitivity: alpha (Fig. 2) on the tuning split (and the test split), l_max (Table 19)
    evaluators = {split: evaluate}
    if test_items:
        test_outputs = outputs_for(test_items, test_split or "test")
        ks = tuning.metric_ks(spec.metric)
        evaluators[test_split or "test"] = tuning.ConfigEvaluator(
            prog, test_items, test_outputs, candidates, ks
        )
    l_rows, imp = _sensitivity(out, evaluators, cfg, best_cfg, st, baseline.metrics[spec.metric], spec.metric)

    _print_settings(cfg, best_cfg, spec.params)
    _print_metrics(
        f"{split}, {'after reranking' if spec.rerank else 'pre-rerank'} ({len(items)} questions)",
        {"defaults": baseline, "tuned": tuned},
    )
    front = tuning.pareto_front(st) if spec.multi else []
    if front:
        _print_front(front, spec)
    _print_l_max(l_rows)

    confirmed: dict[str, dict[str, Any]] = {}
    if confirm:
        runs = [(split, items, "tuned", best_cfg)]
        if confirm_defaults:
            runs.append((split, items, "defaults", cfg))
        if test_split:
            runs.append((test_split, test_items, "tuned", best_cfg))
            if confirm_defaults:
                runs.append((test_split, test_items, "defaults", cfg))
        for run_split, run_items, label, run_cfg in runs:
            run_dir = out / f"confirm-{run_split}-{config_hash(run_cfg)}"
            console.rule(f"confirmation: {label} settings on {run_split} -> {run_dir}")
            spec_of_run = tuning.system_spec(name, run_cfg)
            confirmed[f"{label} on {run_split}"] = _confirm(
                kb, spec_of_run, run_cfg, run_items, run_dir, skb, run_split, program, progress
            )
        _print_confirmed(confirmed)

    summary_data = {
        "study": study,
        "storage": storage,
        "spec": spec.stored(),
        "complete_trials": len(tuning.complete_trials(st)),
        "best_trial": best.number,
        "best_params": best.params,
        "best_config": str(out / tuning.BEST_CONFIG_FILE),
        "pre_rerank" if not spec.rerank else "reranked": {
            "defaults": baseline.as_dict(),
            "tuned": tuned.as_dict(),
        },
        "pareto_front": [{"trial": t.number, "values": t.values, "params": t.params} for t in front],
        "importances": imp,
        "confirmation": confirmed,
        "seconds_this_run": elapsed,
        "trials_this_run": ran,
    }
    (out / "summary.json").write_text(json.dumps(summary_data, indent=2, default=str) + "\n")
    (out / "summary.md").write_text(_markdown(summary_data, cfg, best_cfg, spec.params))
    console.print(safe(
        f"Best settings: {out / tuning.BEST_CONFIG_FILE} (use with `autofocus eval --config` or `ask --config`); "
        f"tables and plots in {out}"
    ))


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
    from autofocus.optimize import tune as tuning
    from autofocus.optimize import tune_plots as plots

    first = next(iter(evaluators))
    curves = {label: tuning.sweep_alpha(ev, best) for label, ev in evaluators.items()}
    for label, rows in curves.items():
        tuning.write_table(
            rows,
            ["alpha", *SHOWN_METRICS, "seconds"],
            out / ("alpha" if label == first else f"alpha_{label}"),
        )
    plots.plot_alpha(curves, out / plots.ALPHA_PNG, default_alpha=cfg.alpha, best_alpha=best.alpha)
    sweep = tuning.sweep_l_max(evaluators[first], best)
    rows = [tuning.flat(r) for r in sweep]
    cols = ["l_max", "processed", "precision", "specificity", "nonempty",
            "steps1-6 hit@20", "steps1-6 recall@20", "steps1-7 hit@20", "steps1-7 recall@20"]  # fmt: skip
    tuning.write_table(rows, cols, out / "l_max")
    plots.plot_l_max(sweep, out / plots.L_MAX_PNG)
    values = [t.values[0] for t in sorted(tuning.complete_trials(study), key=lambda t: t.number)]
    plots.plot_history(values, out / plots.HISTORY_PNG, metric, baseline=baseline)
    imp = tuning.importances(study)
    if imp:
        plots.plot_importance(imp, out / plots.IMPORTANCE_PNG)
    return rows, imp


def _confirm(
    kb: Any,
    system: str,
    cfg: AutofocusConfig,
    items: list[Any],
    run_dir: Path,
    skb: Path,
    split: str,
    program: Path | None,
    progress: bool,
) -> dict[str, Any]:
    """A resumable evaluation run of ``cfg`` with every step (the reranker too); its mean metrics."""
    from autofocus.commands import eval as eval_cmd

    result, _ = eval_cmd._run_system(
        lambda *_: kb, system, cfg, items, run_dir, skb_path=skb, split=split, limit=None,
        program_file=program, force_new=False, progress=progress,
    )  # fmt: skip
    if result.interrupted:
        raise _fail(f"Interrupted; run the same command again to finish {run_dir}.", EXIT_INTERRUPTED)
    summary = json.loads((run_dir / "summary.json").read_text())  # written by the evaluation
    return {m: (summary["metrics"].get(m) or {}).get("mean") for m in SHOWN_METRICS} | {"run": str(run_dir)}


def _print_settings(cfg: AutofocusConfig, best: AutofocusConfig, names: list[str]) -> None:
    table = Table(title="Settings")
    for col in ("setting", "defaults", "tuned"):
        table.add_column(col)
    for n in names:
        a, b = getattr(cfg, n), getattr(best, n)
        fa = f"{a:.3f}" if isinstance(a, float) else str(a)
        fb = f"{b:.3f}" if isinstance(b, float) else str(b)
        table.add_row(n, fa, f"[bold]{fb}[/]" if a != b else fb)
    console.print(table)


def _print_metrics(title: str, evals: dict[str, Any]) -> None:
    table = Table(title=title)
    table.add_column("config")
    for m in (*SHOWN_METRICS, "s/question"):
        table.add_column(m, justify="right")
    for label, ev in evals.items():
        cells = [f"{ev.metrics.get(m, float('nan')):.3f}" for m in SHOWN_METRICS]
        table.add_row(label, *cells, f"{ev.seconds:.4f}")
    console.print(table)


def _print_front(front: list[Any], spec: Any) -> None:
    second = "s/question" if spec.second == "latency" else "LLM calls/question"
    table = Table(title=f"Pareto front: {spec.metric} vs {spec.second}")
    for col in ("trial", spec.metric, second, "settings"):
        table.add_column(col)
    for t in front[:15]:
        settings = ", ".join(
            f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in t.params.items()
        )
        table.add_row(str(t.number), f"{t.values[0]:.3f}", f"{t.values[1]:.4g}", settings)
    console.print(table)


def _print_l_max(rows: list[dict[str, Any]]) -> None:
    from autofocus.optimize.tune import fmt

    table = Table(title="l_max sensitivity (cf. paper Table 19; tuned settings otherwise)")
    cols = [
        "l_max",
        "processed",
        "precision",
        "specificity",
        "nonempty",
        "steps1-7 hit@20",
        "steps1-7 recall@20",
    ]
    for c in cols:
        table.add_column(c, justify="right")
    for r in rows:
        table.add_row(*(fmt(r.get(c)) for c in cols))
    console.print(table)


def _print_confirmed(confirmed: dict[str, dict[str, Any]]) -> None:
    table = Table(title="Confirmation runs (steps 1-8, with the reranker)")
    table.add_column("settings")
    for m in SHOWN_METRICS:
        table.add_column(m, justify="right")
    for label, row in confirmed.items():
        table.add_row(label, *(f"{row[m]:.3f}" if row.get(m) is not None else "-" for m in SHOWN_METRICS))
    console.print(table)


def _markdown(data: dict[str, Any], cfg: AutofocusConfig, best: AutofocusConfig, names: list[str]) -> str:
    from autofocus.optimize.tune import fmt

    lines = [
        f"# Tuning study `{data['study']}`",
        "",
        f"{data['complete_trials']} complete trials; objective {data['spec']['metric']}"
        + (f" and {data['spec']['second']}" if data["spec"]["second"] != "none" else "")
        + f"; best trial {data['best_trial']}. Storage: `{data['storage']}`.",
        "",
        "| setting | defaults | tuned |",
        "|---|---|---|",
        *(f"| {n} | {fmt(getattr(cfg, n))} | {fmt(getattr(best, n))} |" for n in names),
        "",
    ]
    key = "pre_rerank" if "pre_rerank" in data else "reranked"
    lines += [f"## Metrics ({key.replace('_', '-')})", "", "| config | " + " | ".join(SHOWN_METRICS) + " |",
              "|---|" + "---|" * len(SHOWN_METRICS)]  # fmt: skip
    for label, ev in data[key].items():
        lines.append(f"| {label} | " + " | ".join(fmt(ev.get(m)) for m in SHOWN_METRICS) + " |")
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
    lines += ["", "Tables: alpha.md, l_max.md. Plots: alpha.png, l_max.png, history.png, importance.png.", ""]
    return "\n".join(lines)
