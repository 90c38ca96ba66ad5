"""``autofocus eval``, ``autofocus report`` and ``autofocus compare``: resumable runs and their summaries."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from autofocus.cli_app import app
from autofocus.config import AutofocusConfig
from autofocus.console import make_console, print_error, safe
from autofocus.runtime import open_kb

console = make_console()
err_console = make_console(stderr=True)

EXIT_MISMATCH = 2
EXIT_DEGRADED = 3
EXIT_INTERRUPTED = 130
# what a damaged SKB, QA file or index raises while a command opens it
OPEN_ERRORS = (KeyError, FileNotFoundError, ValueError)


def prepare_system(
    kb_for: Callable[[str], Any], system: str, config: AutofocusConfig, program_file: Path | None = None
) -> tuple[str, AutofocusConfig, Any, Callable[[], Any]]:
    """Resolve a system spec to ``(system, config, kb, program factory)``; a saved program brings its state.

    The factory builds one program per evaluation thread: programs may keep per-call state,
    and ``dspy.Module.deepcopy`` would copy the whole knowledge base.
    """
    from autofocus.program.systems.registry import build_program, resolve_config

    _, cfg = resolve_config(system, config)
    kb = kb_for(cfg.embedder, cfg.index_kind)

    def factory() -> Any:
        program = build_program(system, kb, cfg)
        if program_file is not None:
            from autofocus.optimize.saved import load_program_state

            load_program_state(program, program_file)
        return program

    return system, cfg, kb, factory


def index_checksums(kb: Any, cfg: AutofocusConfig) -> dict[str, str | None]:
    """The embeddings checksum of each index the config uses, from the index manifests already on disk."""
    out: dict[str, str | None] = {}
    for variant in sorted({cfg.doc_variant_step4, cfg.doc_variant_step6, cfg.doc_variant_step7}):
        path = kb.store_dir(variant) / "manifest.json"
        if path.is_file():
            out[f"{kb.embedder.name}/{variant}"] = json.loads(path.read_text()).get("sha256")
    return out


def _kb_cache(skb_path: Path) -> Callable[[str], Any]:
    """Open the SKB once per embedder, however many systems share it."""
    opened: dict[tuple[str, str], Any] = {}
    lock = threading.Lock()

    def kb_for(embedder: str, index_kind: str = "flat") -> Any:
        with lock:
            if (embedder, index_kind) not in opened:
                opened[embedder, index_kind] = open_kb(skb_path, embedder, index_kind)
            return opened[embedder, index_kind]

    return kb_for


def _run_system(
    kb_for: Callable[[str], Any],
    system: str,
    cfg: AutofocusConfig,
    items: list[Any],
    out: Path,
    *,
    skb_path: Path,
    split: str,
    limit: int | None,
    program_file: Path | None,
    force_new: bool,
    progress: bool,
    max_degraded: float = 1.0,
) -> tuple[Any, Any]:
    """Evaluate one system into ``out``; returns its ``EvalResult`` and the loaded run."""
    from autofocus.evaluate.report import load_run
    from autofocus.evaluate.runner import RunMismatchError, build_manifest, run_eval
    from autofocus.index.store import skb_fingerprint

    try:
        system, cfg, kb, factory = prepare_system(kb_for, system, cfg, program_file)
    except OPEN_ERRORS as exc:  # SKBFormatError is a ValueError
        print_error(err_console, exc)
        raise typer.Exit(1) from None
    manifest = build_manifest(
        system=system,
        config=cfg,
        split=split,
        limit=limit,
        skb_path=skb_path,
        skb_fingerprint=skb_fingerprint(kb.skb),
        index_checksums=index_checksums(kb, cfg),
        program_file=program_file,
    )
    try:
        result = run_eval(
            factory,
            items,
            out,
            manifest=manifest,
            concurrency=cfg.concurrency,
            deadline_s=cfg.question_deadline_s,
            limit=limit,
            resume=not force_new,
            progress=progress,
            skb=kb.skb,
            console=err_console,
        )
    except RunMismatchError as exc:
        err_console.print(f"[red]{safe(exc)}[/]")
        raise typer.Exit(EXIT_MISMATCH) from None
    run = load_run(out)
    wanted = {int(it.id) for it in (items[:limit] if limit is not None else items)}
    run.records = [r for r in run.records if int(r["id"]) in wanted]
    summary = _summarise(run, f"{system} on {split}")
    if not result.interrupted:
        _fail_if_degraded(summary, max_degraded, out)
    return result, run


def _fail_if_degraded(summary: dict[str, Any], max_degraded: float, out: Path) -> None:
    """Exit with ``EXIT_DEGRADED`` when more than ``max_degraded`` of the run's questions are degraded."""
    degraded = summary["degraded"]
    if degraded["share"] > max_degraded:
        causes = "; ".join(f"{k} ({v})" for k, v in list(degraded["causes"].items())[:3])
        err_console.print(
            f"[red]{degraded['questions']} of {summary['n']} questions ({100 * degraded['share']:.0f}%) are degraded, "
            f"above --max-degraded {100 * max_degraded:g}%: the LM failed ({safe(causes)}). These results are "
            f"not the method's. Fix the LM and run the same command again: {safe(out)} retries them.[/]"
        )
        raise typer.Exit(EXIT_DEGRADED)


def _summarise(run: Any, title: str) -> dict[str, Any]:
    """Print a run's summary and write it (summary.md, summary.json) and its plots into the run directory."""
    from autofocus.evaluate.plots import save_run_plots
    from autofocus.evaluate.report import print_summary, summarize, write_summary

    summary = summarize(run.records, run.manifest)
    print_summary(summary, console, title=title)
    write_summary(run.path, summary, title=title)
    paths = save_run_plots(run.path, summary, run.records)
    console.print(
        f"Summary and plots in {safe(run.path)}: summary.md, summary.json, {', '.join(p.name for p in paths)}"
    )
    return summary


def _load_items(skb: Path, split: str) -> list[Any]:
    """The split's questions; the SKB is opened too, so that a damaged one, or a gold answer that is
    not one of its nodes (it would score 0 silently), stops the command with the file and line."""
    from autofocus.skb.io import load_skb
    from autofocus.skb.qa import load_qa

    try:
        num_nodes = load_skb(skb).num_nodes  # builds the cache the KB then memory-maps
        return load_qa(skb, split, num_nodes=num_nodes)
    except OPEN_ERRORS as exc:  # damaged SKB, unknown split, no QA file, malformed QA
        print_error(err_console, exc)
        raise typer.Exit(1) from None


def _config(
    config: Path | None,
    lm: str | None,
    steps: str | None,
    reranker: str | None,
    concurrency: int | None,
    base: AutofocusConfig | None = None,
    waits: dict[str, float | None] | None = None,
) -> AutofocusConfig:
    """``--config`` (else ``base``, a saved program's config, else the defaults) with the options on top;
    ``waits``: ``--lm-timeout``, ``--lm-retries``, ``--deadline``."""
    from autofocus.runtime import load_config, with_waits

    if config is not None or base is None:
        cfg = load_config(config, lm=lm, steps=steps, reranker=reranker, concurrency=concurrency)
    else:
        data = base.model_dump()
        data.update(
            {k: v for k, v in {"steps": steps, "reranker": reranker, "concurrency": concurrency}.items() if v}
        )
        if lm:
            data["lm"] = {**data["lm"], "default": lm}
        cfg = AutofocusConfig.model_validate(data)
    return with_waits(cfg, **(waits or {}))


SkbOpt = Annotated[Path, typer.Option(help="SKB directory (or STaRK processed directory)", exists=True)]
SplitOpt = Annotated[str, typer.Option(help="QA split: train, val, test, or a whole-file split")]
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
LmTimeoutOpt = Annotated[
    float | None,
    typer.Option("--lm-timeout", help="seconds to wait for one LM answer (env AUTOFOCUS_LM_TIMEOUT; default 120, local 900)",
                 min=0.001),
]
LmRetriesOpt = Annotated[
    int | None, typer.Option("--lm-retries", help="retries of a failed LM request (env AUTOFOCUS_LM_RETRIES; default 2)", min=0)
]
DeadlineOpt = Annotated[
    float | None,
    typer.Option("--deadline", help="seconds per question; after it, no more LM calls and the question is degraded "
                 "(default 1800)", min=0.001),
]
MaxDegradedOpt = Annotated[
    float,
    typer.Option("--max-degraded", help="fail (exit 3) when more than this share of questions is degraded by LM "
                 "failures", min=0.0, max=1.0),
]


@app.command("eval")
def eval_command(
    skb: SkbOpt,
    out: Annotated[Path, typer.Option(help="run directory, e.g. runs/afr-val (resumed if it exists)")],
    split: SplitOpt = "val",
    limit: LimitOpt = None,
    system: Annotated[
        str, typer.Option(help="system preset, e.g. afr, afr:steps=1-7 (a --program names its own)")
    ] = "afr",
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
    lm_timeout: LmTimeoutOpt = None,
    lm_retries: LmRetriesOpt = None,
    deadline: DeadlineOpt = None,
    max_degraded: MaxDegradedOpt = 0.1,
) -> None:
    """Evaluate a system on a QA split: traces.jsonl + manifest.json, resumable, then the summary.

    With ``--program``, the saved program's system and config are used (``--config`` replaces the
    config; the other options apply on top) and its prompts/demos are loaded into every copy.
    """
    saved_cfg = None
    if program is not None:
        from autofocus.optimize.saved import read_program_config

        system, saved_cfg = read_program_config(program)
    waits = {"lm_timeout": lm_timeout, "lm_retries": lm_retries, "deadline": deadline}
    cfg = _config(config, lm, steps, reranker, concurrency, base=saved_cfg, waits=waits)
    items = _load_items(skb, split)
    result, _ = _run_system(
        _kb_cache(skb),
        system,
        cfg,
        items,
        out,
        skb_path=skb,
        split=split,
        limit=limit,
        program_file=program,
        force_new=force_new,
        progress=progress,
        max_degraded=max_degraded,
    )
    if result.interrupted:
        err_console.print(f"[yellow]Interrupted; run the same command again to finish {safe(out)}.[/]")
        raise typer.Exit(EXIT_INTERRUPTED)


@app.command("report")
def report_command(
    runs: Annotated[list[Path], typer.Argument(help="run directories; two or more adds a comparison")],
) -> None:
    """Print (and refresh) the summary of each run; with several, compare them with the first."""
    from autofocus.evaluate.report import comparison_rows, load_run, print_comparison

    loaded = []
    for path in runs:
        try:
            run = load_run(path)
        except (FileNotFoundError, ValueError) as exc:
            print_error(err_console, exc)
            raise typer.Exit(1) from None
        _summarise(run, f"{run.name} ({path})")
        loaded.append(run)
    if len(loaded) > 1:
        print_comparison(comparison_rows(loaded, [f"{r.name} ({r.path.name})" for r in loaded]), console)


def split_systems(text: str) -> list[str]:
    """Split ``--systems``; a preset's own options stay attached: ``afr:k=10,alpha=0.5,vss`` is two systems."""
    return [s.strip() for s in re.split(r",(?![^,=:]*=)", text) if s.strip()]


def run_dir_name(system: str) -> str:
    """A directory name for a system spec (``afr:steps=1-7`` -> ``afr_steps=1-7``)."""
    return re.sub(r"[^A-Za-z0-9._=+-]+", "_", system).strip("_") or "system"


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
    from autofocus.evaluate.report import (
        comparison_csv,
        comparison_markdown,
        comparison_rows,
        print_comparison,
    )

    specs = split_systems(systems)
    if len(specs) < 2:
        err_console.print("[red]--systems needs at least two systems, e.g. afr,afr:steps=1-7[/]")
        raise typer.Exit(1)
    dirs = [run_dir_name(s) for s in specs]
    if len(set(dirs)) != len(dirs):
        err_console.print(f"[red]--systems has repeated systems: {safe(', '.join(specs))}[/]")
        raise typer.Exit(1)
    waits = {"lm_timeout": lm_timeout, "lm_retries": lm_retries, "deadline": deadline}
    cfg = _config(config, lm, None, None, concurrency, waits=waits)
    items = _load_items(skb, split)
    kb_for = _kb_cache(skb)
    runs = []
    for spec, sub in zip(specs, dirs, strict=True):
        console.rule(safe(f"{spec} -> {out / sub}"))
        result, run = _run_system(
            kb_for,
            spec,
            cfg,
            items,
            out / sub,
            skb_path=skb,
            split=split,
            limit=limit,
            program_file=None,
            force_new=force_new,
            progress=progress,
            max_degraded=max_degraded,
        )
        runs.append(run)
        if result.interrupted:
            err_console.print(f"[yellow]Interrupted during {safe(spec)}; run the same command again to finish.[/]")
            raise typer.Exit(EXIT_INTERRUPTED)
    rows = comparison_rows(runs, specs)
    print_comparison(rows, console)
    out.mkdir(parents=True, exist_ok=True)
    (out / "comparison.md").write_text(comparison_markdown(rows))
    (out / "comparison.csv").write_text(comparison_csv(rows))
    console.print(f"Comparison in {safe(out / 'comparison.md')} and {safe(out / 'comparison.csv')}")
