"""Step 8's alternatives recomputed from a finished run's traces, with no LM call (``autofocus report fusion``).

A run of ``afr`` (or any system with a reranker) records, per question, step 8's input order (steps 1-7)
and the reranker's output, and for the pointwise judge its per-candidate scores. Reciprocal rank fusion
(``rerank_fusion=rrf``), the prior fusion (``rerank_fusion=prior``), the grounded block kept first
(``rerank_keep_block``) and a smaller ``rerank_depth`` are deterministic functions of those, so what each
would have ranked follows exactly, paired on the same questions, from one run: choosing them costs no
second run. A pointwise run over all k gives every depth (its scores are per candidate). The likelihood
fit of the prior weight (``evaluation.fusion_fit``) reads the same scores; on a labelled split that is
tuning on it, so it is a diagnostic there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from autofocus.evaluation.fusion_fit import FusionFit, case_from_trace, fit_prior_weight
from autofocus.evaluation.report import Run
from autofocus.evaluation.statistics import paired_test
from autofocus.metrics import compute_metrics
from autofocus.program.steps.rerank import prior_fuse, rrf_fuse
from autofocus.program.steps.vss import grounded_first

BASELINE = "reranker"  # every other order is compared, paired, with the reranker's own
METRICS = ("hit@1", "mrr")


def step8_orders(
    record: Mapping[str, Any],
    rrf_ks: Sequence[int] = (60,),
    depths: Sequence[int] = (),
    weights: Sequence[float] = (),
) -> dict[str, list[int]] | None:
    """One question's top k in every order the trace determines (steps 1-7, the reranker, its fusions, the
    block kept, each depth), or None where step 8 did not run."""
    trace_data = record["trace"]["data"]
    data = trace_data.get("rerank")
    if not data or "input" not in data:
        return None
    ids = [int(i) for i in data["input"]]
    reranked = [int(i) for i in data.get("reranker_output", data["output"])]
    position = {node: i for i, node in enumerate(ids)}
    out = {"steps 1-7": ids, BASELINE: reranked}
    kept = (trace_data.get("merge") or {}).get("order") == "block"  # steps 6-7 kept the block for strong evidence
    strand = {int(n): s for n, s in trace_data.get("strand", {}).items()}
    out["reranker, block kept"] = grounded_first(reranked, strand) if kept else reranked
    for k in rrf_ks:
        out[f"rrf k={k}"] = [ids[i] for i in rrf_fuse([position[n] for n in reranked], k)]
    scores = data.get("scores") if data.get("method") == "pointwise" else None
    if scores is not None:  # the scores of the first len(scores) inputs (rerank_depth)
        head, by_reranker = ids[: len(scores)], [position[n] for n in reranked[: len(scores)]]
        for w in weights:
            out[f"prior w={w:g}"] = [head[i] for i in prior_fuse(by_reranker, scores, w)] + ids[len(scores) :]
        if "depth" not in data and len(scores) == len(ids):  # a run over all k: every smaller depth follows
            ranks = np.lexsort((np.arange(len(ids)), -np.asarray(scores, dtype=np.float64)))
            for d in depths:
                head_d = [ids[i] for i in ranks if i < d]
                out[f"reranker, depth {d}"] = head_d + ids[d:]
    return out


@dataclass
class OrderRow:
    """One order's means over the run's step-8 questions and its paired test against the reranker's."""

    name: str
    means: dict[str, float]
    vs_reranker: dict[str, dict[str, Any]] = field(default_factory=dict)  # metric -> ``paired_test``


@dataclass
class Step8Analysis:
    """Every recomputed order of one run, on the same questions; the likelihood fit when asked for."""

    run: Path
    questions: int
    rows: list[OrderRow]
    fit: FusionFit | None = None
    fit_note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "questions": self.questions,
            "orders": {r.name: r.means for r in self.rows},
            **({"fit": self.fit.as_dict()} if self.fit is not None else {}),
        }


def analyse_step8(
    run: Run,
    rrf_ks: Sequence[int] = (60,),
    depths: Sequence[int] = (),
    weights: Sequence[float] = (),
    fit: bool = False,
    bootstrap: int = 1000,
) -> Step8Analysis:
    """hit@1 and MRR of every order ``step8_orders`` gives, over the run's finished questions with step 8,
    each paired against the reranker's order (McNemar / sign-flip, as ``autofocus report``); with ``fit``,
    the likelihood fit of the prior weight with ``bootstrap`` resamples for its interval."""
    ok = [r for r in run.records if r.get("status") == "ok"]
    values: dict[str, dict[str, list[float]]] = {}
    for record in ok:
        found = step8_orders(record, rrf_ks, depths, weights)
        for name, ranked in (found or {}).items():
            m = compute_metrics(np.asarray(ranked), record["gold"], ks=(1,))
            for metric in METRICS:
                values.setdefault(name, {}).setdefault(metric, []).append(float(m[metric]))
    base = values.get(BASELINE, {})
    rows = []
    for name, per_metric in values.items():
        tests = {} if name == BASELINE else {
            m: paired_test(np.asarray(base[m]), np.asarray(per_metric[m])) for m in METRICS
        }  # fmt: skip
        rows.append(OrderRow(name, {m: float(np.mean(v)) for m, v in per_metric.items()}, tests))
    analysis = Step8Analysis(run.path, len(base.get("hit@1", [])), rows)
    if fit:
        cases = [case_from_trace(r["trace"]["data"], r["gold"]) for r in ok]
        if any(c is not None for c in cases):
            analysis.fit = fit_prior_weight(cases, bootstrap=bootstrap)
        else:
            analysis.fit_note = "no pointwise scores to fit"
    return analysis
