"""``autofocus adapt``: a program fitted to one knowledge base by training on its own questions.

The sequence, each part on two CPU cores in minutes:

1. Questions: splits given (``synthetic`` from ``autofocus synth``, or labelled ones), and/or
   ``templates`` written from the graph here (no LM). A seeded share is held out (never a test split).
2. Candidate lists (``adapt.mining``): the program's own steps 3-7 per question, no LM.
3. The reranker (``adapt.reranker``: the embedder fine-tuned as a bi-encoder, or a cross-encoder), its
   best epoch chosen on the held-out questions,
   and the weight of its fusion with steps 1-7's order fitted there by likelihood
   (``evaluation.fusion_fit``).
4. The type reader (``adapt.type_reader``) on the questions' embeddings and answer types.
5. The program file: the system with ``trained`` naming the models' folder, step 8 on
   (``reranker=auto`` picks the trained one) and the fitted fusion; ``<stem>.trained/manifest.json``
   and ``adapt_summary`` record questions, pairs, epochs, minutes (in all and per part) and held-out scores.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from autofocus.adapt.mining import Mined, answer_type, mine, run_lists
from autofocus.adapt.reranker import Documents, RerankerTraining, fusion_cases, train_reranker
from autofocus.adapt.type_reader import fit_type_reader
from autofocus.config import AutofocusConfig
from autofocus.options import AdaptOptions
from autofocus.program.trained import (
    RERANKER_DIR,
    TYPE_READER_FILE,
    open_reranker,
    parts_folder,
    write_manifest,
)
from autofocus.progress import Reporter, draws_bars, reporter_or_log
from autofocus.skb.qa import QAItem


@dataclass
class AdaptResult:
    """What an adaptation wrote (``program``, ``folder``) and its summary (the manifest's content)."""

    program: Path
    folder: Path
    summary: dict[str, Any]


def adapt(skb: Path | str, config: AutofocusConfig, options: AdaptOptions, reporter: Reporter | None = None) -> AdaptResult:
    """Run the adaptation of the SKB at ``skb`` (module docstring); writes ``options.out`` and its folder."""
    from autofocus import runtime
    from autofocus.evaluation.program_runs import load_split
    from autofocus.program.saved import save_program
    from autofocus.skb.cache import content_digest

    report = reporter_or_log(reporter)
    start = time.perf_counter()
    stages: dict[str, float] = {}

    def lap(stage: str) -> None:  # minutes of each part, so a user sees what a larger knowledge base costs more
        stages[stage] = round((time.perf_counter() - start) / 60 - sum(stages.values()), 2)
    out = Path(options.out)
    folder = parts_folder(out)
    system, cfg = runtime.resolve_system(options.system, config)
    cfg = cfg.updated({"trained": None})
    kb = runtime.open_kb(skb, cfg.index.embedder, cfg.index.index_kind, cfg.index.doc_budget_tokens)
    summary: dict[str, Any] = {"skb": str(skb), "system": system, "options": _plain({**asdict(options), "negatives": options.hard_negatives})}
    lap("open")

    sources: list[tuple[str, Path | str | None]] = [(s, options.qa_dir) for s in options.splits]
    if options.templates:
        report.note(f"writing {options.templates} template questions from the graph", "section")
        sources.append(("synthetic", _templates(skb, cfg, options, folder / "questions", report)))
    if not sources:
        raise ValueError("no training questions: name splits (--split) or ask for template questions (--templates)")
    items = _questions(load_split, skb, kb.skb.num_nodes, sources)
    summary["questions"] = {"total": len(items), "by_source": {f"{s}@{d or skb}": n for (s, d), n in
                                                               _counts(load_split, skb, kb.skb.num_nodes, sources)}}
    lap("questions")
    rng = np.random.default_rng(options.seed)
    order = rng.permutation(len(items))
    n_val = round(len(items) * options.val_share) if len(items) >= 10 else 0
    val_items = [items[i] for i in order[:n_val]]
    train_items = [items[i] for i in order[n_val:]]

    report.note(f"mining candidate lists of {len(items)} questions (steps 3-7, no LM)", "section")
    program = runtime.assemble(system, kb, cfg.updated({"steps": "1-7"}), lms=False)
    runs: dict[str, list[int]] = {}
    for run in options.runs:
        runs.update(run_lists(run))
    done = [0]

    def tick(k: int) -> None:
        done[0] += k
        report.advance("mining", done[0], len(items))

    mined_train = mine(program, train_items, sources=options.sources, runs=runs, tick=tick)
    mined_val = mine(program, val_items, sources=options.sources, runs=runs, tick=tick)
    summary["mining"] = _mining_stats(mined_train + mined_val)
    lap("mining")

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").unlink(missing_ok=True)  # the folder is unfinished until the manifest is back
    settings: dict[str, Any] = {}
    if options.reranker:
        report.note(f"training the {options.reranker_kind} on {len(mined_train)} questions", "section")
        training = RerankerTraining(kind=options.reranker_kind, base=str(options.base) if options.base else None,
                                    epochs=options.epochs, batch_size=options.batch_size,
                                    learning_rate=options.learning_rate, max_length=options.max_length,
                                    positives=options.positives, negatives=options.hard_negatives, seed=options.seed)
        eval_source = "run" if runs else "grounded"
        summary["reranker"] = train_reranker(mined_train, mined_val, kb.skb, folder, training, eval_source=eval_source,
                                             progress=draws_bars(reporter))
        lap("reranker")
        settings.update(_fusion(folder, mined_val, kb.skb, runs, summary["reranker"], report))
        lap("fusion")
    asked = {m.target_type for m in mined_train}
    if options.type_reader and len(asked) > 1:
        report.note("fitting the type reader", "section")
        summary["type_reader"] = _type_reader(kb, mined_train, mined_val, folder)
        lap("type_reader")
    elif options.type_reader:
        report.note(f"no type reader: the training questions ask for one type only ({', '.join(asked)})", "warning")
    summary["content_digest"] = content_digest(kb.skb)
    summary["minutes"] = round((time.perf_counter() - start) / 60, 2)
    summary["stage_minutes"] = stages
    write_manifest(folder, summary)
    adapted = cfg.updated({"trained": str(folder.resolve()), "steps": "1-8", **settings})
    save_program(program, system, adapted, out, optimizer={"optimizer": "adapt", "trained": folder.name})
    (out.parent / f"{out.stem}.summary.json").write_text(json.dumps(summary, indent=2, default=str))
    return AdaptResult(out, folder, summary)


def _templates(skb: Path | str, cfg: AutofocusConfig, options: AdaptOptions, where: Path, report: Reporter) -> Path:
    from autofocus.options import SynthOptions
    from autofocus.synthetic.run import run_synthesis

    done = [0]

    def tick(stage: str, k: int) -> None:
        if stage == "questions":
            done[0] += k
            report.advance("template questions", done[0], options.templates)

    run = run_synthesis(skb, cfg, options.templates,
                        SynthOptions(seed=options.seed, writer="template", clue_kind="phrase", out=where), tick=tick)
    if not run.result.pairs:
        raise ValueError("the graph gave no template question (no edges between answer types and named nodes?)")
    return where


def _questions(load_split: Any, skb: Path | str, num_nodes: int, sources: list[tuple[str, Path | str | None]]) -> list[QAItem]:
    """Every question of every source once (the first source's copy of a repeated question)."""
    seen: dict[str, QAItem] = {}
    for split, qa_dir in sources:
        for item in load_split(skb, split, num_nodes=num_nodes, qa_dir=qa_dir):
            if item.answer_ids:
                seen.setdefault(item.query, item)
    return list(seen.values())


def _counts(load_split: Any, skb: Path | str, num_nodes: int,
            sources: list[tuple[str, Path | str | None]]) -> list[tuple[tuple[str, Any], int]]:
    return [((s, d), len(load_split(skb, s, num_nodes=num_nodes, qa_dir=d))) for s, d in sources]


def _mining_stats(mined: list[Mined]) -> dict[str, Any]:
    """Per source: questions with a list, and with an answer first / in the list (how hard the lists are)."""
    out: dict[str, Any] = {}
    for source in sorted({s for m in mined for s in m.lists}):
        lists = [(m.lists[source], m.gold) for m in mined if source in m.lists]
        out[source] = {"questions": len(lists),
                       "answer_first": round(float(np.mean([bool(ids) and ids[0] in g for ids, g in lists])), 3),
                       "answer_listed": round(float(np.mean([any(i in g for i in ids) for ids, g in lists])), 3)}
    return out


def _fusion(folder: Path, val: list[Mined], skb: Any, runs: dict[str, list[int]], record: dict[str, Any],
            report: Reporter) -> dict[str, Any]:
    """Step 8's settings: the trained reranker fused with steps 1-7's order, the weight fitted on the held-out
    questions' lists (a run's where there is one, else the grounded and the vector lists pooled)."""
    from autofocus.evaluation.fusion_fit import fit_prior_weight

    settings: dict[str, Any] = {"reranker": "auto", "rerank_fusion": "prior", "rerank_depth": None}
    if not val:
        return settings
    model, docs = open_reranker(folder / RERANKER_DIR, record), Documents(skb)
    cases = []
    for source in (["run"] if runs else ["grounded", "vector"]):
        cases += fusion_cases(model, [m for m in val if source in m.lists], docs, source)
    try:
        fit = fit_prior_weight(cases)
    except ValueError as exc:
        report.note(f"fusion weight not fitted ({exc}); the default stays", "warning")
        return settings
    weight = float(min(10.0, max(0.0, fit.weight)))
    record["fusion"] = {**fit.as_dict(), "used": weight}
    report.note(fit.line())
    return {**settings, "rerank_prior_weight": round(weight, 3)}


def _type_reader(kb: Any, train: list[Mined], val: list[Mined], folder: Path) -> dict[str, Any]:
    types = list(kb.skb.schema.answer_types)
    tx = kb.embed_queries([m.item.query for m in train])
    vx = kb.embed_queries([m.item.query for m in val]) if val else np.zeros((0, tx.shape[1]))
    reader, record = fit_type_reader(tx, [m.target_type for m in train], vx, [m.target_type for m in val],
                                     types, kb.embedder.name)
    (folder / TYPE_READER_FILE).write_text(json.dumps(reader.to_dict()))
    return record


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return str(value) if isinstance(value, Path) else value


__all__ = ["AdaptResult", "adapt", "answer_type"]
