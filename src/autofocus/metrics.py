"""Retrieval metrics with STaRK's definitions, computed by autofocus itself over ranked id lists.

STaRK's evaluator (``stark_qa/evaluator.py``) scores a question over its candidate set: gold
answers that are not candidates are dropped from the denominator, predicted non-candidates are
ignored, and a question with no candidate gold answer scores 0 everywhere. We keep those
semantics but not its dependence on torchmetrics' changing treatment of unscored candidates
(as the authors' evaluation code computes it): a gold answer that is not in the returned list
counts as not retrieved, so MRR is 1/rank of the first gold in the list, else 0.

Definitions, with ``G`` the gold answers that are candidates and ``R`` the ranked candidates:

- ``hit@k``    = 1 if any of ``G`` is in ``R[:k]``, else 0;
- ``recall@k`` = ``|G ∩ R[:k]| / |G|`` (no cap at k, unlike AF's ``recall_20``, which is not recall);
- ``mrr``      = ``1 / rank`` of the first member of ``G`` in ``R`` (rank 1 = first), 0 when none.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

DEFAULT_KS: tuple[int, ...] = (1, 5, 10, 20)


class Candidates:
    """A candidate id set prepared once for fast membership tests (sorted array + ``searchsorted``).

    STaRK SKBs hold up to millions of candidates; building a Python set or calling ``np.isin``
    on every question would cost more than the metrics themselves.
    """

    __slots__ = ("ids",)

    def __init__(self, ids: Iterable[int] | np.ndarray) -> None:
        arr = np.asarray(ids if isinstance(ids, np.ndarray) else list(ids), dtype=np.int64).ravel()
        if arr.size > 1 and not bool(np.all(arr[1:] > arr[:-1])):
            arr = np.unique(arr)
        self.ids = arr

    def __len__(self) -> int:
        return int(self.ids.size)

    def contains(self, values: np.ndarray) -> np.ndarray:
        """Boolean mask: which of ``values`` are candidates."""
        values = np.asarray(values, dtype=np.int64)
        if self.ids.size == 0:
            return np.zeros(values.shape, dtype=bool)
        pos = np.searchsorted(self.ids, values)
        return self.ids[np.minimum(pos, self.ids.size - 1)] == values


CandidatesLike = Candidates | Iterable[int] | np.ndarray


def as_candidates(candidates: CandidatesLike | None) -> Candidates | None:
    if candidates is None or isinstance(candidates, Candidates):
        return candidates
    return Candidates(candidates)


def _first_occurrences(ranked: np.ndarray) -> np.ndarray:
    """Drop repeated ids, keeping the first (best) position of each, order preserved."""
    _, first = np.unique(ranked, return_index=True)
    return ranked[np.sort(first)]


def prepare(
    ranked: Sequence[int] | np.ndarray,
    gold: Iterable[int] | np.ndarray,
    candidates: CandidatesLike | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The ranked list and gold set that STaRK would score: deduplicated, restricted to candidates."""
    r = _first_occurrences(
        np.asarray(list(ranked) if not isinstance(ranked, np.ndarray) else ranked, dtype=np.int64)
    )
    g = np.unique(np.asarray(list(gold) if not isinstance(gold, np.ndarray) else gold, dtype=np.int64))
    cand = as_candidates(candidates)
    if cand is not None:
        r = r[cand.contains(r)]
        g = g[cand.contains(g)]
    return r, g


def compute_metrics(
    ranked: Sequence[int] | np.ndarray,
    gold: Iterable[int] | np.ndarray,
    candidates: CandidatesLike | None = None,
    ks: Sequence[int] = DEFAULT_KS,
) -> dict[str, float]:
    """``hit@k`` and ``recall@k`` for each k, and ``mrr``, of one question.

    Args:
        ranked: node ids, best first (repeats are ignored after their first position).
        gold: the question's gold answer ids.
        candidates: the SKB's candidate ids (``kb.skb.candidate_ids``); None keeps every id.
        ks: cut-offs.

    Example:
        >>> compute_metrics([5, 2, 9], [2, 7], ks=(1, 2))
        {'hit@1': 0.0, 'recall@1': 0.0, 'hit@2': 1.0, 'recall@2': 0.5, 'mrr': 0.5}
    """
    if any(k < 1 for k in ks):
        raise ValueError(f"cut-offs must be >= 1, got {list(ks)}")
    r, g = prepare(ranked, gold, candidates)
    out: dict[str, float] = {}
    if g.size == 0:
        for k in ks:
            out[f"hit@{k}"] = 0.0
            out[f"recall@{k}"] = 0.0
        out["mrr"] = 0.0
        return out
    is_gold = np.isin(r, g)
    hits_upto = np.cumsum(is_gold)  # hits_upto[i] = gold answers in r[: i + 1]
    for k in ks:
        found = int(hits_upto[min(k, r.size) - 1]) if r.size else 0
        out[f"hit@{k}"] = float(found > 0)
        out[f"recall@{k}"] = found / g.size
    first = np.flatnonzero(is_gold)
    out["mrr"] = 1.0 / (int(first[0]) + 1) if first.size else 0.0
    return out


_METRIC_NAME = re.compile(r"^(hit|recall)@(\d+)$")

DspyMetric = Callable[..., float]


def dspy_metric(name: str, candidates: CandidatesLike | None = None) -> DspyMetric:
    """A metric for DSPy optimisers and ``dspy.Evaluate``: ``metric(example, pred, trace=None) -> float``.

    ``name`` is ``mrr``, ``hit@k`` or ``recall@k`` (any case). The example needs ``answer_ids``, the
    prediction ``ranked_ids``. The returned function also accepts GEPA's two extra arguments
    (``pred_name``, ``pred_trace``), so the same metric works with every optimiser.

    Example:
        >>> metric = dspy_metric("hit@1")
        >>> metric(dspy.Example(answer_ids=[3]), dspy.Prediction(ranked_ids=[3, 1]))
        1.0
    """
    name = name.strip().lower()
    match = _METRIC_NAME.match(name)
    if name != "mrr" and match is None:
        raise ValueError(
            f"unknown metric {name!r}: use 'mrr', 'hit@<k>' or 'recall@<k>' (e.g. 'hit@1', 'recall@20')"
        )
    ks = (int(match.group(2)),) if match else (1,)
    if match and ks[0] < 1:
        raise ValueError(f"metric {name!r}: k must be >= 1")
    cand = as_candidates(candidates)

    def metric(
        example: Any, pred: Any, trace: Any = None, pred_name: str | None = None, pred_trace: Any = None
    ) -> float:
        ranked = getattr(pred, "ranked_ids", None)
        if ranked is None:
            raise AttributeError(
                f"metric {name!r} needs a prediction with `ranked_ids`, got {type(pred).__name__}"
            )
        return compute_metrics(ranked, example.answer_ids, cand, ks=ks)[name]

    metric.__name__ = f"autofocus_{name.replace('@', '_at_')}"
    return metric
