"""Step 8 with and without fusion, recomputed from a run's recorded scores (no LM call).

A run of ``afr`` (or any system with a reranker) records step 8's input order and the reranker's
output in each trace line. ``rerank_fusion=rrf`` is a deterministic function of those two orders, so
its metrics on the same questions follow exactly, paired, from the trace: the pre-rerank order
(steps 1-7), the reranker's order, the fused order for each ``k``, (pointwise runs) the
``rerank_fusion=prior`` order for each weight, (runs with ``merge_rule``
evidence) the reranker's order with the grounded block kept first where steps 6-7 kept it, and (a
pointwise run over all k) the order with only the first ``d`` candidates reranked
(``rerank_depth``): pointwise scores are per candidate, so that order follows exactly from them.
``--fit`` also prints the prior weight fitted by likelihood on the run's own questions
(``autofocus.optimize.fusion_fit``; on a labelled split that is tuning on it, so only a diagnostic).

    .venv/bin/python benchmarks/rerank_fusion.py runs/afr18b [runs/vssrr ...] --k 60 --depths 5 10 15 \
        --weights 0.25 0.5 1
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from autofocus.evaluation.report import load_run, paired_test
from autofocus.metrics import compute_metrics
from autofocus.optimize.fusion_fit import case_from_trace, fit_prior_weight
from autofocus.program.steps.rerank import prior_fuse, rrf_fuse
from autofocus.program.steps.vss import grounded_first


def orders(
    record: dict, ks: list[int], depths: Sequence[int] = (), weights: Sequence[float] = ()
) -> dict[str, list[int]] | None:
    """The orders of one question's top k (steps 1-7, reranker, fused for each k), or None where step 8
    did not run."""
    data = record["trace"]["data"].get("rerank")
    if not data or "input" not in data:
        return None
    ids = [int(i) for i in data["input"]]
    reranked = [int(i) for i in data.get("reranker_output", data["output"])]
    position = {node: i for i, node in enumerate(ids)}
    out = {"steps 1-7": ids, "reranker": reranked}
    trace_data = record["trace"]["data"]
    kept = (trace_data.get("merge") or {}).get("order") == "block"  # steps 6-7 kept the block for strong evidence
    strand = {int(n): s for n, s in trace_data.get("strand", {}).items()}
    out["reranker, block kept"] = grounded_first(reranked, strand) if kept else reranked
    for k in ks:
        out[f"rrf k={k}"] = [ids[i] for i in rrf_fuse([position[n] for n in reranked], k)]
    scores = data.get("scores") if data.get("method") == "pointwise" else None
    if scores is not None:  # the scores are those of the first len(scores) inputs (rerank_depth)
        head, by_reranker = ids[: len(scores)], [position[n] for n in reranked[: len(scores)]]
        for w in weights:
            out[f"prior w={w:g}"] = [head[i] for i in prior_fuse(by_reranker, scores, w)] + ids[len(scores) :]
    scores = scores if "depth" not in data else None
    for d in depths if scores is not None and len(scores) == len(ids) else []:
        out[f"reranker, depth {d}"] = [ids[i] for i in sorted(range(min(d, len(ids))), key=lambda i: (-scores[i], i))] + ids[d:]
    return out


def main(args: argparse.Namespace) -> None:
    for run_dir in args.runs:
        run = load_run(run_dir)
        rows: dict[str, dict[str, list[float]]] = {}
        for record in run.records:
            found = orders(record, args.k, args.depths, args.weights) if record.get("status") == "ok" else None
            if found is None:
                continue
            for name, ranked in found.items():
                m = compute_metrics(np.asarray(ranked), record["gold"], ks=(1, 20))
                for metric in ("hit@1", "mrr"):
                    rows.setdefault(name, {}).setdefault(metric, []).append(float(m[metric]))
        n = len(rows.get("reranker", {}).get("hit@1", []))
        if args.fit:
            cases = [case_from_trace(r["trace"]["data"], r["gold"]) for r in run.records if r.get("status") == "ok"]
            print(f"\n{run_dir}: " + (fit_prior_weight(cases).line() if any(cases) else "no pointwise scores to fit"))
        print(f"\n{run_dir}: {n} questions with step 8 (same questions in every row; paired against the reranker)")
        print("| order | hit@1 | MRR | hit@1 vs reranker (p) | MRR vs reranker (p) |\n| --- | --- | --- | --- | --- |")
        base = rows.get("reranker")
        result = {}
        for name, metrics in rows.items():
            cells = [name, *(f"{100 * np.mean(metrics[m]):.1f}" for m in ("hit@1", "mrr"))]
            for metric in ("hit@1", "mrr"):
                t = paired_test(np.asarray(base[metric]), np.asarray(metrics[metric]))
                cells.append("" if name == "reranker" else f"{100 * t['diff']:+.1f} ({t['p']:.3f})")
            print("| " + " | ".join(cells) + " |")
            result[name] = {m: float(np.mean(v)) for m, v in metrics.items()}
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            existing = json.loads(args.out.read_text()) if args.out.exists() else {}
            existing[str(run_dir)] = {"questions": n, "orders": result}
            args.out.write_text(json.dumps(existing, indent=1))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--k", type=int, nargs="+", default=[60])
    parser.add_argument("--depths", type=int, nargs="*", default=[], help="rerank_depth values to recompute (pointwise runs)")
    parser.add_argument("--weights", type=float, nargs="*", default=[], help="rerank_prior_weight values (pointwise runs)")
    parser.add_argument("--fit", action="store_true", help="also fit the prior weight by likelihood on the run")
    parser.add_argument("--out", type=Path, default=None, help="append the means to this JSON file")
    main(parser.parse_args())
