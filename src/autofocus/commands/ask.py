"""``autofocus ask``: answer one question, with the trace on request."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from autofocus.cli_app import (
    EXIT_ERROR,
    EXIT_NOTHING,
    EXIT_PARTIAL,
    DeadlineOpt,
    LmRetriesOpt,
    LmTimeoutOpt,
    app,
    config_or_exit,
)
from autofocus.console import OPEN_ERRORS, make_console, print_error, safe
from autofocus.cypher.render import to_cypher
from autofocus.query_graph import QueryGraph
from autofocus.skb.documents import path_text


@app.command()
def ask(
    question: Annotated[str, typer.Argument(help="the question in natural language")],
    skb: Annotated[Path, typer.Option(help="SKB directory (or STaRK processed directory)")],
    system: Annotated[str | None, typer.Option(help="system preset, e.g. afr, afr:steps=1-7, vss (default: afr, or "
                                               "the --program's own)")] = None,
    lm: Annotated[str | None, typer.Option(help="DSPy LM string for every step, or local / local-small")] = None,
    config: Annotated[Path | None, typer.Option(help="config JSON (e.g. from `autofocus tune`)")] = None,
    program: Annotated[Path | None, typer.Option(help="optimised program from `autofocus optimize`")] = None,
    reranker: Annotated[str | None, typer.Option(help="auto|none|pointwise|listwise|pairwise|tournament")] = None,
    query_format: Annotated[str | None, typer.Option(help="cypher|typed")] = None,
    k: Annotated[int | None, typer.Option("--k", "-k", help="answers to return")] = None,
    trace: Annotated[bool, typer.Option("--trace", help="print the full trace")] = False,
    trace_json: Annotated[Path | None, typer.Option(help="write the trace as JSON here")] = None,
    query: Annotated[
        str | None, typer.Option(help="a step-2 query (Cypher) to run steps 3-8 on instead of the LM's (afr)")
    ] = None,
    lm_timeout: LmTimeoutOpt = None,
    lm_retries: LmRetriesOpt = None,
    deadline: DeadlineOpt = None,
) -> None:
    """Print the ranked answers with names and the strand each came from; exit 3 when a step fell back
    (degraded: an LM call gave no answer, a bound cut a step), 4 when no LM call answered (the answers
    are a fallback's alone), 1 for a question over the length bound or a damaged index."""
    from autofocus import resident
    from autofocus.index.store import IndexError_
    from autofocus.runtime import with_waits
    from autofocus.usage import QuestionTooLongError

    console, err_console = make_console(), make_console(stderr=True)  # made here: a worker's are its client's
    cfg = config_or_exit(config, lm, program_file=program, reranker=reranker, query_format=query_format, k=k)
    cfg = with_waits(cfg, lm_timeout, lm_retries, deadline)
    try:
        prog = resident.opened(skb, system, cfg, program)  # in `lm serve`'s worker, kept open
    except OPEN_ERRORS as exc:  # a damaged SKB or index, an unknown system
        print_error(err_console, exc)
        raise typer.Exit(EXIT_ERROR) from None
    if query is not None and not hasattr(prog, "recorded"):
        print_error(err_console, ValueError(f"--query needs a system with a query step (afr), not {prog.system}"))
        raise typer.Exit(1)
    recorded = getattr(prog, "recorded", None)
    if query is not None:
        prog.recorded = {question: (None, query, None)}  # step 1 still asks the LM
    from autofocus.local_lm.models import ModelError
    from autofocus.local_lm.server_http import LocalServerError

    try:
        with waiting_shown(err_console):
            pred = prog(question=question)  # under the config's question deadline (RetrievalProgram)
    except (QuestionTooLongError, IndexError_, LocalServerError, ModelError) as exc:
        # over the length bound; an index damaged or unbuilt; the offline LM could not be started or reached
        print_error(err_console, exc)
        raise typer.Exit(EXIT_ERROR) from None
    finally:
        if query is not None:
            prog.recorded = recorded  # a program kept open (``resident``) answers the next ask from its LM
    show_prediction(prog.kb.skb, pred, console)
    for d in pred.trace.degraded:
        err_console.print(f"[yellow]degraded: {safe(d.step)}: {safe(d.error)} (these answers come from a fallback)[/]")
    if trace:
        show_trace(prog.kb.skb, pred.trace, console)
    if trace_json:
        from autofocus.evaluation.traces import to_jsonable
        from autofocus.redact import redact

        # numpy arrays (the grounded set) as lists, long ones cut to their head, as in traces.jsonl
        trace_json.write_text(redact(json.dumps(to_jsonable(pred.trace), indent=2)))
    if pred.trace.degraded and pred.trace.lm_calls and not pred.trace.tokens[0]:
        raise typer.Exit(EXIT_NOTHING)  # no LM call answered (a failed call counts no tokens): nothing is the method's
    if pred.trace.degraded:
        raise typer.Exit(EXIT_PARTIAL)


@contextlib.contextmanager
def waiting_shown(out: Console) -> Iterator[None]:
    """What the question waits for before its first step (the offline LM starting, its prompt cache
    restored: ``local_lm.startup``) beside a spinner on ``out``; notes (why a first run is slower) kept."""
    from autofocus.local_lm import startup

    status = out.status("")

    def hear(kind: str, text: str) -> None:
        if kind == "wait":
            status.update(safe(text))
            status.start()
        elif kind == "done":
            status.stop()
        else:
            out.print(f"[dim]{safe(text)}[/]")

    try:
        with startup.listening(hear):
            yield
    finally:
        status.stop()


def show_prediction(skb, pred, out: Console, limit: int = 20) -> None:
    strands = pred.trace.data.get("strand", {})
    table = Table(title=f"Answers to: {safe(pred.trace.question)}")
    for col in ("rank", "id", "type", "name", "strand"):
        table.add_column(col)
    for rank, node in enumerate(pred.ranked_ids[:limit], 1):
        table.add_row(str(rank), str(node), safe(skb.type_of(node)), safe(skb.name(node)[:70]),
                      safe(strands.get(str(node), "")))
    out.print(table)


def show_trace(skb, tr, out: Console) -> None:
    d = tr.data
    # everything below comes from the SKB or the LM: ``safe``, or rich reads `[author_writes_paper]` as a style
    probs = d.get("target_type_probs")
    scored = f"   (P: {', '.join(f'{t} {p:.2f}' for t, p in probs.items())})" if probs else ""
    out.print(f"[bold]target type[/]: {safe(d.get('target_type'))}{safe(scored)}   "
              f"[bold]Cypher target type[/]: {safe(d.get('cypher_target_type'))}")  # fmt: skip
    if d.get("cypher"):
        constrained = f" (decoding constrained: {d['constrained']})" if d.get("constrained") else ""
        out.print(f"[bold]query[/]{safe(constrained)}:\n" + safe(d["cypher"]))
    for e in tr.events:
        if e.step == "3_repair":
            out.print(f"  [green]repair[/] {safe(e.kind)}: {safe(e.detail[:200])}")
    # the query as grounded: after repair and any relaxation (``program.steps.grounded_strand``)
    grounded = d.get("relaxed_query_graph") or d.get("repaired_query_graph")
    if grounded:
        out.print("[bold]query as grounded[/]:\n" + safe(to_cypher(QueryGraph.model_validate(grounded))))
    if grounded or d.get("query_graph"):
        from autofocus.cypher.render import console_cypher

        qg_db = QueryGraph.model_validate(grounded or d["query_graph"])
        out.print("[bold]for the database[/] (the graph `autofocus skb export` writes; paste into its console):\n"
                  + safe(console_cypher(qg_db, skb.schema)))  # fmt: skip
    for rung in d.get("relaxed") or []:
        out.print(f"  [yellow]relaxed[/] {safe(rung[:200])}")
    qg = grounded or d.get("query_graph") or {}
    for t in qg.get("triplets", []):
        arrow = f"({t['head']})-[{t['rel']}]->({t['tail']}){'' if t.get('directed', True) else ' (undirected)'}"
        out.print(f"  triplet: {safe(arrow)}")
    if d.get("alpha"):
        why = ", ".join(d["alpha"]["why"]) or "full evidence"
        out.print(safe(f"  grounded slots: alpha = {d['alpha']['value']:.2f} ({why}); step 7 searched {d.get('step7_types')}"))
    if d.get("merge"):
        m = d["merge"]
        how = ("grounded first: the query's constants are names the question gives" if m["order"] == "block"
               else f"by similarity, grounded + {m['grounded_bonus']} (weaker evidence)")
        out.print(safe(f"  order: {how}"))
    for var, sc in (d.get("symbol_candidates") or {}).items():
        names = ", ".join(skb.name(i)[:30] for i in sc["ids"][:5])
        out.print(safe(f"  symbol {var} <- {sc['search']!r}: {names}"))
    for r in d.get("grounding_rounds", []):
        out.print(f"  grounding: l = {r['cut']:>3}  |C_cypher| = {r['num_target']}")
    for node, paths in (d.get("support") or {}).items():
        for p in paths[:1]:
            out.print(safe(f"  support {skb.name(int(node))[:30]}: {path_text(skb, p, 25)}"))
    if d.get("rerank"):
        out.print(safe(f"  rerank: {json.dumps(d['rerank'], default=str)[:400]}"))
    if d.get("startup"):
        out.print(safe(f"  start-up, before the steps: {startup_text(d['startup'])}"))
    steps = Table(title="per step")
    for col in ("step", "seconds", "LM calls", "tokens in", "tokens out"):
        steps.add_column(col)
    for name, s in tr.steps.items():
        steps.add_row(safe(name), f"{s.seconds:.3f}", str(s.lm_calls), str(s.input_tokens), str(s.output_tokens))
    out.print(steps)
    for e in tr.events:
        if e.step != "3_repair":
            out.print(f"  [yellow]event[/] {safe(e.step)}: {safe(e.kind)} {safe(e.detail[:150])}")
    for g in tr.degraded:
        out.print(f"  [red]degraded[/] {safe(g.step)}: {safe(g.error[:300])}")


def startup_text(phases: dict) -> str:
    """A trace's start-up (``local_lm.startup``) in words: the LM server, then the prompt cache."""
    parts = []
    if server := phases.get("lm_server"):
        how = {"started": "started", "attached": f"in use at {server.get('address')}"}.get(server.get("how"), "waited for")
        parts.append(f"offline LM {how} ({server['seconds']:.1f} s)")
    if cache := phases.get("prompt_cache"):
        if cache.get("evaluated"):
            parts.append(f"prompts' shared start evaluated, {cache['evaluated']} tokens, and saved ({cache['seconds']:.1f} s: "
                         "the first run with these prompts; later runs restore it)")
        else:
            parts.append(f"prompt cache restored, {cache.get('restored', 0)} starts ({cache['seconds']:.1f} s)")
    return "; ".join(parts) or "none"
