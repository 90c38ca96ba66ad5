"""The training questions of ``autofocus adapt`` by source, and the natural questions that judge it.

Sources (``AdaptOptions.questions``), ``AdaptOptions.templates`` questions in all:

- ``templates``: query patterns of the graph written over the schema's labels (``synthetic.templates``).
- ``paraphrase``: the same patterns in plainer words (``synthetic.paraphrase.ParaphraseWriter``), and a
  share ``TEXTUAL_SHARE`` of textual questions, each describing one node by its defining clause. No LM.
- ``lm``: questions the LM writes from nodes' text and relations (``synthetic.natural``), three a node.
- ``mix``: ``paraphrase`` and ``lm``, the LM's share ``lm_share`` of the questions.

The LM's questions are split by node: a seeded share of the nodes (``judge_share``) is never trained
on, and its questions are the *judge*: held-out questions of the natural kind, per question kind
(``judge_questions``). Node-level questions of every source leave the judge's nodes out.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from autofocus.config import AutofocusConfig
from autofocus.options import AdaptOptions
from autofocus.progress import Reporter, reporter_or_log
from autofocus.skb.model import SKB
from autofocus.skb.qa import QAItem
from autofocus.synthetic.natural import (
    KINDS,
    MAX_TOKENS,
    NaturalQuestion,
    NaturalWriter,
    choose_nodes,
    held_out,
)
from autofocus.synthetic.paraphrase import Paraphraser

SOURCES = ("templates", "paraphrase", "lm", "mix")
LM_SOURCES = ("lm", "mix")  # the sources that ask the LM (so its judge questions and step 1 come at no new setup)
TEXTUAL_SHARE = 1 / 3  # of the ``paraphrase`` questions, those describing one node (the rest: patterns)
JUDGE_SHARE = 0.2  # of the nodes the LM is asked about, those whose questions only judge
JUDGE_NODES = 60  # nodes asked for the judge by default: about 150 questions once checked


def plan(options: AdaptOptions) -> dict[str, int]:
    """Questions wanted per writer: ``patterns`` (template or paraphrased), ``textual`` (paraphrased
    nodes) and ``lm_nodes`` (nodes the LM is asked about, three questions each)."""
    n, source = options.templates, options.questions
    if source not in SOURCES:
        raise ValueError(f"unknown question source {source!r}: one of {', '.join(SOURCES)}")
    lm = round(n * options.lm_share) if source == "mix" else n if source == "lm" else 0
    plain = n - lm
    textual = round(plain * TEXTUAL_SHARE) if source in ("paraphrase", "mix") else 0
    return {"patterns": plain - textual, "textual": textual, "lm_nodes": math.ceil(lm / len(KINDS))}


def paraphrased_questions(skb: SKB, n: int, seed: int = 0, judge_share: float = JUDGE_SHARE) -> list[NaturalQuestion]:
    """``n`` textual questions, each describing one node (none of the judge's) by its defining clause."""
    writer, rng = Paraphraser(skb, seed=seed), np.random.default_rng([seed, 2])
    out: list[NaturalQuestion] = []
    for node in choose_nodes(skb, 2 * n, seed + 1, exclude=held_out(skb.num_nodes, seed, judge_share)):
        text = writer.textual(node, rng)
        if text is not None:
            out.append(NaturalQuestion(text, (node,), "textual", skb.type_of(node), node))
        if len(out) >= n:
            break
    return out


def lm_writer(skb: SKB, config: AutofocusConfig, lm: str | None, seed: int, threads: int) -> NaturalWriter:
    """The writer with the named LM (default: the config's), its timeout and retries; the LM is opened only
    if a node is not cached."""
    from autofocus.lm import get_lm, is_local_spec
    from autofocus.local_lm.models import resolve_local

    spec = lm or config.runtime.lm.default
    options = {**config.runtime.lm.client_options(), "max_tokens": MAX_TOKENS}
    name = f"openai/{resolve_local(spec).alias}" if is_local_spec(spec) else spec  # as get_lm names it
    return NaturalWriter(skb, lm=lambda: get_lm(spec, **options), name=name, seed=seed, threads=threads)


def natural_questions(writer: NaturalWriter, n_nodes: int, *, judge: bool, seed: int = 0,
                      judge_share: float = JUDGE_SHARE, reporter: Reporter | None = None) -> tuple[list[NaturalQuestion], dict[str, Any]]:
    """The LM's questions about ``n_nodes`` nodes: the judge's (``judge``) or the training ones, and the
    run's summary (cached and asked nodes, rejections, seconds)."""
    report = reporter_or_log(reporter)
    judges = held_out(writer.skb.num_nodes, seed, judge_share)
    nodes = choose_nodes(writer.skb, n_nodes, seed, exclude=~judges if judge else judges)
    task = "judge questions (LM)" if judge else "training questions (LM)"
    result = writer(nodes, progress=lambda done, total: report.advance(task, done, total))
    if result.stopped:
        report.note(f"{task}: stopped after {result.asked} nodes: {result.stopped}", "warning")
    return result.questions, result.summary()


def judge_questions(skb: Path | str, config: AutofocusConfig, *, n_nodes: int = JUDGE_NODES, lm: str | None = None,
                    seed: int = 0, judge_share: float = JUDGE_SHARE, threads: int = 1,
                    reporter: Reporter | None = None) -> list[NaturalQuestion]:
    """Held-out natural questions of the knowledge base at ``skb``: what the LM writes about ``n_nodes``
    nodes that no source of ``adapt`` trains on (the same ``seed`` and ``judge_share``), each a
    ``NaturalQuestion`` (query, answer ids, kind, target type). Asked once per knowledge base and LM
    (cached in the autofocus home)."""
    from autofocus import runtime

    kb = runtime.open_kb(skb, config.index.embedder, config.index.index_kind, config.index.doc_budget_tokens)
    writer = lm_writer(kb.skb, config, lm, seed, threads)
    return natural_questions(writer, n_nodes, judge=True, seed=seed, judge_share=judge_share, reporter=reporter)[0]


def training_questions(skb: Path | str, kb_skb: SKB, config: AutofocusConfig, options: AdaptOptions, where: Path,
                       reporter: Reporter | None = None) -> tuple[list[tuple[str, Path]], list[QAItem], dict[str, Any]]:
    """The questions of ``options.questions``: splits written to ``where`` (pattern questions, read by
    ``load_split``), node-level questions as QA items, and what each source gave."""
    report = reporter_or_log(reporter)
    wanted = plan(options)
    record: dict[str, Any] = {"source": options.questions, "plan": wanted}
    sources: list[tuple[str, Path]] = []
    if wanted["patterns"]:
        writer = "template" if options.questions == "templates" else "paraphrase"
        report.note(f"writing {wanted['patterns']} {writer} questions from the graph", "section")
        sources.append(("synthetic", _patterns(skb, config, options, writer, wanted["patterns"], where, report)))
    found: list[NaturalQuestion] = []
    if wanted["textual"]:
        found += paraphrased_questions(kb_skb, wanted["textual"], options.seed, options.judge_share)
        record["textual"] = len(found)
    if wanted["lm_nodes"]:
        report.note(f"asking the LM about {wanted['lm_nodes']} nodes", "section")
        writer_lm = lm_writer(kb_skb, config, options.lm, options.seed, options.lm_threads)
        written, record["lm"] = natural_questions(writer_lm, wanted["lm_nodes"], judge=False, seed=options.seed,
                                                  judge_share=options.judge_share, reporter=reporter)
        found += written
    return sources, [q.item(i) for i, q in enumerate(found)], record


def _patterns(skb: Path | str, config: AutofocusConfig, options: AdaptOptions, writer: str, n: int, where: Path,
              report: Reporter) -> Path:
    from autofocus.options import SynthOptions
    from autofocus.synthetic.run import run_synthesis

    done = [0]

    def tick(stage: str, k: int) -> None:
        if stage == "questions":
            done[0] += k
            report.advance(f"{writer} questions", done[0], n)

    run = run_synthesis(skb, config, n, SynthOptions(seed=options.seed, writer=writer, clue_kind="phrase", out=where),
                        tick=tick)
    if not run.result.pairs:
        raise ValueError("the graph gave no template question (no edges between answer types and named nodes?)")
    return where
