"""``autofocus adapt``: a program fitted to one knowledge base by training on its own questions.

The sequence, each part on two CPU cores in minutes:

1. Questions: splits given (``synthetic`` from ``autofocus synth``, or labelled ones), and/or
   ``templates`` questions written here by ``questions`` (``adapt.questions``: templates, paraphrases,
   the LM). A seeded share is held out (never a test split).
2. Candidate lists (``adapt.mining``): the program's own steps 3-7 per question, no LM.
3. The reranker (``adapt.reranker``: the embedder fine-tuned as a bi-encoder, or a cross-encoder), its
   best epoch chosen on the held-out questions,
   and the weight of its fusion with steps 1-7's order fitted there by likelihood
   (``evaluation.fusion_fit``).
4. The type reader (``adapt.type_reader``) on the questions' embeddings and answer types.
   Where judge questions are given (``adapt.judge``: questions that read like users', never trained on),
   they choose the epoch and fit the fusion weight instead of the held-out template questions, and a part
   they do not show to help is left out of the program (step 8 off: steps 1-7's order), with the reason.
5. The program file: the system with ``trained`` naming the models' folder, step 8 on
   (``reranker=auto`` picks the trained one) and the fitted fusion; ``<stem>.trained/manifest.json``
   and ``adapt_summary`` record questions, pairs, epochs, minutes (in all and per part) and held-out scores.

The models are written to a folder of their own beside ``<stem>.trained`` (an ``--out`` that cannot be
written is refused before any work); it replaces the old one only when complete, so a program adapted
before keeps working during training and after an interrupted one.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from autofocus import paths
from autofocus.adapt.judge import (
    JUDGE_LIST,
    LM_JUDGE,
    JudgeQuestion,
    Verdict,
    load_judge,
    rerank_verdict,
    run_type_probs,
    type_reader_verdict,
)
from autofocus.adapt.mining import Mined, answer_type, mine, run_lists
from autofocus.adapt.questions import LM_SOURCES, judge_questions, training_questions
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
    report = reporter_or_log(reporter)
    out = Path(options.out)
    folder = parts_folder(out)
    with _output(out, folder) as work:
        return _adapt(skb, config, options, report, out, folder, work)


def _adapt(skb: Path | str, config: AutofocusConfig, options: AdaptOptions, report: Reporter, out: Path, folder: Path,
           work: Path) -> AdaptResult:
    """The adaptation, its models written to ``work``, which replaces ``folder`` at the end."""
    from autofocus import runtime
    from autofocus.evaluation.program_runs import load_split
    from autofocus.program.saved import save_program
    from autofocus.skb.cache import content_digest

    start = time.perf_counter()
    stages: dict[str, float] = {}

    def lap(stage: str) -> None:  # minutes of each part, so a user sees what a larger knowledge base costs more
        stages[stage] = round((time.perf_counter() - start) / 60 - sum(stages.values()), 2)
    system, cfg = runtime.resolve_system(options.system, config)
    cfg = cfg.updated({"trained": None})
    kb = runtime.open_kb(skb, cfg.index.embedder, cfg.index.index_kind, cfg.index.doc_budget_tokens)
    summary: dict[str, Any] = {"skb": str(skb), "system": system,
                               "options": _plain({**asdict(options), "negatives": options.hard_negatives,
                                                  "judge_questions": len(options.judge_questions)})}
    lap("open")

    sources: list[tuple[str, Path | str | None]] = [(s, options.qa_dir) for s in options.splits]
    written: list[QAItem] = []
    if options.templates:
        more, written, summary["written"] = training_questions(skb, kb.skb, cfg, options, work / "questions", report)
        sources += more
    if not sources and not written:
        raise ValueError("no training questions: name splits (--split) or ask for template questions (--templates)")
    splits = [s for s in options.judge if s != LM_JUDGE]
    judge = [*options.judge_questions, *load_judge(skb, splits, options.judge_dir, kb.skb.num_nodes)]
    lm_sources = options.questions in LM_SOURCES
    if LM_JUDGE in options.judge or (not judge and lm_sources):  # label-free
        report.note("asking the LM for judge questions about nodes no training question is written from", "section")
        judge = [JudgeQuestion(q.query, tuple(q.answer_ids), q.kind) for q in
                 judge_questions(skb, cfg, lm=options.lm, seed=options.seed, judge_share=options.judge_share,
                                 threads=options.lm_threads, reporter=report)]
    judged = {q.query for q in judge}
    items = [i for i in _questions(load_split, skb, kb.skb.num_nodes, sources, written) if i.query not in judged]
    shown = {work / "questions": folder / "questions"}  # where the template questions will be
    by_source = {f"{s}@{shown.get(d, d) or skb}": n for (s, d), n in _counts(load_split, skb, kb.skb.num_nodes, sources)}
    if written:
        by_source[f"{options.questions} (node questions)"] = len(written)
    summary["questions"] = {"total": len(items), "by_source": by_source}
    lap("questions")
    rng = np.random.default_rng(options.seed)
    order = rng.permutation(len(items))
    n_val = round(len(items) * options.val_share) if len(items) >= 10 else 0
    val_items = [items[i] for i in order[:n_val]]
    train_items = [items[i] for i in order[n_val:]]
    summary["held_out"] = _held_out(len(items), n_val, options, cfg, report)

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
    mined_judge = _judge_lists(program, judge, runs)
    summary["mining"] = _mining_stats(mined_train + mined_val + mined_judge)
    summary["judge"] = {"questions": len(judge), "with_a_list": len(mined_judge),
                        "kinds": dict(Counter(q.kind for q in judge))}
    if not judge:
        report.note("no judge questions (--judge lm, or a labelled split): the reranker is used unjudged; held-out "
                    "template questions are no judge of questions that read like users'", "warning")
    lap("mining")

    settings: dict[str, Any] = {}
    if options.reranker:
        report.note(f"training the {options.reranker_kind} on {len(mined_train)} questions", "section")
        training = RerankerTraining(kind=options.reranker_kind, base=str(options.base) if options.base else None,
                                    epochs=options.epochs, batch_size=options.batch_size,
                                    learning_rate=options.learning_rate, max_length=options.max_length,
                                    positives=options.positives, negatives=options.hard_negatives, seed=options.seed)
        eval_source = JUDGE_LIST if mined_judge else "run" if runs else "grounded"
        summary["reranker"] = train_reranker(mined_train, mined_judge or mined_val, kb.skb, work, training,
                                             eval_source=eval_source, progress=draws_bars(report))
        lap("reranker")
        settings.update(_fusion(work, mined_judge or mined_val, kb.skb, JUDGE_LIST if mined_judge else None, runs,
                                summary["reranker"], cfg, report))
        if mined_judge:
            weight = float(settings.get("rerank_prior_weight", cfg.rerank.rerank_prior_weight))
            settings.update(_judge_reranker(work, mined_judge, kb.skb, weight, summary, report))
        lap("fusion")
    asked = {m.target_type for m in mined_train}
    if options.type_reader and len(asked) > 1:
        report.note("fitting the type reader", "section")
        summary["type_reader"] = _type_reader(kb, mined_train, mined_val, work)
        asked_lm = options.lm if LM_JUDGE in options.judge or lm_sources else None  # the LM is asked anyway
        settings.update(_judge_type_reader(kb, work, judge, options.runs, cfg, summary, report, system, asked_lm))
        lap("type_reader")
    elif options.type_reader:
        report.note(f"no type reader: the training questions ask for one type only ({', '.join(asked)})", "warning")
    summary["content_digest"] = content_digest(kb.skb)
    summary["minutes"] = round((time.perf_counter() - start) / 60, 2)
    summary["stage_minutes"] = stages
    write_manifest(work, summary)
    _replace(folder, work)
    adapted = cfg.updated({"trained": str(folder.resolve()), "steps": "1-8", **settings})
    save_program(program, system, adapted, out, optimizer={"optimizer": "adapt", "trained": folder.name})
    paths.replace_atomically(out.parent / f"{out.stem}.summary.json", json.dumps(summary, indent=2, default=str))
    return AdaptResult(out, folder, summary)


@contextlib.contextmanager
def _output(out: Path, folder: Path) -> Iterator[Path]:
    """A new folder beside ``folder`` for the models being trained (removed if the adaptation stops), made
    before any work, so an ``--out`` that cannot be written is refused at once; one adaptation per
    ``--out`` at a time, which removes what an adaptation killed before left there."""
    if out.is_dir():
        raise ValueError(f"--out {out} is a folder; name the program file to write (e.g. {out / 'adapted.json'})")
    with contextlib.ExitStack() as stack:
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            stack.enter_context(paths.locked(out.parent / f".{out.name}.lock", wait=False))
            for left in out.parent.glob(f".{folder.name}.*"):  # what an adaptation killed before this one left
                shutil.rmtree(left, ignore_errors=True)
            work = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{folder.name}."))
        except paths.Busy as exc:
            raise ValueError(f"{out}: another `autofocus adapt` is writing it ({exc.holder}); wait for it or "
                             "choose another --out") from None
        except OSError as exc:
            raise ValueError(f"--out {out}: cannot write in {out.parent} ({exc.strerror or exc}); choose a folder "
                             "you can write") from None
        stack.callback(shutil.rmtree, work, ignore_errors=True)  # gone already where it replaced the old folder
        os.chmod(work, 0o755)  # as a folder made by mkdir: mkdtemp's 0700 would hide the models from their users
        yield work


def _replace(folder: Path, new: Path) -> None:
    """``new`` (complete, its manifest written last) in place of ``folder``: the old folder is renamed
    aside, the new one renamed in, the old one removed."""
    if not folder.exists():
        os.replace(new, folder)
        return
    aside = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    os.replace(folder, aside)  # rename(2) onto an empty folder
    os.replace(new, folder)
    shutil.rmtree(aside, ignore_errors=True)


def _held_out(total: int, n_val: int, options: AdaptOptions, cfg: AutofocusConfig, report: Reporter) -> dict[str, Any]:
    """How many questions were held out; with none, why, and the defaults used where they would have chosen
    (said as a warning too: nothing is chosen on questions that were not there)."""
    if n_val:
        return {"questions": n_val}
    why = (f"only {total} questions (at least 10 are needed to hold any out)" if total < 10
           else f"a held-out share of {options.val_share} holds none out")
    weight = cfg.rerank.rerank_prior_weight
    defaults: dict[str, str] = {}
    said: list[str] = []
    if options.reranker:
        defaults |= {"reranker_epoch": f"the last of {options.epochs} (none chosen)",
                     "rerank_prior_weight": f"{weight} (the default, not fitted)"}
        said.append(f"the reranker keeps its last epoch and the fusion weight the default {weight}")
    if options.type_reader:
        defaults["type_reader_C"] = "1.0 (the default, not chosen)"
        said.append("the type reader its default regularisation")
    report.note(f"no held-out questions: {why}; {', '.join(said) or 'nothing is chosen on them'}", "warning")
    return {"questions": 0, "why": why, "defaults": defaults}


def _questions(load_split: Any, skb: Path | str, num_nodes: int, sources: list[tuple[str, Path | str | None]],
               written: list[QAItem]) -> list[QAItem]:
    """Every question of every source once (the first source's copy of a repeated question)."""
    seen: dict[str, QAItem] = {}
    for split, qa_dir in sources:
        for item in load_split(skb, split, num_nodes=num_nodes, qa_dir=qa_dir):
            if item.answer_ids:
                seen.setdefault(item.query, item)
    for item in written:
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


def _fusion(folder: Path, val: list[Mined], skb: Any, source: str | None, runs: dict[str, list[int]],
            record: dict[str, Any], cfg: AutofocusConfig, report: Reporter) -> dict[str, Any]:
    """Step 8's settings: the trained reranker fused with steps 1-7's order, the weight fitted on the held-out
    questions' lists (``source``'s: the judge questions'; else a run's where there is one, else the grounded
    and the vector lists pooled); where it cannot be fitted, ``record`` says so and the default weight stays.
    Where steps 6-7 kept the grounded block for strong evidence, the reranker orders inside it and inside the
    rest (``rerank_keep_block``): a model trained on the nodes' text does not overrule a match of the graph."""
    from autofocus.evaluation.fusion_fit import fit_prior_weight

    settings: dict[str, Any] = {"reranker": "auto", "rerank_fusion": "prior", "rerank_depth": None,
                                "rerank_keep_block": True}
    default = {"fitted": False, "used": cfg.rerank.rerank_prior_weight}
    if not val:
        record["fusion"] = {**default, "why": "no held-out questions"}
        return settings
    model, docs = open_reranker(folder / RERANKER_DIR, record), Documents(skb)
    cases = []
    for name in [source] if source else ["run"] if runs else ["grounded", "vector"]:
        cases += fusion_cases(model, [m for m in val if name in m.lists], docs, name)
    try:
        fit = fit_prior_weight(cases)
    except ValueError as exc:
        report.note(f"fusion weight not fitted ({exc}); the default stays", "warning")
        record["fusion"] = {**default, "why": str(exc)}
        return settings
    weight = float(min(10.0, max(0.0, fit.weight)))
    record["fusion"] = {**fit.as_dict(), "fitted": True, "used": weight,
                        "fitted_on": source or "held-out training questions"}
    report.note(fit.line())
    return {**settings, "rerank_prior_weight": round(weight, 3)}


def _judge_lists(program: Any, judge: list[JudgeQuestion], runs: dict[str, list[int]]) -> list[Mined]:
    """The judge questions' candidate lists: steps 1-7's where a run holds them, else vector search within
    their answers' type (they have no gold query to ground)."""
    mined = mine(program, [q.item(i) for i, q in enumerate(judge)], sources=("vector",), runs=runs)
    out = []
    for m, q in zip(mined, judge, strict=True):
        ids = m.lists.get("run") or m.lists.get("vector")
        if ids:
            m.lists = {JUDGE_LIST: ids}
            m.kind = q.kind
            out.append(m)
    return out


def _judge_reranker(folder: Path, judge: list[Mined], skb: Any, weight: float, summary: dict[str, Any],
                    report: Reporter) -> dict[str, Any]:
    """Step 8 on only where the judge questions say the reranker, fused as fitted, beats steps 1-7's order
    (``adapt.judge``); else a program that keeps that order, and the reason."""
    model, docs = open_reranker(folder / RERANKER_DIR, summary["reranker"]), Documents(skb)
    lists = [(m.ranked(JUDGE_LIST), m.gold, m.kind) for m in judge]
    result = rerank_verdict(lists, lambda i: model.probabilities(judge[i].item.query,
                                                                 [docs(n) for n in lists[i][0][:20]]).tolist(), weight)
    summary["reranker"]["judged"] = result.as_dict()
    report.note(result.line(), "info" if result.used else "warning")
    return {} if result.used else {"steps": "1-7", "reranker": "none"}


def _judge_type_reader(kb: Any, folder: Path, judge: list[JudgeQuestion], run_dirs: Sequence[Path | str],
                       cfg: AutofocusConfig, summary: dict[str, Any], report: Reporter, system: str = "afr",
                       lm: str | None = None) -> dict[str, Any]:
    """Step 1 reads the type reader only where the judge questions say it helps: step 1's probabilities
    recorded by a run on them (else, where the adaptation asks an LM anyway, ``lm``: step 1 asked now),
    with and without the reader's (``adapt.judge``)."""
    recorded: dict[str, dict[str, float]] = {}
    for run in run_dirs:
        recorded.update(run_type_probs(run))
    missing = [q.query for q in judge if q.query not in recorded]
    if missing and lm is not None:
        report.note(f"step 1 on {len(missing)} judge questions (the LM), to judge the type reader", "section")
        started = time.perf_counter()
        recorded.update(step1_probabilities(kb, system, cfg, missing, lm, report))
        summary["type_reader"]["step1_minutes"] = round((time.perf_counter() - started) / 60, 2)
    result = reader_verdict(kb, folder, judge, recorded, cfg.query.type_reader_weight or 1.0)
    if result is None:
        reason = "no run recorded step 1 on judge questions (--run), so nothing shows that it helps"
        summary["type_reader"]["judged"] = {"used": False, "reason": reason}
        report.note(f"step 1's type reader: not used: {reason}")
        return {}
    summary["type_reader"]["judged"] = result.as_dict()
    report.note(result.line(), "info")
    if not result.used:
        return {}
    inputs = [*cfg.query.target_type_inputs, *([] if "reader" in cfg.query.target_type_inputs else ["reader"])]
    return {"target_type_inputs": inputs, "type_reader_weight": cfg.query.type_reader_weight or 1.0}


def reader_verdict(kb: Any, folder: Path, judge: Sequence[JudgeQuestion], recorded: dict[str, dict[str, float]],
                   weight: float) -> Verdict | None:
    """The verdict on the type reader saved in ``folder``: the first type of step 1's ``recorded``
    probabilities alone and with the reader's, on the judge questions they cover (None: they cover none)."""
    from autofocus.program.trained import TypeReader

    asked = [q for q in judge if q.query in recorded]
    if not asked:
        return None
    reader = TypeReader.from_dict(json.loads((folder / TYPE_READER_FILE).read_text()), str(folder / TYPE_READER_FILE))
    vectors = kb.embed_queries([q.query for q in asked])
    rows = [(recorded[q.query], reader.probabilities(v), answer_type(q.item(0), kb.skb.type_of), q.kind)
            for q, v in zip(asked, vectors, strict=True)]  # fmt: skip
    return type_reader_verdict(rows, weight)


def step1_probabilities(kb: Any, system: str, cfg: AutofocusConfig, questions: Sequence[str], lm: str | None = None,
                        reporter: Reporter | None = None) -> dict[str, dict[str, float]]:
    """Question -> step 1's type probabilities, asked of the LM now (``lm``, default the config's; step 1
    only, as ``afr:steps=1+7`` runs it); a question step 1 gave no probabilities for is left out."""
    from autofocus import runtime
    from autofocus.trace import Trace

    report = reporter_or_log(reporter)
    program = runtime.assemble(system, kb, runtime.load_config(cfg, lm, steps="1+7"), lms=True)
    out: dict[str, dict[str, float]] = {}
    for done, question in enumerate(questions, 1):
        trace = Trace(system=system, question=question)
        program.llm_steps(question, trace)  # step 1 degrades on its own where the LM fails (no probabilities)
        if probs := trace.data.get("target_type_probs"):
            out[question] = {str(t): float(p) for t, p in probs.items()}
        report.advance("step 1 on judge questions", done, len(questions))
    return out


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
