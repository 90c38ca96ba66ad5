"""``autofocus eval`` and ``autofocus compare``: resumable runs and their summaries (``autofocus report``
reads them back: ``commands.report``).

Argument handling and printing only; the runs are ``autofocus.evaluation.program_runs``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from autofocus import runtime
from autofocus.cli_app import (
    EXIT_INTERRUPTED,
    EXIT_MISMATCH,
    DeadlineOpt,
    LmRetriesOpt,
    LmTimeoutOpt,
    QADirOpt,
    app,
    config_or_exit,
    fail,
    unanswered_code,
)
from autofocus.config import AutofocusConfig
from autofocus.console import OPEN_ERRORS, RichReporter, make_console, print_error, print_run, safe

console = make_console()
err_console = make_console(stderr=True)


def load_split(skb: Path, split: str, qa_dir: Path | None = None) -> list[Any]:
    """The split's questions (``program_runs.load_split``, which opens the SKB too), or exit 1 naming
    what is wrong: a damaged SKB, an unknown split, a gold answer that is not one of its nodes."""
    from autofocus.evaluation.program_runs import load_split

    try:
        return load_split(skb, split, qa_dir=qa_dir)
    except OPEN_ERRORS as exc:
        print_error(err_console, exc)
        raise typer.Exit(1) from None


def open_program(skb: Path, system: str | None, cfg: AutofocusConfig, program: Path | None) -> Any:
    """``runtime.open_program`` with LMs attached on first use, or exit 1 naming what is wrong."""
    try:
        return runtime.open_program(skb, system, cfg, program, lms="lazy")
    except OPEN_ERRORS as exc:  # a damaged index, an unknown system or setting
        print_error(err_console, exc)
        raise typer.Exit(1) from None


def exit_by_answers(summaries: dict[str, dict[str, Any]], max_degraded: float, out: Path) -> None:
    """Exit ``EXIT_NOTHING`` when a run answered no question itself, ``EXIT_PARTIAL`` when questions
    raised or more than ``max_degraded`` of them degraded (``cli_app.unanswered_code``)."""
    code = unanswered_code(summaries, max_degraded, f"What went wrong is in {out}'s traces.jsonl; the same "
                                                     "command retries them")
    if code:
        raise typer.Exit(code)


def unwritable(exc: OSError, out: Path) -> typer.Exit:
    """One line for a run that could not be written (a full disk, a read-only folder): what finished
    is in the run's traces (a line cut by the failure is dropped on resume), the same command goes on."""
    if isinstance(exc, FileNotFoundError) and not exc.filename:  # a missing input, named by its message
        return fail(str(exc))
    where = f"{exc.filename}: {exc.strerror}" if exc.filename and exc.strerror else str(exc)
    return fail(f"cannot write the run: {where}. The questions that finished are kept in {out}; make room (or "
                "write access) and run the same command again to go on")


# no exists=True: opening the SKB says what is wrong with the path (missing, a link loop, a broken link)
SkbOpt = Annotated[Path, typer.Option(help="SKB directory (or STaRK processed directory)")]
SplitOpt = Annotated[
    str, typer.Option(help="QA split: train, val, test, or a whole-file split (synthetic); a slice: synthetic[:80]")
]
LimitOpt = Annotated[int | None, typer.Option(help="only the first N questions of the split", min=0)]
ConfigOpt = Annotated[Path | None, typer.Option(help="config JSON (e.g. from `autofocus tune`)", exists=True)]
StepsOpt = Annotated[str | None, typer.Option(help="ablation: 1+7, 1-5, 1-6, 1-7 or 1-8")]
LmOpt = Annotated[str | None, typer.Option(help="DSPy LM string for every step, or local / local-small")]
RerankerOpt = Annotated[str | None, typer.Option(help="auto|none|pointwise|listwise|pairwise|tournament")]
ConcurrencyOpt = Annotated[
    int | None, typer.Option(help="questions run in parallel (threads); also LM calls in flight per LM", min=1)
]
ForceOpt = Annotated[
    bool, typer.Option("--force-new", help="move an existing run in --out aside and start again")
]
ProgressOpt = Annotated[bool, typer.Option("--progress/--no-progress", help="show a progress bar")]
MaxDegradedOpt = Annotated[
    float,
    typer.Option("--max-degraded", help="exit 3 when more than this share of the questions fell back (degraded: "
                 "an LM failed, a bound cut a step) or any raised; exit 4 when none was answered", min=0.0, max=1.0),
]


@app.command("eval")
def eval_command(
    skb: SkbOpt,
    out: Annotated[Path, typer.Option(help="run directory, e.g. runs/afr-val (resumed if it exists)")],
    split: SplitOpt = "val",
    limit: LimitOpt = None,
    qa_dir: QADirOpt = None,
    system: Annotated[
        str | None, typer.Option(help="system preset, e.g. afr, afr:steps=1-7 (default: afr, or the --program's own)")
    ] = None,
    config: ConfigOpt = None,
    steps: StepsOpt = None,
    lm: LmOpt = None,
    reranker: RerankerOpt = None,
    concurrency: ConcurrencyOpt = None,
    program: Annotated[
        Path | None, typer.Option(help="optimised program from `autofocus optimize`", exists=True)
    ] = None,
    force_new: ForceOpt = False,
    progress: ProgressOpt = True,
    replay: Annotated[
        Path | None,
        typer.Option(help="reuse the step 1-2 outputs of this run directory (no LM calls for them)", exists=True),
    ] = None,
    lm_timeout: LmTimeoutOpt = None,
    lm_retries: LmRetriesOpt = None,
    deadline: DeadlineOpt = None,
    max_degraded: MaxDegradedOpt = 0.1,
) -> None:
    """Evaluate a system on a QA split: traces.jsonl + manifest.json, resumable, then the summary.

    With ``--program``, the saved program's system and config are used (``--config`` replaces the
    config; the other options apply on top) and its prompts/demos are loaded into every copy.
    """
    from autofocus.evaluation.program_runs import evaluate_program
    from autofocus.evaluation.runner import RunMismatchError
    from autofocus.local_lm import startup
    from autofocus.options import EvalOptions

    cfg = config_or_exit(config, lm, program_file=program, steps=steps, reranker=reranker,
                              concurrency=concurrency)  # fmt: skip
    cfg = runtime.with_waits(cfg, lm_timeout, lm_retries, deadline)
    items = load_split(skb, split, qa_dir)
    prog = open_program(skb, system, cfg, program)
    options = EvalOptions(split=split, limit=limit, resume=not force_new, qa_dir=qa_dir, replay=replay)
    try:
        with RichReporter(console, err_console, bars=progress) as reporter, startup.listening(
            lambda kind, text: reporter.note(text) if kind != "done" else None  # what the run waits for, and why
        ):
            done = evaluate_program(prog, out, options, questions=items, reporter=reporter)
    except RunMismatchError as exc:
        raise fail(str(exc), EXIT_MISMATCH) from None
    except OSError as exc:
        raise unwritable(exc, out) from None
    except OPEN_ERRORS as exc:  # a --replay run that is missing or damaged, or a system without steps 1-2
        print_error(err_console, exc)
        raise typer.Exit(1) from None
    print_run(console, done.summary, f"{prog.system} on {split}", done.run.path, done.plots)
    if done.interrupted:
        err_console.print(f"[yellow]Interrupted; run the same command again to finish {safe(out)}.[/]")
        raise typer.Exit(EXIT_INTERRUPTED)
    exit_by_answers({prog.system: done.summary}, max_degraded, out)


@app.command("compare")
def compare_command(
    skb: SkbOpt,
    systems: Annotated[
        str,
        typer.Option(help="comma-separated system specs, the first is the baseline: afr,afr:steps=1-7,vss"),
    ],
    out: Annotated[Path, typer.Option(help="directory for one run per system and the comparison")],
    split: SplitOpt = "test",
    limit: LimitOpt = None,
    qa_dir: QADirOpt = None,
    config: ConfigOpt = None,
    lm: LmOpt = None,
    concurrency: ConcurrencyOpt = None,
    force_new: ForceOpt = False,
    progress: ProgressOpt = True,
    lm_timeout: LmTimeoutOpt = None,
    lm_retries: LmRetriesOpt = None,
    deadline: DeadlineOpt = None,
    max_degraded: MaxDegradedOpt = 0.1,
) -> None:
    """Run several systems on the same questions and print one table, with paired tests against the first."""
    from autofocus.console import print_comparison
    from autofocus.evaluation.program_runs import compare_systems, run_dir_name, split_systems
    from autofocus.evaluation.runner import RunMismatchError
    from autofocus.options import EvalOptions

    specs = split_systems(systems)
    if len(specs) < 2:
        raise fail("--systems needs at least two systems, e.g. afr,afr:steps=1-7")
    if len({run_dir_name(s) for s in specs}) != len(specs):
        raise fail(f"--systems has repeated systems: {', '.join(specs)}")
    cfg = runtime.with_waits(runtime.load_config(config, lm, concurrency=concurrency), lm_timeout, lm_retries, deadline)
    load_split(skb, split, qa_dir)  # fails here, before any system starts
    options = EvalOptions(split=split, limit=limit, resume=not force_new, qa_dir=qa_dir)
    try:
        with RichReporter(console, err_console, bars=progress) as reporter:
            done = compare_systems(skb, specs, out, cfg, options, reporter=reporter)
    except RunMismatchError as exc:
        raise fail(str(exc), EXIT_MISMATCH) from None
    except OSError as exc:
        raise unwritable(exc, out) from None
    except OPEN_ERRORS as exc:  # a damaged index, an unknown system or setting
        print_error(err_console, exc)
        raise typer.Exit(1) from None
    for spec, run in done.runs.items():
        print_run(console, run.summary, f"{spec} on {split}", run.run.path, run.plots)
    if done.interrupted:
        err_console.print(f"[yellow]Interrupted during {safe(done.interrupted)}; run the same command again to finish.[/]")
        raise typer.Exit(EXIT_INTERRUPTED)
    print_comparison(done.rows, console)
    console.print(f"Comparison in {safe(Path(out) / 'comparison.md')} and {safe(Path(out) / 'comparison.csv')}")
    exit_by_answers({spec: run.summary for spec, run in done.runs.items()}, max_degraded, out)
