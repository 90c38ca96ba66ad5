"""Evaluation runs of assembled programs: one program on a QA split into a run directory, and several
systems on the same questions. ``autofocus.evaluate``/``compare`` and the ``eval``/``compare``/
``report`` commands are thin wrappers over these.

A run directory gets ``manifest.json`` and ``traces.jsonl`` (``evaluation.runner``: resumable,
refusing to mix different runs), then ``summary.json``, ``summary.md`` and the plots.

Example:
    program = autofocus.open("data/demo", "vss")
    done = evaluate_program(program, "runs/vss-test", EvalOptions(split="test", limit=30))
    done.summary["metrics"]["hit@1"]["mean"]
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autofocus.config import AutofocusConfig
from autofocus.evaluation.report import Run, comparison_rows, load_run, summarize
from autofocus.evaluation.report_tables import comparison_csv, comparison_markdown, write_summary
from autofocus.evaluation.runner import EvalResult, build_manifest, run_eval
from autofocus.evaluation.traces import to_jsonable
from autofocus.options import EvalOptions
from autofocus.progress import Reporter, reporter_or_log

if TYPE_CHECKING:
    import dspy

    from autofocus.kb import KnowledgeBaseLike
    from autofocus.skb.qa import QAItem


class SplitError(ValueError):
    """A QA split that cannot be loaded: unknown split, no QA file, or malformed QA files."""


@dataclass
class ProgramRun:
    """What one evaluation call did (``result``) and the run it left (``run``, this call's questions
    only) with its ``summary`` (``evaluate.report.summarize``) and the plots written beside it."""

    result: EvalResult
    run: Run
    summary: dict[str, Any]
    plots: list[Path] = field(default_factory=list)

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


def summarise_run(run: Run, title: str) -> tuple[dict[str, Any], list[Path]]:
    """Write a run's summary (``summary.md``, ``summary.json``) and plots into its directory; returns
    the summary and the plots' paths (``autofocus report`` prints the summary)."""
    from autofocus.evaluation.plots import save_run_plots

    summary = summarize(run.records, run.manifest)
    write_summary(run.path, summary, title=title)
    return summary, save_run_plots(run.path, summary, run.records)


def evaluate_program(
    program: dspy.Module,
    out: Path | str,
    options: EvalOptions | None = None,
    *,
    questions: Sequence[QAItem] | None = None,
    title: str | None = None,
    reporter: Reporter | None = None,
) -> ProgramRun:
    """Run ``program`` (from ``autofocus.open``/``runtime.assemble``) on a QA split into ``out``.

    Args:
        program: its ``kb``, ``config``, ``system`` and ``program_file`` go into the manifest; each
            worker thread runs its own copy (``program.systems.base.program_copy``).
        options: the split, limit, resume, concurrency (default ``program.config.runtime.concurrency``),
            QA folder and ``replay`` (``EvalOptions``). ``replay`` is a run directory whose step 1-2
            outputs (target type, query) are reused instead of asking the LM, so steps 3-8 can be
            compared under another config at no LM cost; questions the run lacks are asked as usual.
        questions: the split's questions, if not those of the knowledge base's directory.
        reporter: progress and notes (``progress.Reporter``; None: warnings to the log).

    Raises ``evaluate.runner.RunMismatchError`` when ``out`` holds a different run (``RunBusyError``
    while another process writes it), ``SplitError`` for a split that cannot be loaded or has no
    questions. A Ctrl-C keeps the finished questions and returns with
    ``interrupted`` set; call again to finish.
    """
    from autofocus.index.store import skb_fingerprint
    from autofocus.program.systems.base import program_copy

    o = options or EvalOptions()
    split, limit, replay = o.split, o.limit, o.replay
    kb: KnowledgeBaseLike = program.kb
    cfg: AutofocusConfig = program.config
    system: str = program.system
    program_file = getattr(program, "program_file", None)
    items = list(questions) if questions is not None else load_split(kb.source, split, kb.skb.num_nodes, o.qa_dir)
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
    if getattr(program, "trained", None) is not None:  # the models that ranked the run (``autofocus adapt``)
        manifest["trained"] = to_jsonable(dict(program.trained.summary))
    result = run_eval(
        lambda: program_copy(program),
        items,
        out,
        manifest=manifest,
        concurrency=o.concurrency or cfg.runtime.concurrency,
        deadline_s=cfg.runtime.question_deadline_s,
        limit=limit,
        resume=o.resume,
        skb=kb.skb,
        reporter=reporter,
    )
    run = load_run(out)
    wanted = {int(it.id) for it in (items[:limit] if limit is not None else items)}
    run.records = [r for r in run.records if int(r["id"]) in wanted]
    summary, plots = summarise_run(run, title or f"{system} on {split}")
    return ProgramRun(result, run, summary, plots)


def recorded_llm_steps(run_dir: Path) -> dict[str, tuple[Any, str | None, dict[str, float] | None]]:
    """Question -> (step 1's type(s), step 2's query, step 1's type probabilities where it scored them) of
    the answered questions of a run directory.
    The run is only read: a damaged line raises ``ValueError`` naming it, and nothing is repaired."""
    from autofocus.evaluation.traces import read_traces

    path = run_dir / "traces.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir}: no traces.jsonl to replay")
    records, _ = read_traces(path, repair=False)
    out: dict[str, tuple[Any, str | None, dict[str, float] | None]] = {}
    for rec in records:
        data = (rec.get("trace") or {}).get("data") or {}
        if rec.get("status") == "ok" and "target_type" in data:
            out[rec["query"]] = (data.get("target_type"), data.get("cypher"), data.get("target_type_probs"))
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
    out: Path | str,
    config: AutofocusConfig | None = None,
    options: EvalOptions | None = None,
    *,
    reporter: Reporter | None = None,
) -> Comparison:
    """Evaluate each system on the same questions (``options``: split, limit, ...) into
    ``out/<system>/`` and write ``comparison.md``/``comparison.csv`` with paired tests against the
    first system.

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
    o = options or EvalOptions()
    items = load_split(skb, o.split, qa_dir=o.qa_dir)
    kb_for = runtime.kb_opener(skb)
    say = reporter_or_log(reporter)
    out = Path(out)
    comparison = Comparison()
    for spec, sub in zip(specs, dirs, strict=True):
        say.note(f"{spec} -> {out / sub}", "section")
        system, cfg = runtime.resolve_system(spec, config)
        program = runtime.assemble(system, kb_for(cfg.index.embedder, cfg.index.index_kind, cfg.index.doc_budget_tokens), cfg, lms="lazy")
        done = evaluate_program(program, out / sub, o, questions=items, reporter=reporter)
        comparison.runs[spec] = done
        if done.interrupted:
            comparison.interrupted = spec
            return comparison
    comparison.rows = comparison_rows([r.run for r in comparison.runs.values()], specs)
    out.mkdir(parents=True, exist_ok=True)
    (out / "comparison.md").write_text(comparison_markdown(comparison.rows))
    (out / "comparison.csv").write_text(comparison_csv(comparison.rows))
    return comparison
