"""STaRK's baselines on autofocus's components: BM25, VSS, and VSS + LLM reranker (top k).

They share the SKB, the embedding indexes (VSS ranks exactly like AF's step 7 without a target type)
and the step-8 rerankers with AF-Retriever, so a comparison isolates the method, not the plumbing.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import bm25s
import dspy
import numpy as np

from autofocus.config import AutofocusConfig
from autofocus.program.steps.rerank import rerank_candidates
from autofocus.program.steps.rerankers import make_reranker
from autofocus.program.steps.vss import step7_rank_rest
from autofocus.program.systems.base import SeedSystem
from autofocus.program.trained import load_trained
from autofocus.skb.model import SKB
from autofocus.trace import Trace

if TYPE_CHECKING:
    from autofocus.kb import KnowledgeBaseLike

BM25_FORMAT = 1


class BM25Index:
    """bm25s over the documents of the candidate nodes (STaRK's ``BM25``: English stopwords, no stemming).

    Scores are computed for every document and the top ``k`` taken with ties broken by node id, so
    the ranking is deterministic even among zero scores (bm25s's own top-k is not).
    """

    def __init__(self, ids: np.ndarray, retriever: bm25s.BM25) -> None:
        self.ids = ids
        self.retriever = retriever

    @classmethod
    def build(cls, skb: SKB, variant: str, budget_tokens: int | None) -> BM25Index:
        from autofocus.skb.documents import render_documents

        ids = np.asarray(skb.candidate_ids, dtype=np.int64)
        corpus = render_documents(skb, ids, variant, budget_tokens)
        retriever = bm25s.BM25()
        retriever.index(bm25s.tokenize(corpus, stopwords="en", show_progress=False), show_progress=False)
        return cls(ids, retriever)

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.retriever.save(directory, show_progress=False)
        np.save(directory / "node_ids.npy", self.ids)

    @classmethod
    def load(cls, directory: Path) -> BM25Index:
        retriever = bm25s.BM25.load(directory, show_progress=False)
        return cls(np.load(directory / "node_ids.npy"), retriever)

    def search(self, query: str, k: int) -> tuple[list[int], list[float]]:
        tokens = bm25s.tokenize([query], stopwords="en", return_ids=False, show_progress=False)[0]
        if not tokens:
            return [], []
        scores = np.asarray(self.retriever.get_scores(tokens), dtype=np.float32)
        k = min(k, len(scores))
        top = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
        order = top[np.lexsort((self.ids[top], -scores[top]))]
        return self.ids[order].tolist(), scores[order].tolist()


_BM25_LOCK = threading.Lock()


def bm25_index(skb: SKB, variant: str, budget_tokens: int | None, cache_root: Path | None = None) -> BM25Index:
    """The SKB's BM25 index: built once per process (the runner makes one program per thread), saved
    under ``<index root>/bm25/`` and loaded from there by later processes."""
    from autofocus.index.store import default_index_root

    root = cache_root if cache_root is not None else default_index_root(skb)
    key = (variant, budget_tokens, root)
    with _BM25_LOCK:
        cached = skb.__dict__.setdefault("_bm25_indexes", {})
        if key not in cached:
            cached[key] = _load_or_build(skb, variant, budget_tokens, root)
        return cached[key]


def _load_or_build(skb: SKB, variant: str, budget_tokens: int | None, root: Path) -> BM25Index:
    directory = root / "bm25" / f"v{BM25_FORMAT}-{variant.replace('+', '_')}-{budget_tokens or 'full'}"
    if (directory / "node_ids.npy").is_file():
        return BM25Index.load(directory)
    index = BM25Index.build(skb, variant, budget_tokens)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{directory.name}.", dir=directory.parent))
    index.save(tmp)
    try:
        os.replace(tmp, directory)
    except OSError:  # another process saved it first
        shutil.rmtree(tmp, ignore_errors=True)
    return index


class BM25Retriever(SeedSystem):
    """Lexical baseline: BM25 of the question against candidate documents; no LLM."""

    def __init__(self, kb: KnowledgeBaseLike, config: AutofocusConfig | None = None, system: str = "bm25") -> None:
        super().__init__(kb, config, system)

    def forward(self, question: str) -> dspy.Prediction:
        trace = Trace(system=self.system, question=question)
        with trace.step("bm25"):  # STaRK's BM25 indexes whole documents without relations
            ids, scores = bm25_index(self.kb.skb, "text", None).search(question, self.config.merge.k)
        trace.data["strand"] = dict.fromkeys(map(str, ids), "bm25")
        trace.data["scores"] = dict(zip(map(str, ids), scores, strict=True))
        trace.data["pre_rerank"] = ids
        return dspy.Prediction(ranked_ids=ids, trace=trace)


class VSSRetriever(SeedSystem):
    """STaRK's VSS (question vs node embeddings of the candidate types) and, when ``config.rerank.reranker``
    is not ``none``, VSS + a reranker over its top ``k``: an LM (STaRK reranks the top 20 pointwise) or the
    cross-encoder ``autofocus adapt`` trained (``config.trained``), which needs no LM."""

    def __init__(self, kb: KnowledgeBaseLike, config: AutofocusConfig | None = None, system: str = "vss") -> None:
        super().__init__(kb, config, system)
        self.trained = load_trained(self.config.trained, kb)
        self.reranker = make_reranker(self.config, self.config.runtime.lm.for_step("rerank"), self.trained)

    def needs_lm(self, question: object) -> bool:
        return getattr(self.reranker, "uses_lm", False)

    def forward(self, question: str) -> dspy.Prediction:
        cfg = self.config
        trace = Trace(system=self.system, question=question)
        skb: SKB = self.kb.skb
        types = skb.schema.answer_types
        with trace.step("vss"):
            qvec = self.kb.embed_query(question)
            ids, scores = step7_rank_rest(self.kb, qvec, types, np.zeros(0, np.int64), cfg.merge.k, cfg.merge.doc_variant_step7)
        trace.data["strand"] = dict.fromkeys(map(str, ids), "vss")
        trace.data["scores"] = dict(zip(map(str, ids), scores, strict=True))
        trace.data["pre_rerank"] = ids
        target = types[0] if len(types) == 1 else None
        ranked = rerank_candidates(self.reranker, question, ids, skb, target, set(), trace)
        return dspy.Prediction(ranked_ids=ranked, trace=trace)
