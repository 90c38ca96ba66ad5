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
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from autofocus.cli_app import app
from autofocus.runtime import open_kb

console = Console()
err_console = Console(stderr=True)
VERBALISE_MAX_TOKENS = 256  # one question


def qa_folder(skb: Path) -> tuple[Path, str]:
    """Where the SKB's whole-file splits live and the file name the ``synthetic`` split takes there."""
    from autofocus.skb.qa import find_qa
    from autofocus.synthetic import QA_FILE, SPLIT

    main = find_qa(skb).main  # locates files only: nothing is read
    if main is None:
        return skb, QA_FILE
    return main.parent, f"{main.stem}_{SPLIT}.csv"


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
    lm: Annotated[str | None, typer.Option(help="LM that writes the questions (default: the config's)")] = None,
    config: Annotated[Path | None, typer.Option(help="config JSON (embedder, LM)", exists=True)] = None,
    threads: Annotated[int, typer.Option(help="LM calls in parallel", min=1)] = 1,
    export_chat: Annotated[
        Path | None, typer.Option(help="also write step 2 fine-tuning data (chat JSONL) to this file")
    ] = None,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="show progress bars")] = True,
) -> None:
    """Sample query patterns from the graph, execute them, self-check them with steps 3-5 and have an
    LM write each as a question: a QA split for `optimize` and `tune` without labelled data."""
    import dspy

    from autofocus.lm import get_lm
    from autofocus.runtime import load_config
    from autofocus.synthetic import export_chat as write_chat
    from autofocus.synthetic import synthesise, write_synthetic

    cfg = load_config(config, lm=lm)
    kb = open_kb(skb, cfg.embedder, cfg.index_kind, cfg.doc_budget_tokens)
    folder, qa_name = (out, "qa_synthetic.csv") if out is not None else qa_folder(skb)
    task_lm = get_lm(cfg.lm.default, temperature=cfg.lm.temperature, max_tokens=VERBALISE_MAX_TOKENS)
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=err_console, disable=not progress)
    tasks = {"patterns": bar.add_task("self-checked patterns", total=None),
             "questions": bar.add_task("questions asked of the LM", total=None)}
    with bar, dspy.context(lm=task_lm):
        result = synthesise(kb, n, seed=seed, max_answers=max_answers, max_triplets=max_triplets,
                            filter_rate=filter_rate, threads=threads,
                            tick=lambda stage, k: bar.advance(tasks[stage], k))
    if not result.pairs:
        err_console.print("[red]No question survived; see the rejections above (is the graph empty?)[/]")
    paths = write_synthetic(result, kb.skb, folder, qa_name)
    console.print(_summary_table(result))
    console.print(_coverage_table(result, kb))
    for pair in result.pairs[:5]:
        console.print(escape(f"  [{pair.pattern.target_type}, {pair.pattern.shape}] {pair.question}"))
    if export_chat is not None:
        console.print(f"Chat fine-tuning data: {write_chat(result, kb.skb, export_chat)}")
    where = "" if out is None else f" --qa-dir {out}"
    console.print(f"Wrote {paths['qa']}, {paths['patterns'].name} and {paths['summary'].name}; use them with "
                  f"--split synthetic / --train 'synthetic[:{max(1, len(result.pairs) * 4 // 5)}]'{where}")


def _summary_table(result: Any) -> Table:
    s = result.summary()
    table = Table(title=f"Synthesis: {s['questions']} questions")
    table.add_column("what")
    table.add_column("count", justify="right")
    for key in ("sampled", "self_checked", "verbalised", "questions", "lm_calls", "input_tokens", "output_tokens"):
        table.add_row(key.replace("_", " "), str(s[key]))
    table.add_row("minutes (LM)", f"{s['minutes']:.2f} ({s['lm_minutes']:.2f})")
    for reason, count in sorted(s["rejected"].items(), key=lambda kv: -kv[1]):
        table.add_row(f"[dim]rejected: {reason}[/]", str(count))
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
            table.add_row(kind, name, f"{ours.get(name, 0) / total_ours:.0%} ({ours.get(name, 0)})",
                          f"{count / total_graph:.0%}")
    return table
