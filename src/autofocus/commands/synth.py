"""``autofocus synth``: training questions synthesised from the SKB's own graph (no labels needed).

Writes ``qa_synthetic.csv`` (the whole-file split ``synthetic``), ``synthetic_patterns.jsonl`` and
``synthetic_summary.json`` beside the SKB's QA file, or into ``--out DIR`` (then give commands
``--qa-dir DIR``). See docs/synthetic.md.

Example:
    autofocus synth --skb data/demo -n 100 --lm local
    autofocus optimize --skb data/demo --steps cypher --train 'synthetic[:80]' --val 'synthetic[80:]' \
        --metric grounded_f1 --lm local --out runs/optimize/cypher-synthetic.json --test test
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from autofocus.cli_app import EXIT_PARTIAL, LmRetriesOpt, LmTimeoutOpt, app
from autofocus.console import OPEN_ERRORS, make_console, print_error, safe

console = make_console()
err_console = make_console(stderr=True)


@app.command("synth")
def synth_command(
    skb: Annotated[Path, typer.Option(help="SKB directory (or STaRK processed directory)", exists=True)],
    n: Annotated[int, typer.Option("-n", "--n", help="questions to synthesise", min=1)] = 100,
    out: Annotated[
        Path | None, typer.Option(help="folder for the files (default: beside the SKB's QA file); "
                                  "commands read it with --qa-dir", file_okay=False)
    ] = None,
    seed: Annotated[int, typer.Option(help="sampling seed")] = 0,
    max_answers: Annotated[int, typer.Option(help="largest answer set of a question", min=1)] = 20,
    max_triplets: Annotated[int, typer.Option(help="triplets per pattern (1 to 3)", min=1, max=3)] = 3,
    filter_rate: Annotated[
        float, typer.Option(help="share of patterns given an attribute filter anyway", min=0.0, max=1.0)
    ] = 0.3,
    clue_share: Annotated[
        float, typer.Option(help="about this share of the questions narrowed to one answer by a clue from its "
                                 "text (questions that need the text too; only patterns with 2+ answers can be)",
                            min=0.0, max=1.0)
    ] = 0.3,
    clue_kind: Annotated[
        str, typer.Option(help="fact: the LM states what the answer's text says (STaRK's way, one LM call more); "
                               "phrase: a rare phrase of the text, no LM call")
    ] = "fact",
    round_trip: Annotated[
        bool, typer.Option("--round-trip/--no-round-trip",
                           help="keep a question only when the program's own steps 1-5 on it ground its answers "
                                "(drops questions the LM wrote wrong; steps 1-2 are LM calls)")
    ] = False,
    round_trip_precision: Annotated[
        float, typer.Option(help="with --round-trip, also drop a question whose answers are fewer than this share of "
                                 "what it grounds (its text admits other nodes: an incomplete label); 0: recall only",
                            min=0.0, max=1.0)
    ] = 0.5,
    lm: Annotated[str | None, typer.Option(help="LM that writes the questions (default: the config's)")] = None,
    config: Annotated[Path | None, typer.Option(help="config JSON (embedder, LM)", exists=True)] = None,
    threads: Annotated[int, typer.Option(help="LM calls in parallel", min=1)] = 1,
    writer: Annotated[
        str, typer.Option(help="lm: the LM writes each question; template: templates over the schema's labels "
                               "(no LM, thousands a second, plainer wording: training data for `autofocus adapt`); "
                               "paraphrase: templates in plainer words than the schema's labels and rarest phrases")
    ] = "lm",
    export_chat: Annotated[
        Path | None, typer.Option(help="also write step 2 fine-tuning data (chat JSONL) to this file")
    ] = None,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="show progress bars")] = True,
    lm_timeout: LmTimeoutOpt = None,
    lm_retries: LmRetriesOpt = None,
) -> None:
    """Sample query patterns from the graph, execute them, self-check them with steps 3-5 and have an
    LM write each as a question: a QA split for `optimize` and `tune` without labelled data."""
    from autofocus.options import SynthOptions
    from autofocus.runtime import load_config, with_waits
    from autofocus.synthetic.run import run_synthesis

    cfg = with_waits(load_config(config, lm=lm), lm_timeout, lm_retries)
    options = SynthOptions(
        seed=seed, max_answers=max_answers, max_triplets=max_triplets, filter_rate=filter_rate, clue_share=clue_share,
        clue_kind=clue_kind, round_trip=round_trip, round_trip_precision=round_trip_precision, threads=threads,
        writer=writer, out=out, chat=export_chat,
    )  # fmt: skip
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=err_console, disable=not progress)
    tasks = {"patterns": bar.add_task("self-checked patterns", total=None),
             "questions": bar.add_task("questions written", total=None)}
    try:
        with bar:
            done = run_synthesis(skb, cfg, n, options, tick=lambda stage, k: bar.advance(tasks[stage], k))
    except OPEN_ERRORS as exc:  # a damaged SKB or index, an LM spec that names nothing
        print_error(err_console, exc)
        raise typer.Exit(1) from None
    result = done.result
    console.print(_summary_table(result))
    console.print(_coverage_table(result, done.kb))
    for pair in result.pairs[:5]:
        console.print(safe(f"  [{pair.pattern.target_type}, {pair.pattern.shape}] {pair.question}"))
    if done.chat is not None:
        console.print(f"Chat fine-tuning data: {safe(done.chat)}")
    paths = done.paths
    where = "" if out is None else f" --qa-dir {out}"
    console.print(safe(f"Wrote {paths['qa']}, {paths['patterns'].name} and {paths['summary'].name}; use them with "
                       f"--split synthetic / --train 'synthetic[:{max(1, len(result.pairs) * 4 // 5)}]'{where}"))
    if result.stopped:
        err_console.print(f"[red]Stopped after {len(result.pairs)} of {n} questions: {safe(result.stopped)}. Fix the "
                          "LM and run the command again.[/]")
        raise typer.Exit(EXIT_PARTIAL)  # the LM failed; the files hold what was made before
    if not result.pairs:
        err_console.print("[red]No question survived; see the rejections above (is the graph empty?)[/]")


def _summary_table(result: Any) -> Table:
    s = result.summary()
    table = Table(title=f"Synthesis: {s['questions']} questions")
    table.add_column("what")
    table.add_column("count", justify="right")
    for key in ("sampled", "self_checked", "verbalised", "questions", "lm_calls", "input_tokens", "output_tokens"):
        table.add_row(key.replace("_", " "), str(s[key]))
    table.add_row("minutes (LM)", f"{s['minutes']:.2f} ({s['lm_minutes']:.2f})")
    for reason, count in sorted(s["rejected"].items(), key=lambda kv: -kv[1]):
        table.add_row(f"[dim]rejected: {safe(reason)}[/]", str(count))
    return table


def _coverage_table(result: Any, kb: Any) -> Table:
    """Questions per target type and triplets per edge type, next to the graph's own shares."""
    cov = result.coverage()
    table = Table(title="Coverage: share of questions (target types) and of triplets (edge types)")
    for col in ("kind", "name", "synthetic", "graph"):
        table.add_column(col, justify="left" if col in ("kind", "name") else "right")
    skb = kb.skb
    types = Counter({t: len(skb.ids_of_type(t)) for t in skb.schema.answer_types})
    edges = Counter({e: skb.graph.num_edges(e) for e in skb.graph.edge_types})
    for kind, ours, graph in (("target type", cov["target_types"], types), ("edge type", cov["edge_types"], edges)):
        total_ours, total_graph = sum(ours.values()) or 1, sum(graph.values()) or 1
        for name, count in graph.most_common():
            table.add_row(kind, safe(name), f"{ours.get(name, 0) / total_ours:.0%} ({ours.get(name, 0)})",
                          f"{count / total_graph:.0%}")
    return table
