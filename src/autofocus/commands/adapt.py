"""``autofocus adapt``: train a reranker and a type reader on the knowledge base's own questions.

Example (no labels; docs/adapt.md):
    autofocus adapt --skb kb/movies --templates 1500 --out runs/adapted.json
    autofocus eval --skb kb/movies --split test --program runs/adapted.json --lm local --out runs/adapted-test
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from autofocus.cli_app import QADirOpt, app, choice, config_or_exit, fail
from autofocus.console import OPEN_ERRORS, RichReporter, make_console, print_error, safe

console = make_console()
err_console = make_console(stderr=True)


@app.command("adapt")
def adapt_command(
    skb: Annotated[Path, typer.Option(help="SKB directory (or STaRK processed directory)", exists=True)],
    out: Annotated[Path, typer.Option(help="program file to write; its models go to <stem>.trained/ beside it")] = Path(
        "runs/adapted.json"),
    split: Annotated[
        list[str] | None, typer.Option(help="training questions: a split of the SKB or of --qa-dir (repeatable; "
                                            "synthetic: from `autofocus synth`); labelled splits make a labelled adaptation")
    ] = None,
    qa_dir: QADirOpt = None,
    templates: Annotated[
        int, typer.Option(help="also write this many template questions from the graph first (no LM)", min=0)
    ] = 0,
    questions: Annotated[str, typer.Option(help="who writes the --templates questions: templates (over the schema's "
                                                "labels), paraphrase (plainer words, no LM), lm (the LM, from nodes' "
                                                "text and relations) or mix (paraphrase and lm)")] = "templates",
    lm: Annotated[str | None, typer.Option(help="LM of --questions lm|mix (default: the config's)")] = None,
    lm_share: Annotated[float, typer.Option(help="with --questions mix, the LM's share of the questions",
                                            min=0.0, max=1.0)] = 0.5,
    lm_threads: Annotated[int, typer.Option(help="LM calls in parallel", min=1)] = 1,
    system: Annotated[str, typer.Option(help="AF-Retriever preset to adapt")] = "afr",
    config: Annotated[Path | None, typer.Option(help="config JSON to adapt (embedder, settings)", exists=True)] = None,
    run: Annotated[
        list[Path] | None, typer.Option(help="an `autofocus eval` run on training questions: its steps 1-7 lists are "
                                             "mined too (repeatable)", exists=True, file_okay=False)
    ] = None,
    reranker: Annotated[bool, typer.Option("--reranker/--no-reranker", help="train step 8's reranker")] = True,
    reranker_kind: Annotated[str, typer.Option(help="bi-encoder (the MiniLM embedder fine-tuned; better on both "
                                                    "benchmarks) or cross-encoder (a new head on the MiniLM)")] = "bi-encoder",
    type_reader: Annotated[bool, typer.Option("--type-reader/--no-type-reader", help="fit the type reader")] = True,
    base: Annotated[Path | None, typer.Option(help="model folder the cross-encoder starts from (default: the packaged "
                                                   "MiniLM with a new head)", exists=True, file_okay=False)] = None,
    epochs: Annotated[int, typer.Option(help="reranker epochs (the best on held-out questions is kept)", min=1)] = 1,
    negatives: Annotated[int | None, typer.Option(help="hard negatives per question (default: 3 for a bi-encoder, "
                                                       "7 for a cross-encoder)", min=1)] = None,
    val_share: Annotated[float, typer.Option(help="share of the questions held out", min=0.0, max=0.5)] = 0.15,
    seed: Annotated[int, typer.Option(help="seed of every random choice")] = 0,
    judge: Annotated[
        list[str] | None, typer.Option(help="questions that read like users' (lm: the LM writes them now about "
                                            "held-out nodes, label-free; labelled val; or LM-written ones in a split "
                                            "of --judge-dir; repeatable): they choose the epoch and the fusion weight "
                                            "and decide whether the reranker and the type reader are used")
    ] = None,
    judge_dir: Annotated[Path | None, typer.Option(help="folder of the --judge splits (default: the SKB's)",
                                                   exists=True, file_okay=False)] = None,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="show progress bars")] = True,
) -> None:
    """Fit autofocus to this knowledge base: mine candidate lists for its questions with steps 3-7, train a
    reranker for step 8 and a type reader for step 1, and write a program that uses them."""
    from autofocus.adapt import adapt
    from autofocus.adapt.questions import SOURCES
    from autofocus.config import RERANKER_KINDS
    from autofocus.options import AdaptOptions

    choice(reranker_kind, RERANKER_KINDS, "--reranker-kind")
    choice(questions, SOURCES, "--questions")

    if not split and not templates:
        raise fail("no training questions: give --split (e.g. --split synthetic --qa-dir DIR) or --templates N")
    cfg = config_or_exit(config)
    options = AdaptOptions(out=out, system=system, splits=tuple(split or ()), qa_dir=qa_dir, templates=templates,
                           questions=questions, lm=lm, lm_share=lm_share, lm_threads=lm_threads,
                           runs=tuple(run or ()), reranker=reranker, reranker_kind=reranker_kind, type_reader=type_reader,
                           base=base, epochs=epochs,
                           negatives=negatives, val_share=val_share, seed=seed, judge=tuple(judge or ()),
                           judge_dir=judge_dir)  # fmt: skip
    try:
        with RichReporter(console, bars=progress) as reporter:
            result = adapt(skb, cfg, options, reporter)
    except OPEN_ERRORS as exc:  # a damaged SKB or index, an unknown split, no usable questions
        print_error(err_console, exc)
        raise typer.Exit(1) from None
    console.print(_table(result.summary))
    console.print(safe(f"Wrote {result.program} and {result.folder}/. Run it with --program {result.program}, "
                       f"e.g. autofocus eval --skb {skb} --split test --program {result.program}"))


def _table(s: dict) -> Table:
    table = Table(title="Adaptation")
    table.add_column("part")
    table.add_column("what", overflow="fold")
    q = s["questions"]
    table.add_row("questions", f"{q['total']} ({', '.join(f'{k}: {v}' for k, v in q['by_source'].items())})")
    w = s.get("written") or {}
    if w.get("lm"):
        lm = w["lm"]
        table.add_row("LM questions", f"{lm['questions']} from {lm['nodes']} nodes ({lm['cached']} cached, {lm['asked']} "
                                      f"asked in {lm['seconds']} s); rejected: {lm['rejected'] or 'none'}")
    for source, m in s.get("mining", {}).items():
        table.add_row(f"lists: {source}", f"{m['questions']} questions, answer first {100 * m['answer_first']:.0f}%, "
                                          f"listed {100 * m['answer_listed']:.0f}%")
    r = s.get("reranker")
    if r:
        table.add_row("reranker", f"{r.get('kind', 'cross-encoder')}: {r['pairs']} pairs ({r['positive_pairs']} answers), "
                                  f"{r['epochs']} epochs, {r['minutes']} min")
        a = r.get("val_after", {})
        if a:
            table.add_row("held-out MRR@10", f"{r['base_mrr@10'] if r.get('base_mrr@10') is not None else float('nan'):.3f} steps 3-7 -> "
                                              f"{a.get('mrr@10', float('nan')):.3f} reranked ({r['val_questions']} questions)")
        f = r.get("fusion")
        if f:
            table.add_row("fusion weight", f"{f['used']:.2f} ({f['n']} questions)" if f.get("fitted", True)
                          else f"{f['used']:.2f} (the default: {f['why']})")
        if "judged" in r:
            table.add_row("step 8", _decision(r["judged"]))
    t = s.get("type_reader")
    if t:
        acc = "-" if t["val_accuracy"] is None else f"{100 * t['val_accuracy']:.0f}%"
        table.add_row("type reader", f"{t['train_questions']} questions, held-out accuracy {acc}")
        if "judged" in t:
            table.add_row("step 1", _decision(t["judged"]))
    held = s.get("held_out")
    if held and not held["questions"]:
        table.add_row("held out", f"none: {held['why']}; defaults used")
    parts = ", ".join(f"{k} {v}" for k, v in s.get("stage_minutes", {}).items())
    table.add_row("minutes", f"{s['minutes']} ({parts})" if parts else str(s["minutes"]))
    return table


def _decision(judged: dict) -> str:
    """Whether a trained part is used, and why (``adapt.judge``)."""
    return f"{'uses' if judged['used'] else 'does not use'} it: {judged['reason']}"
