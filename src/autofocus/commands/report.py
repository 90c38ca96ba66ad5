"""``autofocus report RUN [RUN ...]`` (summaries and paired comparisons of finished runs) and
``autofocus report fusion RUN`` (step 8's alternatives recomputed from a run's traces).

``report`` is a group whose first argument, when it names no subcommand, is a run directory: the
command kept its form (``report A B --by kind``) when ``fusion`` joined it. A run directory called
``fusion`` is reached as ``./fusion``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import click
import typer
from rich.table import Table
from typer.core import TyperGroup

from autofocus.cli_app import MARKUP, app, fail, unanswered_code
from autofocus.console import make_console, safe

console = make_console()

RUNS = "runs"  # the subcommand a first argument that names no other one goes to


class ReportGroup(TyperGroup):
    """Subcommands, with ``runs`` as the default: ``report A B`` is ``report runs A B``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = [RUNS, *args]
        return super().parse_args(ctx, args)


report_app = typer.Typer(
    cls=ReportGroup,
    no_args_is_help=True,
    rich_markup_mode=MARKUP,
    help="Summaries and paired comparisons of runs (report RUN [RUN ...]); step 8's fusions and depths "
    "recomputed from a run's traces (report fusion RUN).",
)
app.add_typer(report_app, name="report")


def _load(path: Path) -> Any:
    from autofocus.evaluation.report import load_run

    try:
        return load_run(path)
    except (FileNotFoundError, ValueError) as exc:  # not a run, a damaged traces line or manifest
        raise fail(str(exc)) from None


@report_app.command(RUNS)
def runs_command(
    runs: Annotated[list[Path], typer.Argument(help="run directories; two or more adds a comparison")],
    by: Annotated[str | None, typer.Option(help="also break the runs down by this QA-file column, e.g. kind")] = None,
    comparisons: Annotated[
        int | None,
        typer.Option(min=1, help="how many comparisons this split has served in all, for the Holm adjustment "
                     "(default: the runs compared here)"),
    ] = None,
) -> None:
    """Print (and refresh) the summary of each run; with several, compare them with the first (the default).
    Exit 4 when a run has no question answered by the method (every one raised or fell back)."""
    from autofocus.console import print_comparison, print_run
    from autofocus.evaluation.groups import grouped_rows
    from autofocus.evaluation.program_runs import summarise_run
    from autofocus.evaluation.report import comparison_rows

    loaded, summaries = [], {}
    for path in runs:
        run = _load(path)
        summary, plots = summarise_run(run, f"{run.name} ({path})")
        print_run(console, summary, f"{run.name} ({path})", run.path, plots)
        loaded.append(run)
        summaries[f"{run.name} ({path})"] = summary
    same_system = len({r.name for r in loaded}) == 1  # variants of one system: the directories tell them apart
    names = [r.path.name if same_system else f"{r.name} ({r.path.name})" for r in loaded]
    if len(loaded) > 1:
        print_comparison(comparison_rows(loaded, names, comparisons=comparisons), console)
    if by is not None:
        try:
            rows = grouped_rows(loaded, by, names)
        except ValueError as exc:
            raise fail(str(exc)) from None
        table = Table(title=f"By {safe(by)} (%)")
        for col in ("group", "run", "n", "hit@1", "hit@20", "MRR", "non-empty grounding", "gold grounded", "type correct"):
            table.add_column(col, justify="left" if col in ("group", "run") else "right")
        for r in rows:
            pct = [f"{100 * v:.1f}" if v is not None else "-" for v in
                   (r["hit@1"], r["hit@20"], r["mrr"], r["nonempty"], r["gold_grounded"], r["type_correct"])]  # fmt: skip
            table.add_row(safe(r["group"]), safe(r["run"]), str(r["n"]), *pct)
        console.print(table)
    code = unanswered_code(summaries, None, "`autofocus eval` with the same options retries its questions")
    if code:
        raise typer.Exit(code)


def _numbers(value: str, kind: type, option: str) -> list[Any]:
    try:
        return [kind(v) for v in value.replace(",", " ").split()]
    except ValueError:
        raise typer.BadParameter(f"{value!r}: expected numbers separated by commas", param_hint=option) from None


@report_app.command("fusion")
def fusion_command(
    runs: Annotated[list[Path], typer.Argument(help="run directories of a system with step 8 (afr, vss-rerank, ...)")],
    weights: Annotated[str, typer.Option(help="rerank_prior_weight values to recompute, e.g. 0.25,0.5,1 "
                                         "(pointwise runs)")] = "",
    depths: Annotated[str, typer.Option(help="rerank_depth values to recompute, e.g. 5,10,15 (a pointwise run "
                                        "that reranked all k)")] = "",
    k: Annotated[str, typer.Option("--k", help="rerank_fusion_k values for reciprocal rank fusion (rrf)")] = "60",
    fit: Annotated[bool, typer.Option("--fit", help="also fit rerank_prior_weight by likelihood on the run's "
                                      "questions (on a labelled split, a diagnostic: it tunes on them)")] = False,
    bootstrap: Annotated[int, typer.Option(min=0, help="--fit: resamples for the weight's 95 % interval")] = 1000,
    out: Annotated[Path | None, typer.Option(help="add each run's means to this JSON file")] = None,
) -> None:
    """Step 8's orders recomputed from each run's traces, no LM call: steps 1-7, the reranker, rrf, the
    prior fusion per weight, the grounded block kept, each depth; paired against the reranker."""
    from autofocus.evaluation.step8_orders import BASELINE, METRICS, analyse_step8

    ks, ds, ws = _numbers(k, int, "--k"), _numbers(depths, int, "--depths"), _numbers(weights, float, "--weights")
    results: dict[str, Any] = {}
    for path in runs:
        analysis = analyse_step8(_load(path), ks, ds, ws, fit=fit, bootstrap=bootstrap)
        if analysis.questions == 0:
            raise fail(f"{path}: no finished question ran step 8 (a system with a reranker records it)")
        if analysis.fit is not None or analysis.fit_note:
            console.print(f"{safe(path)}: {safe(analysis.fit.line() if analysis.fit else analysis.fit_note)}")
        table = Table(title=f"{safe(path)}: {analysis.questions} questions with step 8, paired against the reranker")
        for col in ("order", "hit@1", "MRR", "hit@1 vs reranker (p)", "MRR vs reranker (p)"):
            table.add_column(col, justify="left" if col == "order" else "right")
        for row in analysis.rows:
            tests = [row.vs_reranker.get(m) for m in METRICS]
            table.add_row(
                safe(row.name),
                *(f"{100 * row.means[m]:.1f}" for m in METRICS),
                *("" if row.name == BASELINE or t is None else f"{100 * t['diff']:+.1f} ({t['p']:.3f})" for t in tests),
            )
        console.print(table)
        results[str(path)] = analysis.as_dict()
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        existing = json.loads(out.read_text()) if out.exists() else {}
        out.write_text(json.dumps({**existing, **results}, indent=1))
