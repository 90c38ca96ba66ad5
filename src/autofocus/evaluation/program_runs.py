"""Evaluation runs of assembled programs: one program on a QA split into a run directory, and several
systems on the same questions. ``autofocus.evaluate``/``compare`` and the ``eval``/``compare``/
``report`` commands are thin wrappers over these.

A run directory gets ``manifest.json`` and ``traces.jsonl`` (``evaluation.runner``: resumable,
refusing to mix different runs), then ``summary.json``, ``summary.md`` and the plots.

Example:
    program = autofocus.open("data/demo", "vss")
    done = evaluate_program(program, "test", "runs/vss-test", limit=30)
    done.summary["metrics"]["hit@1"]["mean"]
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autofocus.config import AutofocusConfig
from autofocus.console import safe
from autofocus.evaluation.report import (
    Run,
    comparison_csv,
    comparison_markdown,
    comparison_rows,
    load_run,
    print_summary,
    summarize,
    write_summary,
)
from autofocus.evaluation.runner import EvalResult, build_manifest, run_eval

if TYPE_CHECKING:
    import dspy
    from rich.console import Console

    from autofocus.kb import KnowledgeBaseLike
    from autofocus.skb.qa import QAItem


class SplitError(ValueError):
    """A QA split that cannot be loaded: unknown split, no QA file, or malformed QA files."""


@dataclass
class ProgramRun:
    """What one evaluation call did (``result``) and the run it left (``run``, this call's questions
    only) with its ``summary`` (``evaluate.report.summarize``)."""

    result: EvalResult
    run: Run
    summary: dict[str, Any]

    @property
    def interrupted(self) -> bool:
        return self.result.interrupted


@dataclass
class Comparison:
    """Several systems on the same questions: one run each, the comparison rows (paired tests against
    the first), and the system that was interrupted, if one was (then ``rows`` is empty)."""

    runs: dict[str, ProgramRun] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    interrupted: str | None = None


def load_split(
    source: Path | str | None, split: str, num_nodes: int | None = None, qa_dir: Path | str | None = None
) -> list[QAItem]:
    """The questions of ``split`` in the SKB at ``source`` (or a whole-file split in ``qa_dir``, e.g.
    ``autofocus synth --out``); ``SplitError`` names what is wrong, also a gold answer that is not a
    node id below ``num_nodes`` (it would score 0 silently). Without ``num_nodes`` the SKB is opened
    (from its cache) to count them."""
    from autofocus.skb.qa import load_qa

    if source is None:
        raise SplitError(f"no QA files: the knowledge base was not loaded from a directory (split {split!r})")
    if num_nodes is None:
        from autofocus.skb.io import load_skb

        num_nodes = load_skb(source).num_nodes  # builds the cache the knowledge base then memory-maps
    try:
        return load_qa(source, split, num_nodes=num_nodes, qa_dir=qa_dir)
    except KeyError as exc:  # unknown split
        raise SplitError(str(exc.args[0]) if exc.args else str(exc)) from None
    except (FileNotFoundError, ValueError) as exc:  # no QA file, malformed QA
        raise SplitError(str(exc)) from None


def index_checksums(kb: KnowledgeBaseLike, cfg: AutofocusConfig) -> dict[str, str | None]:
    """The embeddings checksum of each index the config uses, from the index manifests already on disk."""
    import json

    out: dict[str, str | None] = {}
    for variant in sorted({cfg.grounding.doc_variant_step4, cfg.merge.doc_variant_step6, cfg.merge.doc_variant_step7}):
        path = kb.store_dir(variant) / "manifest.json"
        if path.is_file():
            out[f"{kb.embedder.name}/{variant}"] = json.loads(path.read_text()).get("sha256")
    return out


def summarise_run(run: Run, title: str, console: Console | None = None) -> dict[str, Any]:
    """Write a run's summary (``summary.md``, ``summary.json``) and plots into its directory, print
    them to ``console`` if given; returns the summary."""
    from autofocus.evaluation.plots import save_run_plots

    summary = summarize(run.records, run.manifest)
    if console is not None:
        print_summary(summary, console, title=title)
    write_summary(run.path, summary, title=title)
    paths = save_run_plots(run.path, summary, run.records)
    if console is not None:
        console.print(f"Summary and plots in {safe(run.path)}: summary.md, summary.json, {', '.join(p.name for p in paths)}")
    return summary


def evaluate_program(
    program: dspy.Module,
    split: str,
    out: Path | str,
    *,
    questions: Sequence[QAItem] | None = None,
    limit: int | None = None,
    resume: bool = True,
    progress: bool = False,
    concurrency: int | None = None,
    console: Console | None = None,
    progress_console: Console | None = None,
    title: str | None = None,
    replay: Path | str | None = None,
    qa_dir: Path | str | None = None,
) -> ProgramRun:
    """Run ``program`` (from ``autofocus.open``/``runtime.assemble``) on a QA split into ``out``.

    Args:
        program: its ``kb``, ``config``, ``system`` and ``program_file`` go into the manifest; each
            worker thread runs its own copy (``program.systems.base.program_copy``).
        split: the split's name; its questions come from the knowledge base's directory unless
            ``questions`` are given.
        limit: only the first ``limit`` questions.
        resume: False moves a previous run in ``out`` aside and starts again.
        concurrency: questions in parallel (default ``program.config.runtime.concurrency``).
        console: prints the summary there (None: quiet); ``progress_console`` gets the progress bar
            and notes (default stderr).
        replay: a run directory whose step 1-2 outputs (target type, query) are reused instead of
            asking the LM, so steps 3-8 can be compared under another config at no LM cost; questions
            the run lacks are asked as usual.
        qa_dir: a folder with more whole-file splits (``qa_<split>.csv``, e.g. ``autofocus synth --out``).

    Raises ``evaluate.runner.RunMismatchError`` when ``out`` holds a different run (``RunBusyError``
    while another process writes it), ``SplitError`` for a split that cannot be loaded or has no
    questions. A Ctrl-C keeps the finished questions and returns with
    ``interrupted`` set; call again to finish.
    """
    from autofocus.index.store import skb_fingerprint
    from autofocus.program.systems.base import program_copy

    kb: KnowledgeBaseLike = program.kb
    cfg: AutofocusConfig = program.config
    system: str = program.system
    program_file = getattr(program, "program_file", None)
    items = list(questions) if questions is not None else load_split(kb.source, split, kb.skb.num_nodes, qa_dir)
    if not (items[:limit] if limit is not None else items):  # a run of nothing would look like a finished one
        raise SplitError(f"split {split!r} has no questions" if not items else f"limit {limit} selects no question")
    out = Path(out)
    if replay is not None:
        if not hasattr(program, "recorded"):
            raise ValueError(f"{system}: replaying step 1-2 outputs needs a program with steps 1-2 (afr)")
        program.recorded = recorded_llm_steps(Path(replay))
    manifest = build_manifest(
        system=system,
        config=cfg,
        split=split,
        limit=limit,
        skb_path=kb.source,
        skb_fingerprint=skb_fingerprint(kb.skb),
        index_checksums=index_checksums(kb, cfg),
        program_file=program_file,
        extra={"replay": str(replay)} if replay is not None else None,
    )
    result = run_eval(
        lambda: program_copy(program),
        items,
        out,
        manifest=manifest,
        concurrency=concurrency or cfg.runtime.concurrency,
        deadline_s=cfg.runtime.question_deadline_s,
        limit=limit,
        resume=resume,
        progress=progress,
        skb=kb.skb,
        console=progress_console,
    )
    run = load_run(out)
    wanted = {int(it.id) for it in (items[:limit] if limit is not None else items)}
    run.records = [r for r in run.records if int(r["id"]) in wanted]
    summary = summarise_run(run, title or f"{system} on {split}", console)
    return ProgramRun(result, run, summary)


def recorded_llm_steps(run_dir: Path) -> dict[str, tuple[Any, str | None]]:
    """Question -> (step 1's type(s), step 2's query) of the answered questions of a run directory.
    The run is only read: a damaged line raises ``ValueError`` naming it, and nothing is repaired."""
    from autofocus.evaluation.traces import read_traces

    path = run_dir / "traces.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir}: no traces.jsonl to replay")
    records, _ = read_traces(path, repair=False)
    out: dict[str, tuple[Any, str | None]] = {}
    for rec in records:
        data = (rec.get("trace") or {}).get("data") or {}
        if rec.get("status") == "ok" and "target_type" in data:
            out[rec["query"]] = (data.get("target_type"), data.get("cypher"))
    return out


def split_systems(text: str) -> list[str]:
    """Split a comma list of system specs; a preset's own options stay attached:
    ``afr:k=10,alpha=0.5,vss`` is two systems."""
    return [s.strip() for s in re.split(r",(?![^,=:]*=)", text) if s.strip()]


def run_dir_name(system: str) -> str:
    """A directory name for a system spec (``afr:steps=1-7`` -> ``afr_steps=1-7``)."""
    return re.sub(r"[^A-Za-z0-9._=+-]+", "_", system).strip("_") or "system"


def compare_systems(
    skb: Path | str,
    systems: Sequence[str],
    split: str,
    out: Path | str,
    *,
    config: AutofocusConfig | None = None,
    limit: int | None = None,
    resume: bool = True,
    progress: bool = False,
    console: Console | None = None,
    progress_console: Console | None = None,
    qa_dir: Path | str | None = None,
) -> Comparison:
    """Evaluate each system on the same questions into ``out/<system>/`` and write
    ``comparison.md``/``comparison.csv`` with paired tests against the first system.

    Systems on the same embedder share one knowledge base. Stops at the first interrupted run
    (``Comparison.interrupted``); calling again resumes every run.
    """
    from autofocus import runtime

    specs = list(systems)
    if len(specs) < 2:
        raise ValueError("comparing needs at least two systems, e.g. afr,afr:steps=1-7")
    dirs = [run_dir_name(s) for s in specs]
    if len(set(dirs)) != len(dirs):
        raise ValueError(f"repeated systems: {', '.join(specs)}")
    items = load_split(skb, split, qa_dir=qa_dir)
    kb_for = runtime.kb_opener(skb)
    out = Path(out)
    comparison = Comparison()
    for spec, sub in zip(specs, dirs, strict=True):
        if console is not None:
            console.rule(safe(f"{spec} -> {out / sub}"))
        system, cfg = runtime.resolve_system(spec, config)
        program = runtime.assemble(system, kb_for(cfg.index.embedder, cfg.index.index_kind, cfg.index.doc_budget_tokens), cfg, lms="lazy")
        done = evaluate_program(
            program, split, out / sub, questions=items, limit=limit, resume=resume, progress=progress,
            console=console, progress_console=progress_console,
        )  # fmt: skip
        comparison.runs[spec] = done
        if done.interrupted:
            comparison.interrupted = spec
            return comparison
    comparison.rows = comparison_rows([r.run for r in comparison.runs.values()], specs)
    out.mkdir(parents=True, exist_ok=True)
    (out / "comparison.md").write_text(comparison_markdown(comparison.rows))
    (out / "comparison.csv").write_text(comparison_csv(comparison.rows))
    return comparison
