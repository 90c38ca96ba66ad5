"""``autofocus tune``: an Optuna study over AF-Retriever's settings, then plots and a confirmation run.

Argument handling and printing only; the run is ``autofocus.optimize.tune_run.run_tuning`` (its
docstring lists the output folder's files).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from autofocus import cli_app, runtime
from autofocus.cli_app import DeadlineOpt, LmRetriesOpt, LmTimeoutOpt, QADirOpt, app, config_or_exit, fail
from autofocus.config import AutofocusConfig
from autofocus.console import OPEN_ERRORS, RichReporter, make_console, print_error, safe

console = make_console()
err_console = make_console(stderr=True)

SHOWN_METRICS = ("hit@1", "hit@5", "hit@20", "recall@20", "mrr")


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
    fit_prior_weight: Annotated[
        bool, typer.Option("--fit-prior-weight", help="with --rerank-trials: step 8's fusion = prior, its "
                           "weight fitted by likelihood on the split instead of searched")
    ] = False,
    seed: Annotated[int, typer.Option(help="TPE sampler seed")] = 0,
    limit: Annotated[int | None, typer.Option(help="only the first N questions of the split", min=1)] = None,
    system: Annotated[str | None, typer.Option(help="AF-Retriever preset, e.g. afr or afr-code (default: afr, or the "
                                               "--program's own)")] = None,
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
    qa_dir: QADirOpt = None,
    test_split: Annotated[
        str | None, typer.Option(help="also confirm (and sweep alpha) on this split, e.g. test")
    ] = None,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="show progress bars")] = True,
    lm_timeout: LmTimeoutOpt = None,
    lm_retries: LmRetriesOpt = None,
    deadline: DeadlineOpt = None,
) -> None:
    """Tune alpha, l_max, the expansion schedule, type/edge modes and document variants with Optuna.

    Steps 1-2 (LLM) run once per question and are cached in the output folder; each trial runs
    steps 3-7 only and scores the pre-rerank list (paper A.6). The best settings are written as a
    config file for ``ask``/``eval --config``; a confirmation run with the reranker reports the
    full metrics.
    """
    from autofocus.optimize.tune import StudyMismatchError
    from autofocus.optimize.tune_run import TuningInterrupted, run_tuning
    from autofocus.options import TuneOptions

    base_cfg = runtime.with_waits(config_or_exit(config, lm, program_file=program, concurrency=concurrency),
                                  lm_timeout, lm_retries, deadline)  # fmt: skip
    options = TuneOptions(system=system, program_file=program, split=split, trials=trials, study=study, out=out,
                          storage=storage, metric=metric, second=second, params=params, l_max_range=l_max_range,
                          rerank_trials=rerank_trials, fit_prior_weight=fit_prior_weight, seed=seed, limit=limit,
                          confirm=confirm, confirm_defaults=confirm_defaults, test_split=test_split, qa_dir=qa_dir)
    try:
        with RichReporter(console, err_console, bars=progress) as reporter:
            result = run_tuning(skb, base_cfg, options, reporter=reporter, on_study_done=_print_study)
    except StudyMismatchError as exc:
        raise fail(str(exc), cli_app.EXIT_MISMATCH) from None
    except TuningInterrupted as exc:
        raise fail(str(exc), cli_app.EXIT_INTERRUPTED) from None
    except OPEN_ERRORS as exc:  # not an SKB, a damaged one, an unknown split, system or option
        print_error(err_console, exc)
        raise typer.Exit(1) from None
    if result.confirmed:
        _print_confirmed(result.confirmed)
    console.print(safe(
        f"Best settings: {result.best_config_file} (use with `autofocus eval --config` or `ask --config`); "
        f"tables and plots in {result.out}"
    ))


def _print_study(result: Any) -> None:
    """The study's outcome, printed before the confirmation runs start."""
    from autofocus.optimize.tune_run import gain_line

    spec = result.spec
    _print_settings(result.base_config, result.best_config, result.shown_params)
    _print_metrics(
        f"{result.split}, {'after reranking' if spec.rerank else 'pre-rerank'} ({result.questions} questions)",
        {"defaults": result.baseline, "tuned": result.tuned},
    )
    console.print(safe(gain_line(result.gain)))
    if result.pareto_front:
        _print_front(result.pareto_front, spec)
    _print_l_max(result.l_max_rows)


def _print_settings(cfg: AutofocusConfig, best: AutofocusConfig, names: list[str]) -> None:
    table = Table(title="Settings")
    for col in ("setting", "defaults", "tuned"):
        table.add_column(col)
    flat_cfg, flat_best = cfg.flat(), best.flat()
    for n in names:
        a, b = flat_cfg[n], flat_best[n]
        fa = f"{a:.3f}" if isinstance(a, float) else str(a)
        fb = f"{b:.3f}" if isinstance(b, float) else str(b)
        table.add_row(n, safe(fa), f"[bold]{safe(fb)}[/]" if a != b else safe(fb))
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
        table.add_row(str(t.number), f"{t.values[0]:.3f}", f"{t.values[1]:.4g}", safe(settings))
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
        table.add_row(safe(label), *(f"{row[m]:.3f}" if row.get(m) is not None else "-" for m in SHOWN_METRICS))
    console.print(table)
