"""``autofocus lm setup | check | list | serve | status | stop``: the offline LM and any DSPy LM string."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from autofocus.cli_app import command_group, fail
from autofocus.console import make_console, safe

console = make_console()
lm_app = command_group("lm", "Set up, check, list and serve LMs (offline GGUF models or any DSPy model string).")


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


@lm_app.command("warm")
def warm_cmd(
    skb: Annotated[Path, typer.Option(help="SKB directory whose questions will be asked")],
    system: Annotated[str | None, typer.Option(help="system preset, as for ask (default: afr)")] = None,
    lm: Annotated[str | None, typer.Option(help="DSPy LM string for every step, or local / local-small")] = None,
    config: Annotated[Path | None, typer.Option(help="config JSON, as for ask")] = None,
    program: Annotated[Path | None, typer.Option(help="optimised program, as for ask")] = None,
) -> None:
    """Evaluate the prompts' shared start for this SKB once and save it (the offline LM's prompt cache), so
    that the first `ask` restores it instead of evaluating it; run it where you wait anyway."""
    from autofocus.cli_app import config_or_exit
    from autofocus.console import OPEN_ERRORS
    from autofocus.local_lm.models import ModelError
    from autofocus.local_lm.server_http import LocalServerError
    from autofocus.runtime import warm_prompt_starts

    cfg = config_or_exit(config, lm, program_file=program)
    try:
        done = warm_prompt_starts(skb, system, cfg, program)
    except (*OPEN_ERRORS, ModelError, LocalServerError) as exc:
        raise fail(f"cannot warm the prompt cache: {exc}") from None
    if not done:
        console.print("nothing to warm: this program's LMs keep no prompt cache")
    elif done.get("evaluated"):
        console.print(f"prompt starts: {done['starts']} evaluated ({done['evaluated']} tokens) in "
                      f"{done['seconds']:.0f} s and saved; the next ask restores them")
    else:
        console.print(f"prompt starts: {done.get('starts', 0)} already saved (restored in {done.get('seconds', 0):.1f} s)")


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
    from autofocus.local_lm.server_http import LocalServerError

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
    from autofocus.local_lm.server_argv import SETUP_HINT
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


def _local_server(model: str, ctx: int | None, parallel: int | None, threads: int | None) -> Any:
    """The server ``model`` would get with these settings (not started), or exit 1 naming what is wrong."""
    from autofocus.lm import draft_model
    from autofocus.local_lm.models import ModelError, resolve_local
    from autofocus.local_lm.server import LocalServer
    from autofocus.local_lm.server_http import LocalServerError

    try:
        spec = resolve_local(model)
        server = LocalServer(spec.path, spec.alias, draft_model=draft_model(model), n_ctx=ctx, n_parallel=parallel,
                             n_threads=threads)
        server.fingerprint()  # the server program is found (or its absence said) now
    except (ModelError, LocalServerError, ValueError) as exc:
        raise fail(f"cannot serve {model!r}: {exc}") from None
    return server


def _registry(read: Callable[[], Any]) -> Any:
    """What ``read`` finds in the servers' registry; its folder refused in one line where another user
    could reach it (``paths.NotPrivate``)."""
    from autofocus.paths import NotPrivate

    try:
        return read()
    except NotPrivate as exc:
        raise fail(str(exc)) from None


def _worker(record_file: Path) -> Any:
    """The worker that answers `ask` in `lm serve`'s process (``autofocus.resident``), listening beside
    the server's registry record."""
    from autofocus import resident

    return resident.Worker(resident.socket_path(record_file)).start()


def _describe(record: Any) -> str:
    return f"{record.alias} at {record.url} ({record.slots} slots, process {record.pid})"


@lm_app.command("serve")
def serve_cmd(
    model: Annotated[str, typer.Option(help="local, local-small or local:/file.gguf")] = "local",
    port: Annotated[int, typer.Option(help="port on 127.0.0.1 (0: a free one)", min=0, max=65535)] = 0,
    detach: Annotated[bool, typer.Option("--detach", help="run in the background; `autofocus lm stop` stops it")] = False,
    ctx: Annotated[int | None, typer.Option(help="tokens per slot (default AUTOFOCUS_LLM_CTX, else 4096)", min=256)] = None,
    parallel: Annotated[int | None, typer.Option(help="slots (default AUTOFOCUS_LLM_PARALLEL, else 8 where memory allows)",
                                                 min=1)] = None,
    threads: Annotated[int | None, typer.Option(help="CPU threads (default AUTOFOCUS_LLM_THREADS, else the cores)",
                                                min=1)] = None,
    answer: Annotated[bool, typer.Option("--answer/--no-answer", help="also answer `autofocus ask` in this process, "
                                         "its knowledge base and program kept loaded between questions")] = True,
) -> None:
    """Keep the offline LM running for every later command: each command that uses this model with the
    same settings (context per slot, draft model, server build) finds it and uses its slots instead of
    starting a server of its own; several commands at once share it. `ask` is answered in this process,
    which keeps each knowledge base and program it opened loaded (seconds less per question), where the
    environment is the same. Foreground until Ctrl-C, or --detach; `autofocus lm status` lists the
    servers, `autofocus lm stop` stops them."""
    from autofocus.local_lm import registry, served
    from autofocus.local_lm.ports import port_held
    from autofocus.local_lm.server_http import LocalServerError

    server = _local_server(model, ctx, parallel, threads)
    if port and port_held(server.host, port):
        raise fail(f"port {port} on {server.host} is taken: choose another, or --port 0 for a free one")
    running = _registry(lambda: registry.find(server.alias, server.fingerprint()))
    if running is not None:
        console.print(f"already serving {safe(_describe(running))}; `autofocus lm stop` stops it")
        return
    if detach:
        options = ["--model", model, "--port", str(port), "--ctx", str(server.n_ctx), "--parallel", str(server.n_parallel),
                   "--threads", str(server.n_threads), "--answer" if answer else "--no-answer"]  # fmt: skip
        with console.status(f"starting the offline LM ({safe(server.model_path.name)}) in the background"):
            try:
                record = served.detach(options, server, server.startup_timeout + 30)
            except LocalServerError as exc:
                raise fail(str(exc)) from None
        console.print(f"serving {safe(_describe(record))} in the background; `autofocus lm stop` stops it")
        return

    def ready(record: registry.Record) -> None:
        status.stop()
        console.print(f"serving {safe(_describe(record))}; commands using {safe(model)} with these settings use it. "
                      "Ctrl-C stops it.")  # fmt: skip

    status = console.status(f"starting the offline LM ({safe(server.model_path.name)})")
    status.start()
    try:
        served.serve(server, port, ready, beside=_worker if answer else None)
    except registry.AlreadyServing as exc:
        status.stop()
        console.print(f"already serving{safe(str(exc).removeprefix('already served'))}; `autofocus lm stop` stops it")
    except LocalServerError as exc:
        status.stop()
        raise fail(str(exc)) from None
    finally:
        status.stop()


@lm_app.command("status")
def status_cmd() -> None:
    """The offline LM servers that `autofocus lm serve` runs: model, address, slots, settings, whether it answers."""
    from autofocus.local_lm import registry
    from autofocus.local_lm.server import LocalServer

    records = _registry(registry.live)
    if not records:
        console.print("no offline LM server is running; `autofocus lm serve --detach` starts one")
        return
    console.print("offline LM servers (`autofocus lm serve`):")
    for record in records:  # a line each, wrapped as a whole: readable on a terminal of any width
        state = record.state
        if state == "ready":
            probe = LocalServer.attach(record.url, Path(record.model), record.alias, record)
            try:
                state = "answering" if record.alias in probe.models(timeout=5.0) else "serves another model"
            except (OSError, ValueError, KeyError):
                state = "not answering"
        up = (time.time() - record.started) / 60
        console.print(f"- {safe(record.alias)} at {safe(record.url if record.port else '-')}: {state}, "
                      f"{record.slots or '-'} slots of {record.settings.get('n_ctx', '-')} tokens, process {record.pid}, "
                      f"up {up:.0f} min, prompt cache {safe(record.slot_dir or '-')}, "
                      f"{'answers `ask` at ' + safe(record.worker) if record.worker else 'does not answer `ask`'}",
                      soft_wrap=True)  # fmt: skip


@lm_app.command("stop")
def stop_cmd(
    model: Annotated[str | None, typer.Option(help="stop only this model's servers (local, local-small, local:/file.gguf)")] = None,
) -> None:
    """Stop the offline LM servers that `autofocus lm serve` runs (all of them, or one model's)."""
    from autofocus.local_lm import registry
    from autofocus.local_lm.models import ModelError, resolve_local

    records = _registry(registry.live)
    if model is not None:
        try:
            alias = resolve_local(model).alias
        except ModelError as exc:
            raise fail(f"cannot stop {model!r}: {exc}") from None
        records = [r for r in records if r.alias == alias]
    if not records:
        console.print("no offline LM server " + (f"of {safe(model)} " if model else "") + "is running")
        return
    for record in records:
        with console.status(f"stopping {safe(_describe(record))}"):
            gone = registry.stop(record)
        if not gone:
            raise fail(f"{_describe(record)} did not stop")
        console.print(f"stopped {safe(_describe(record))}")
