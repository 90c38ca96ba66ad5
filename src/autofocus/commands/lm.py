"""``autofocus lm setup | check | list``: the offline LM and any DSPy LM string, from the command line."""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.table import Table

from autofocus.cli_app import command_group
from autofocus.console import make_console, safe

console = make_console()
lm_app = command_group("lm", "Set up, check and list LMs (offline GGUF models or any DSPy model string).")


@lm_app.command("setup")
def setup_cmd(
    model: Annotated[list[str] | None, typer.Option(help="local, local-small or all (repeatable)")] = None,
    skip_server: Annotated[bool, typer.Option(help="only provision the GGUF model(s)")] = False,
    native: Annotated[bool, typer.Option(help="compile llama-server for this CPU (-march=native, 10-15 min on 2 cores)")] = False,
) -> None:
    """Set up llama.cpp's server (a prebuilt wheel; compiled once where none fits) and assemble + verify the GGUF model(s)."""
    from autofocus.local_lm.models import CATALOG, ModelError
    from autofocus.local_lm.server_build import ServerBuildError
    from autofocus.local_lm.setup import setup

    chosen = model or ["local"]
    unknown = [m for m in chosen if m not in CATALOG and m != "all"]
    if unknown:
        raise typer.BadParameter(f"unknown model(s) {unknown}; choose from {[*CATALOG, 'all']}")
    keys = list(CATALOG) if "all" in chosen else list(dict.fromkeys(chosen))
    try:
        ready = setup(keys, install_server=not skip_server, native=native, log=lambda msg: console.print(safe(msg)))
    except (ServerBuildError, ModelError) as exc:
        console.print(f"[red]cannot set up the offline LM:[/red] {safe(exc)}")
        raise typer.Exit(1) from exc
    for path in ready:
        console.print(f"[green]ready[/green] {safe(path)}")


_DISTRACTORS = ("Berlin", "42", "blue", "Isaac Newton", "1999", "a hammer", "photosynthesis", "London", "none")


@lm_app.command("check")
def check_cmd(
    lm: Annotated[str, typer.Option(help="LM spec: local, local-small, local:/file.gguf or provider/model")] = "local",
    question: Annotated[str, typer.Option(help="question for the one-line Predict")] = "What is the capital of France?",
    max_tokens: Annotated[int, typer.Option(help="generation limit")] = 64,
    repeat: Annotated[int, typer.Option(min=1, help="timed repetitions (no cache); the median is reported")] = 3,
) -> None:
    """Start the LM, time `dspy.Predict("question -> answer")` and yes/no scoring; print latency and tokens."""
    import statistics

    import dspy

    from autofocus.lm import get_lm, yes_probabilities
    from autofocus.local_lm.models import ModelError
    from autofocus.local_lm.server import LocalServerError

    t0 = time.perf_counter()
    try:
        model = get_lm(lm, cache=False, max_tokens=max_tokens)
    except (ModelError, LocalServerError, ValueError) as exc:
        console.print(f"[red]cannot start {safe(repr(lm))}:[/red] {safe(exc)}")
        raise typer.Exit(1) from exc
    console.print(f"LM [bold]{safe(model.model)}[/bold] ready in {time.perf_counter() - t0:.2f} s "
                  f"({model.kwargs.get('api_base') or 'provider default endpoint'})")  # fmt: skip
    seconds = []
    for _ in range(repeat):
        t1 = time.perf_counter()
        with dspy.context(lm=model):
            pred = dspy.Predict("question -> answer")(question=question)
        seconds.append(time.perf_counter() - t1)
    usage = model.history[-1].get("usage") or {}
    console.print(f"Predict: {safe(repr(pred.answer))}; first {seconds[0]:.2f} s, median {statistics.median(seconds):.2f} s "
                  f"over {repeat}; {usage.get('prompt_tokens', '?')} prompt + "
                  f"{usage.get('completion_tokens', '?')} completion tokens")  # fmt: skip
    candidates = [str(pred.answer), *_DISTRACTORS]
    convs = [[{"role": "user", "content": f"Question: {question}\nProposed answer: {c}\n"
               "Is the proposed answer correct? Answer Yes or No."}] for c in candidates]  # fmt: skip
    t2 = time.perf_counter()
    p_yes = yes_probabilities(model, convs)
    elapsed = time.perf_counter() - t2
    if p_yes is None:
        console.print("yes/no scoring: not available for this LM (only for local models)")
        return
    others = [p for p in p_yes[1:] if p is not None]
    console.print(f"yes/no scoring: {len(convs)} candidates in {elapsed:.2f} s ({elapsed / len(convs):.2f} s each); "
                  f"P(yes) for the answer above {p_yes[0]:.3f}, mean for {len(others)} distractors "
                  f"{sum(others) / max(len(others), 1):.3f}")  # fmt: skip


@lm_app.command("list")
def list_cmd() -> None:
    """Offline models (status, size, licence) and how to name other LMs."""
    from autofocus.local_lm.models import CATALOG, is_provisioned
    from autofocus.local_lm.server import SETUP_HINT
    from autofocus.local_lm.server_build import ServerBuildError, server_command

    table = Table(title="offline LMs (spec -> GGUF)")
    for col in ("spec", "model", "status", "size", "licence"):
        table.add_column(col)
    for key, m in CATALOG.items():
        status = "[green]ready[/green]" if is_provisioned(m) else "[yellow]not set up[/yellow]"
        table.add_row(key, m.summary, status, f"{m.size / 2**30:.2f} GiB", m.licence.split(" per ")[0])
    console.print(table)
    try:
        command = server_command()
    except ServerBuildError as exc:
        command, why = None, str(exc)
    else:
        why = f"not set up: {SETUP_HINT}"
    console.print("llama.cpp server: " + (f"[green]{safe(' '.join(command))}[/green]" if command else f"[yellow]{safe(why)}[/yellow]"))
    console.print(
        "Other specs: local:/path/to/model.gguf; any DSPy model string, e.g. openai/gpt-4o-mini, "
        "hosted_vllm/<model> (endpoint from AUTOFOCUS_LM_API_BASE), ollama_chat/<model>."
    )


@lm_app.command("serve")
def serve_cmd(
    model: Annotated[str, typer.Option(help="local, local-small or local:/file.gguf")] = "local",
    port: Annotated[int, typer.Option(help="port on 127.0.0.1")] = 8765,
) -> None:
    """Run the offline LM server in the foreground, for several runs to share (one model in memory, its
    slots serving all of them): start it, then `export AUTOFOCUS_LLM_SERVER=127.0.0.1:PORT` in the shells
    that run autofocus."""
    from autofocus.lm import draft_model
    from autofocus.local_lm.models import ModelError, resolve_local
    from autofocus.local_lm.server import LocalServer, LocalServerError

    try:
        spec = resolve_local(model)
        server = LocalServer(spec.path, spec.alias, draft_model=draft_model(model))
    except ModelError as exc:
        console.print(f"[red]cannot serve {safe(repr(model))}:[/red] {safe(exc)}")
        raise typer.Exit(1) from exc
    server.port = port
    try:
        server.start()
    except LocalServerError as exc:
        console.print(f"[red]{safe(exc)}[/red]")
        raise typer.Exit(1) from exc
    kind = (f"llama-server, {server.n_parallel} slots" + (", speculative decoding" if server.draft_model else "")
            if server.native() else "llama_cpp.server (fallback: one request at a time, no token probabilities)")
    console.print(f"serving {safe(spec.alias)} at {server.api_base} ({kind}); in other shells: "
                  f"[bold]export AUTOFOCUS_LLM_SERVER=127.0.0.1:{server.port}[/bold]. Ctrl-C stops it.")
    try:
        while server.is_running():
            time.sleep(1.0)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
