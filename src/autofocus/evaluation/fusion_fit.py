"""Step 8's prior-fusion weight fitted by likelihood instead of searched by a ranking metric.

Why: ``rerank_fusion: prior`` ranks by ``logit(P(yes)) - w ln(1 + r)``. Hit@1 and MRR are step
functions of ``w``, so on a few dozen questions they are flat over wide ranges and a search's
choice within the flat part is noise. Read as a conditional-logit model (the answer is candidate
``i`` with probability ``softmax(a s_i - b ln(1 + i))``), the same score has a smooth likelihood
that also uses how sure the judge was; its maximum gives one weight ``b / a``, and a bootstrap over
questions says how well the questions pin it down.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import minimize

from autofocus.program.steps.rerank import judge_logits


@dataclass(frozen=True)
class FusionCase:
    """One question's judged head: ``logits`` in steps 1-7's order and which of them are answers."""

    logits: np.ndarray
    gold: np.ndarray  # bool, same length


@dataclass(frozen=True)
class FusionFit:
    """The fitted fusion: ``weight = b / a`` with a bootstrap interval, on ``n`` informative questions."""

    weight: float
    a: float
    b: float
    low: float
    high: float
    n: int
    skipped: int  # questions with no answer among the judged candidates (no information)
    log_likelihood: float

    def line(self) -> str:
        return (
            f"likelihood fit: rerank_prior_weight = {self.weight:.2f} (95 % CI {self.low:.2f}-{self.high:.2f}; "
            f"{self.n} questions with an answer among the judged candidates, {self.skipped} without)"
        )

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("weight", "a", "b", "low", "high", "n", "skipped", "log_likelihood")}


def case(scores: Sequence[float], input_ids: Sequence[int], answers: Iterable[int]) -> FusionCase | None:
    """A question's case from step 8's recorded ``scores`` (of the first ``len(scores)`` inputs),
    or None where they cannot inform the fit (no scores, or no answer among the scored)."""
    if not scores:
        return None
    logits = judge_logits(scores)
    head = np.asarray(input_ids[: len(logits)], dtype=np.int64)
    gold = np.isin(head, np.fromiter((int(a) for a in answers), dtype=np.int64))
    if not gold.any():
        return None
    return FusionCase(logits=logits, gold=gold)


def case_from_trace(trace_data: Mapping[str, Any], answers: Iterable[int]) -> FusionCase | None:
    """``case`` from a trace's ``data`` (an eval run's traces.jsonl line or a tuning trial's Trace)."""
    data = trace_data.get("rerank") or {}
    if data.get("method") != "pointwise" or "input" not in data:
        return None
    return case(data.get("scores") or [], [int(i) for i in data["input"]], answers)


def _stack(cases: Sequence[FusionCase]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Ragged cases as padded arrays (logits, log-rank, gold, valid) so the likelihood is vectorised."""
    m = max(len(c.logits) for c in cases)
    logits = np.zeros((len(cases), m))
    gold = np.zeros((len(cases), m), dtype=bool)
    valid = np.zeros((len(cases), m), dtype=bool)
    for row, c in enumerate(cases):
        logits[row, : len(c.logits)] = c.logits
        gold[row, : len(c.gold)] = c.gold
        valid[row, : len(c.logits)] = True
    ranks = np.broadcast_to(np.log1p(np.arange(m, dtype=np.float64)), logits.shape)
    return logits, ranks, gold, valid


def _fit(logits: np.ndarray, ranks: np.ndarray, gold: np.ndarray, valid: np.ndarray,
         start: tuple[float, float] = (1.0, 1.0)) -> tuple[float, float, float]:
    """(a, b, log-likelihood) maximising the answers' summed softmax probability per question, searched
    from ``start``."""

    def negative(params: np.ndarray) -> tuple[float, np.ndarray]:
        a, b = params
        z = a * logits - b * ranks
        zv, zg = np.where(valid, z, -np.inf), np.where(gold, z, -np.inf)
        top, top_gold = zv.max(axis=1, keepdims=True), zg.max(axis=1, keepdims=True)  # shifts keep exp in range
        e, eg = np.exp(zv - top), np.exp(zg - top_gold)  # 0 outside the list, and outside the answers
        total, answers = e.sum(axis=1, keepdims=True), eg.sum(axis=1, keepdims=True)
        ll = (np.log(answers) + top_gold) - (np.log(total) + top)
        diff = eg / answers - e / total  # the posterior over the answers less the softmax over all
        return -float(ll.sum()), -np.array([(diff * logits).sum(), -(diff * ranks).sum()])

    result = minimize(negative, x0=np.array(start), jac=True, method="L-BFGS-B",
                      bounds=[(1e-3, 100.0), (0.0, 100.0)])  # fmt: skip
    a, b = (float(v) for v in result.x)
    return a, b, -float(result.fun)


def fit_prior_weight(
    cases: Sequence[FusionCase | None], bootstrap: int = 1000, seed: int = 0
) -> FusionFit:
    """The likelihood fit of ``rerank_prior_weight`` over ``cases`` (None entries are counted as skipped)."""
    usable = [c for c in cases if c is not None]
    if not usable:
        raise ValueError("no question has an answer among step 8's judged candidates: nothing to fit")
    arrays = _stack(usable)
    a, b, ll = _fit(*arrays)
    rng = np.random.default_rng(seed)
    fits: dict[bytes, float] = {}  # a resample is its multiset of questions: few distinct ones where questions are few
    weights = []
    for _ in range(bootstrap):
        pick = np.sort(rng.integers(0, len(usable), len(usable)))
        key = pick.tobytes()
        if key not in fits:
            ba, bb, _ = _fit(*(x[pick] for x in arrays), start=(a, b))  # a resample's optimum lies near the whole's
            fits[key] = bb / ba
        weights.append(fits[key])
    low, high = (float(v) for v in np.percentile(weights, [2.5, 97.5])) if weights else (b / a, b / a)
    return FusionFit(weight=b / a, a=a, b=b, low=low, high=high, n=len(usable),
                     skipped=len(cases) - len(usable), log_likelihood=ll)  # fmt: skip
