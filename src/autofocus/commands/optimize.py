"""``autofocus optimize``: DSPy prompt optimisation of chosen LLM steps, saved as a program file.

The saved file loads with ``--program FILE`` in ``ask``, ``eval`` and ``tune`` (format:
``autofocus.program.saved``). Before/after scores on the validation split (and on ``--test``, a
held-out split) are printed for the same LM and the same questions.

Example:
    autofocus optimize --skb data/demo --steps cypher --optimizer bootstrap --lm local \
        --out runs/optimize/afr-cypher.json --test test
    autofocus eval --skb data/demo --split test --program runs/optimize/afr-cypher.json --out runs/afr-cypher-test
    autofocus optimize --skb data/demo --qa-dir runs/synth --optimizer knn --steps target_type,cypher \
        --train synthetic --val synthetic --limit-val 10 --max-demos 3 --lm local --out runs/optimize/knn.json
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from autofocus import runtime
from autofocus.cli_app import DeadlineOpt, LmRetriesOpt, LmTimeoutOpt, QADirOpt, app
from autofocus.console import make_console, print_error, safe

console = make_console()
err_console = make_console(stderr=True)


def scores_table(title: str, scores: dict[str, Any], objective: str) -> Table:
    """Zero-shot vs optimised: mean of every metric, and on how many questions each got better/worse."""
    from autofocus.optimize.scoring import REPORTED

    before, after = scores["zero_shot"], scores["optimised"]
    table = Table(title=f"{title}: {before.n} questions, same LM", caption="* the objective optimised")
    for col in ("metric", "zero-shot", "optimised", "change", "better / worse"):
        table.add_column(col, justify="left" if col == "metric" else "right")
    mb, ma = before.mean(), after.mean()
    for key in (*REPORTED, "lm_calls"):
        if key not in mb:
            continue
        pairs = list(zip(before.rows, after.rows, strict=True))
        better = sum(a[key] > b[key] for b, a in pairs)
        worse = sum(a[key] < b[key] for b, a in pairs)
        label = f"[bold]{key} *[/]" if key == objective else key
        fmt = "{:.2f}" if key == "lm_calls" else "{:.3f}"
        table.add_row(label, fmt.format(mb[key]), fmt.format(ma[key]), f"{ma[key] - mb[key]:+.3f}",
                      "" if key == "lm_calls" else f"{better} / {worse}")
    if before.errors or after.errors:
        table.caption += f"; questions that raised (scored 0): {before.errors} zero-shot, {after.errors} optimised"
    return table


def _progress(enabled: bool) -> tuple[Progress, Callable[[str, int], Callable[[], None]]]:
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=err_console, disable=not enabled)

    def on_eval(label: str, n: int) -> Callable[[], None]:
        task = bar.add_task(safe(label), total=n)
        return lambda: bar.advance(task)

    return bar, on_eval


@app.command("optimize")
def optimize_command(
    skb: Annotated[Path, typer.Option(help="SKB directory (or STaRK processed directory)", exists=True)],
    out: Annotated[Path, typer.Option(help="program file to write (JSON; load it with --program)")],
    steps: Annotated[
        str, typer.Option(help="comma-separated LLM steps to optimise: target_type, cypher, query_graph, "
                          "triplets, reranker, router, validator, commenter")
    ] = "cypher",
    optimizer: Annotated[str, typer.Option(help="bootstrap | bootstrap-rs | mipro | gepa | gold (synthetic questions' gold Cypher as demos) "
                                         "| knn (each question's nearest synthetic questions as its demos)")] = "bootstrap",
    system: Annotated[str, typer.Option(help="system preset, e.g. afr, focusedretriever, 4stepfocus")] = "afr",
    train: Annotated[
        str, typer.Option(help="QA split the optimiser learns from; synthetic[:80] learns without labels")
    ] = "train",
    val: Annotated[str, typer.Option(help="QA split it selects on; zero-shot vs optimised are scored on it")] = "val",
    test: Annotated[
        str | None, typer.Option(help="held-out split to score zero-shot vs optimised on as well")
    ] = None,
    limit_train: Annotated[int | None, typer.Option(help="first N training questions", min=1)] = None,
    limit_val: Annotated[int | None, typer.Option(help="first N validation questions", min=1)] = None,
    limit_test: Annotated[int | None, typer.Option(help="first N test questions", min=1)] = None,
    qa_dir: QADirOpt = None,
    metric: Annotated[
        str | None, typer.Option(help="objective: mrr, hit@K, recall@K, grounded_hit@K, grounded_recall@K "
                                 "(default: grounded_recall@20 for query steps, mrr for reranker/critic)")
    ] = None,
    lm: Annotated[str | None, typer.Option(help="DSPy LM string for every step, or local / local-small")] = None,
    reflection_lm: Annotated[
        str | None, typer.Option(help="GEPA's reflection LM (required for gepa); MIPROv2's proposer")
    ] = None,
    config: Annotated[Path | None, typer.Option(help="config JSON (e.g. from `autofocus tune`)", exists=True)] = None,
    max_demos: Annotated[int, typer.Option(help="bootstrapped demos per predictor (knn: nearest demos per question)", min=0)] = 4,
    trials: Annotated[
        int | None, typer.Option(help="bootstrap-rs: demo sets tried (default 4); mipro: trials (else auto=light)",
                                 min=1)
    ] = None,
    budget: Annotated[int | None, typer.Option(help="gepa: metric calls (else auto=light)", min=1)] = None,
    threads: Annotated[int | None, typer.Option(help="questions run in parallel (default: config)", min=1)] = None,
    seed: Annotated[int, typer.Option(help="seed of the optimisers that sample")] = 0,
    full_demos: Annotated[
        bool, typer.Option("--full-demos", help="keep the schema inputs in every demo (longer prompts)")
    ] = False,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="show progress bars")] = True,
    lm_timeout: LmTimeoutOpt = None,
    lm_retries: LmRetriesOpt = None,
    deadline: DeadlineOpt = None,
) -> None:
    """Optimise the prompts/demos of some LLM steps with a DSPy optimiser; the other steps stay zero-shot."""
    from autofocus.optimize.prompts_run import run_prompt_optimisation
    from autofocus.options import PromptOptOptions

    chosen = [s.strip() for s in steps.split(",") if s.strip()]
    options = PromptOptOptions(
        system=system, steps=chosen, optimizer=optimizer, train=train, val=val, test=test, limit_train=limit_train,
        limit_val=limit_val, limit_test=limit_test, qa_dir=qa_dir, metric=metric, reflection_lm=reflection_lm,
        max_demos=max_demos, trials=trials, budget=budget, threads=threads, seed=seed, full_demos=full_demos, out=out,
    )  # fmt: skip
    cfg = runtime.with_waits(runtime.load_config(config, lm=lm), lm_timeout, lm_retries, deadline)
    bar, on_eval = _progress(progress)
    try:
        with bar:
            done = run_prompt_optimisation(
                skb, cfg, options, on_start=lambda text: console.print(safe(text)), on_eval=on_eval
            )
    except (KeyError, FileNotFoundError, ValueError) as exc:  # a damaged SKB, an unknown split or system
        print_error(err_console, exc)
        raise typer.Exit(1) from None
    result = done.result
    console.print(scores_table(safe(f"{system}: {', '.join(chosen)} on {val}"), result.val, result.metric))
    if done.test is not None:
        console.print(scores_table(safe(f"{system}: {', '.join(chosen)} on {test} (held out)"), done.test, result.metric))
    meta = result.metadata
    for name in result.predictors:
        changed = " (new instructions)" if name in meta["instructions_changed"] else ""
        console.print(f"  {name}: {meta['demos'][name]} demos{changed}")
    console.print(f"{optimizer} took {meta['wall_s']:.1f} s, {meta['program_lm_calls']} program LM calls"
                  + (f" and {meta['reflection_lm_calls']} reflection LM calls" if reflection_lm else ""))
    console.print(safe(f"Saved to {done.path}; use it with --program {done.path} in ask, eval and tune"))
