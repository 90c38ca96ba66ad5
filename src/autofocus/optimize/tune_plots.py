"""PNG plots of a tuning study: metrics against alpha (paper Fig. 2), against l_max (Table 19),
against step 8's prior-fusion weight, parameter importances and the optimisation history.

Built with ``matplotlib.figure.Figure`` on the Agg canvas (no pyplot, no GUI backend), as the
evaluation plots are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

ALPHA_PNG = "alpha.png"
L_MAX_PNG = "l_max.png"
PRIOR_WEIGHT_PNG = "prior_weight.png"
IMPORTANCE_PNG = "importance.png"
HISTORY_PNG = "history.png"


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    fig.savefig(path, format="png", dpi=120, bbox_inches="tight")
    return path


def plot_alpha(
    curves: Mapping[str, Sequence[Mapping[str, Any]]],
    path: Path,
    default_alpha: float,
    best_alpha: float | None = None,
    metrics: Sequence[str] = ("hit@20", "recall@20"),
    title: str | None = None,
) -> Path:
    """One panel per metric, one line per split; dotted lines at the default (red) and best alpha."""
    fig = Figure(figsize=(4.2 * len(metrics), 3.8), layout="constrained")
    for col, metric in enumerate(metrics):
        ax = fig.add_subplot(1, len(metrics), col + 1)
        for label, rows in curves.items():
            xs = [r["alpha"] for r in rows]
            ax.plot(xs, [100 * r[metric] for r in rows], marker=".", label=label)
        ax.axvline(default_alpha, color="tab:red", linestyle=":", label=f"default {default_alpha:.2f}")
        if best_alpha is not None:
            ax.axvline(best_alpha, color="tab:gray", linestyle=":", label=f"tuned {best_alpha:.2f}")
        ax.set_xlabel("alpha (share of k for the grounded strand)")
        ax.set_ylabel(f"{metric} (%)")
        ax.set_xlim(0, 1)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title or "Pre-rerank metrics against alpha (cf. paper Fig. 2)")
    return _save(fig, path)


def plot_l_max(rows: Sequence[Mapping[str, Any]], path: Path, title: str | None = None) -> Path:
    """Table 19 as lines over the l_max grid (evenly spaced, labelled by value; 0 = steps 1+7)."""
    labels = [str(r["l_max"]) for r in rows]
    xs = list(range(len(rows)))
    fig = Figure(figsize=(9, 3.8), layout="constrained")
    left, right = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    for key, name in (
        ("precision", "precision"),
        ("specificity", "specificity (recall)"),
        ("nonempty", ">0 grounded"),
    ):
        left.plot(
            xs,
            [100 * r[key] if r.get(key) is not None else float("nan") for r in rows],
            marker=".",
            label=name,
        )
    left.set_title("grounded set (steps 1-5)")
    for part, style in (("steps1-6", "--"), ("steps1-7", "-")):
        for metric in ("hit@20", "recall@20"):
            ys = [100 * r[part][metric] if metric in r.get(part, {}) else float("nan") for r in rows]
            right.plot(xs, ys, style, marker=".", label=f"{part.replace('steps', 'steps ')} {metric}")
    right.set_title("retrieval (pre-rerank)")
    for ax in (left, right):
        ax.set_xticks(xs, labels)
        ax.set_xlabel("l_max")
        ax.set_ylabel("%")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title or "Sensitivity to l_max (cf. paper Table 19)")
    return _save(fig, path)


def plot_prior_weight(
    rows: Sequence[Mapping[str, Any]], path: Path, best_weight: float | None = None, fit: Any = None,
    metrics: Sequence[str] = ("hit@1", "mrr"), title: str | None = None,
) -> Path:
    """Reranked metrics over the weight grid (evenly spaced, labelled by value: 0 is the judge
    alone, 10 nearly steps 1-7's order); the tuned weight in the title; a ``FusionFit``'s weight
    and bootstrap interval shaded (placed between grid points by linear interpolation)."""
    fig = Figure(figsize=(5.2, 3.8), layout="constrained")
    ax = fig.add_subplot()
    xs = list(range(len(rows)))
    for metric in metrics:
        ax.plot(xs, [100 * r[metric] for r in rows], marker=".", label=metric)
    grid = [r["rerank_prior_weight"] for r in rows]
    if fit is not None:
        at = lambda w: float(np.interp(w, grid, xs))  # noqa: E731
        ax.axvspan(at(fit.low), at(fit.high), color="tab:green", alpha=0.12, label="likelihood fit, 95% CI")
        ax.axvline(at(fit.weight), color="tab:green", lw=1)
    ax.set_xticks(xs, [f"{w:g}" for w in grid])
    ax.set_xlabel("prior weight w (0: the judge's order; large: steps 1-7's order)")
    ax.set_ylabel("%")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    tuned = f" (tuned w = {best_weight:.2f})" if best_weight is not None else ""
    fig.suptitle(title or f"Step 8: logit P(yes) - w ln(1 + retrieval rank){tuned}")
    return _save(fig, path)


def plot_importance(values: Mapping[str, float], path: Path, title: str | None = None) -> Path:
    """Horizontal bars of Optuna's parameter importances."""
    names = list(values)[::-1]
    fig = Figure(figsize=(6, 0.4 * len(names) + 1.2))
    ax = fig.add_subplot()
    ax.barh(names, [values[n] for n in names], color="tab:blue")
    ax.set_xlabel("importance (share)")
    ax.set_title(title or "Parameter importance")
    return _save(fig, path)


def plot_history(values: Sequence[float], path: Path, metric: str, baseline: float | None = None) -> Path:
    """Each trial's objective and the best so far."""
    best, run = [], float("-inf")
    for v in values:
        run = max(run, v)
        best.append(run)
    fig = Figure(figsize=(7, 3.4))
    ax = fig.add_subplot()
    xs = list(range(len(values)))
    ax.scatter(xs, values, s=8, alpha=0.5, label="trial")
    ax.plot(xs, best, color="tab:green", label="best so far")
    if baseline is not None:
        ax.axhline(baseline, color="tab:red", linestyle=":", label="defaults")
    ax.set_xlabel("trial")
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)
