"""PNG plots of runs: the error-propagation funnel (paper, Figure 3), per-step latency, metric curves.

Figures are built with ``matplotlib.figure.Figure`` and the Agg canvas, never ``pyplot``: no GUI
backend, no global figure state, safe from worker threads and headless machines.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from autofocus.evaluation.report import step_seconds

FUNNEL_PNG = "funnel.png"
LATENCY_PNG = "latency.png"


def _save(fig: Figure, path: Path | str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    fig.savefig(path, format="png", dpi=120, bbox_inches="tight")
    return path


def plot_funnel(summary: Mapping[str, Any], path: Path | str, title: str | None = None) -> Path:
    """Horizontal bars: share of all questions that reach each stage of the pipeline."""
    stages = summary["error_propagation"]["stages"]
    names = [s["name"] for s in stages][::-1]
    fracs = [100 * (s["fraction"] or 0.0) for s in stages][::-1]
    counts = [s["count"] for s in stages][::-1]
    fig = Figure(figsize=(7, 0.45 * len(stages) + 1.2))
    ax = fig.add_subplot()
    colors = ["tab:green" if n.startswith("hit@") else "tab:blue" for n in names]
    bars = ax.barh(names, fracs, color=colors)
    for bar, frac, count in zip(bars, fracs, counts, strict=True):
        ax.text(
            bar.get_width() + 1, bar.get_y() + bar.get_height() / 2, f"{frac:.1f}% ({count})", va="center"
        )
    ax.set_xlim(0, 115)
    ax.set_xlabel("% of all questions")
    ax.set_title(title or f"Error propagation ({summary['n']} questions)")
    return _save(fig, path)


def plot_step_latency(
    records: Sequence[Mapping[str, Any]], path: Path | str, title: str | None = None
) -> Path:
    """Box plot of seconds per step over the questions where the step ran (log scale)."""
    per_step = step_seconds(records)
    steps = list(per_step)
    fig = Figure(figsize=(max(5.0, 0.9 * len(steps) + 2), 4))
    ax = fig.add_subplot()
    if steps:
        floor = 1e-6  # a log axis cannot show steps that took 0 s
        ax.boxplot([[max(v, floor) for v in per_step[s]] for s in steps], tick_labels=steps, showfliers=True)
        ax.set_yscale("log")
        ax.tick_params(axis="x", labelrotation=30)
    else:
        ax.text(0.5, 0.5, "no step timings in these traces", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylabel("seconds")
    ax.set_title(title or "Latency per step")
    return _save(fig, path)


def plot_metric_curves(
    x: Sequence[float],
    series: Mapping[str, Sequence[float]],
    path: Path | str,
    *,
    xlabel: str,
    ylabel: str,
    title: str | None = None,
    bands: Mapping[str, tuple[Sequence[float], Sequence[float]]] | None = None,
    xscale: str = "linear",
    mark_best: bool = False,
) -> Path:
    """Metric(s) against one parameter (alpha curves, l_max sweeps), optionally with CI bands.

    Example:
        >>> plot_metric_curves([0.4, 0.6], {"hit@20": [0.5, 0.6]}, "alpha.png", xlabel="alpha", ylabel="%")
    """
    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    for name, ys in series.items():
        if len(ys) != len(x):
            raise ValueError(f"series {name!r} has {len(ys)} values for {len(x)} x values")
        (line,) = ax.plot(x, ys, marker="o", label=name)
        if bands and name in bands:
            low, high = bands[name]
            ax.fill_between(x, low, high, color=line.get_color(), alpha=0.2)
        if mark_best and len(ys):
            best = max(range(len(ys)), key=lambda i: ys[i])
            ax.scatter([x[best]], [ys[best]], s=120, facecolors="none", edgecolors=line.get_color())
    ax.set_xscale(xscale)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    if len(series) > 1 or bands:
        ax.legend()
    return _save(fig, path)


def save_run_plots(
    run_dir: Path | str, summary: Mapping[str, Any], records: Sequence[Mapping[str, Any]]
) -> list[Path]:
    run_dir = Path(run_dir)
    return [plot_funnel(summary, run_dir / FUNNEL_PNG), plot_step_latency(records, run_dir / LATENCY_PNG)]
