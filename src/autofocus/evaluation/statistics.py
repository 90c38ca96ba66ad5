"""The statistics of reports: means with 95% intervals and paired tests of two runs on the same questions.

Users compare systems on a few dozen questions, so every mean comes with a 95% interval (Wilson for 0/1
metrics, percentile bootstrap otherwise) and every comparison is paired (exact McNemar for 0/1 metrics,
a sign-flip permutation test otherwise), with the smallest difference the split could detect (80 %
power) and, for several comparisons on one split, Holm-adjusted p-values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats

N_RESAMPLES = 2000
ALPHA = 0.05
POWER = 0.8


def _is_binary(x: np.ndarray) -> bool:
    return bool(np.all((x == 0) | (x == 1)))


def mean_ci(x: np.ndarray, seed: int = 0) -> dict[str, Any]:
    """Mean with a 95% interval: Wilson for 0/1 values, percentile bootstrap otherwise."""
    n = int(x.size)
    if n == 0:
        return {"mean": None, "low": None, "high": None, "ci": None}
    mean = float(x.mean())
    if _is_binary(x):
        ci = stats.binomtest(int(x.sum()), n).proportion_ci(confidence_level=0.95, method="wilson")
        return {"mean": mean, "low": float(ci.low), "high": float(ci.high), "ci": "wilson"}
    low, high = bootstrap_ci(x, seed)
    return {"mean": mean, "low": low, "high": high, "ci": "bootstrap"}


def bootstrap_ci(x: np.ndarray, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap 95% interval of the mean (the mean itself when every value is the same)."""
    if x.size < 2 or np.all(x == x[0]):
        mean = float(x.mean())
        return mean, mean
    ci = stats.bootstrap(
        (x,), np.mean, n_resamples=N_RESAMPLES, method="percentile", vectorized=True, rng=np.random.default_rng(seed)
    ).confidence_interval
    return float(ci.low), float(ci.high)


def paired_test(a: np.ndarray, b: np.ndarray, seed: int = 0) -> dict[str, Any]:
    """Mean of ``b - a`` with a paired bootstrap 95% interval and a two-sided p-value.

    0/1 metrics use the exact McNemar test (a binomial test on the discordant pairs); others a
    sign-flip permutation test on the mean difference (exact when 2^n <= 9999).
    """
    d = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
    n = int(d.size)
    binary = _is_binary(a) and _is_binary(b)
    out: dict[str, Any] = {"n": n, "test": "mcnemar-exact" if binary else "sign-flip permutation"}
    if n == 0:
        return {
            **out,
            "mde": None,
            "a": None,
            "b": None,
            "diff": None,
            "low": None,
            "high": None,
            "p": None,
            "significant": False,
        }
    low, high = bootstrap_ci(d, seed)
    out.update(a=float(np.mean(a)), b=float(np.mean(b)), diff=float(d.mean()), low=low, high=high,
               mde=detectable_difference(d))  # fmt: skip
    if binary:
        b_only, a_only = int(((a == 0) & (b == 1)).sum()), int(((a == 1) & (b == 0)).sum())
        out["discordant"] = [a_only, b_only]
        out["p"] = float(stats.binomtest(b_only, a_only + b_only).pvalue) if a_only + b_only else 1.0
    elif n < 2 or not d.any():
        out["p"] = 1.0
    else:
        res = stats.permutation_test(
            (d,),
            np.mean,
            permutation_type="samples",
            vectorized=True,
            n_resamples=9999,
            rng=np.random.default_rng(seed),
        )
        out["p"] = float(res.pvalue)
    out["significant"] = out["p"] < ALPHA
    return out


def detectable_difference(d: np.ndarray) -> float | None:
    """The mean paired difference a two-sided test at ``ALPHA`` finds with probability ``POWER`` on
    ``len(d)`` questions, from these differences' own spread (normal approximation): the size of
    effect this split can resolve, to read beside a "within noise"."""
    if d.size < 2 or not d.any():  # no spread to estimate it from
        return None
    z = stats.norm.ppf(1 - ALPHA / 2) + stats.norm.ppf(POWER)
    return float(z * np.std(d, ddof=1) / np.sqrt(d.size))


def holm(pvalues: Sequence[float | None], comparisons: int | None = None) -> list[float | None]:
    """Holm's step-down adjustment of ``pvalues`` (None stays None) as if ``comparisons`` tests
    were made in all (default: these). Tests made elsewhere on the same split are assumed to have
    larger p-values, which can only make the adjustment stricter than Holm's own."""
    known = [(p, i) for i, p in enumerate(pvalues) if p is not None]
    m = max(comparisons or 0, len(known))
    out: list[float | None] = [None] * len(pvalues)
    if not known:
        return out
    order = sorted(known)
    scaled = np.array([(m - rank) * p for rank, (p, _) in enumerate(order)])
    adjusted = np.minimum(np.maximum.accumulate(scaled), 1.0)
    for (_, i), q in zip(order, adjusted, strict=True):
        out[i] = float(q)
    return out
