"""Pairwise reranking with few sequential rounds: binary insertion sort vs the seeded tournament.

The rerankers run as they do in the program (prompts, parsing, sorting, concurrency), against a
scripted LM that knows a ground-truth order over k candidates and answers a comparison wrongly
with a given probability, like an LLM judge. For each error rate and trial:

- the pre-rerank order is the truth plus Gaussian rank noise (``--prior-sigma``), as after steps 6-7;
- ``const``: every comparison is wrong with probability p;
  ``thurstone``: a comparison of ranks r1, r2 is wrong when N(0, 2 s^2) noise exceeds |r1 - r2|,
  with s set so that the mean error over all pairs is p (close candidates are confused more);
- listwise baseline: one noisy permutation, the truth plus N(0, s^2) rank noise with the same s
  (so its pairs are discordant at the same mean rate p), each id omitted with ``--listwise-missing``.

Reported per method: sequential rounds, LLM calls, latency in call-latencies at concurrency 4
and 16 (a round of m calls takes ceil(m / c)), hit@1 and MRR of the true best, Kendall tau of the
whole order, and the measured comparison error rate. Writes ``benchmarks/results/pairwise.json``.

Usage:
    .venv/bin/python benchmarks/bench_pairwise.py                 # k=20, 200 trials, p = 0.1/0.15/0.2
    .venv/bin/python benchmarks/bench_pairwise.py --trials 50 --errors 0.15 --models const
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import time
from pathlib import Path
from typing import Any

import dspy
import numpy as np
from dspy.lm15 import Message, Response, Usage
from scipy.optimize import brentq
from scipy.special import ndtr
from scipy.stats import kendalltau

from autofocus.config import AutofocusConfig
from autofocus.program.steps.rerank import Reranker
from autofocus.program.steps.rerankers import ListwiseReranker, PairwiseReranker, TournamentReranker
from autofocus.skb.graph import TypedGraph
from autofocus.skb.model import SKB
from autofocus.skb.schema import NodeTypeInfo, Schema
from autofocus.skb.text import TextArray
from autofocus.trace import Trace

RESULTS = Path(__file__).parent / "results" / "pairwise.json"
CONCURRENCY = (4, 16)
_FIRST = re.compile(r"\[\[ ## first ## \]\]\n\[(\d+)\]")
_SECOND = re.compile(r"\[\[ ## second ## \]\]\n\[(\d+)\]")
_BLOCK = re.compile(r"^\[(\d+)\] ", re.MULTILINE)


def candidate_skb(n: int) -> SKB:
    """n candidate nodes of one type, no edges: the rerankers only need ids, types and descriptions."""
    graph = TypedGraph.from_edges(n, np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), [])
    schema = Schema(name="bench", node_types={"item": NodeTypeInfo(count=n)}, edge_types={})
    names = TextArray.from_strings([f"item {i}" for i in range(n)])
    return SKB(schema, ["item"], np.zeros(n, np.int16), names, names, {}, graph)


def describe(skb: SKB, node_id: int, **_: Any) -> str:
    return f"candidate {node_id}"


def thurstone_sigma(k: int, p: float) -> float:
    """Rank-noise scale s whose mean pairwise error over k ranks, mean Phi(-d / (s sqrt 2)), is p."""
    d = np.concatenate([np.full(k - g, g) for g in range(1, k)]).astype(float)
    return float(brentq(lambda s: ndtr(-d / (s * math.sqrt(2))).mean() - p, 1e-3, 1e3))


class JudgeEngine:
    """A DSPy engine that answers PairwiseCompare and ListwiseRank prompts from a hidden true rank.

    Like an LM at temperature 0, it gives the same answer to the same prompt within a trial: its
    randomness is seeded by the trial and the prompt's ids, so thread scheduling cannot change it.
    """

    def __init__(self, model: str, p: float, sigma: float, missing: float, seed: int) -> None:
        self.model, self.p, self.sigma, self.missing, self.seed = model, p, sigma, missing, seed
        self.trial = 0
        self.rank: dict[int, int] = {}

    def _rng(self, *key: object) -> random.Random:
        return random.Random(":".join(map(str, (self.seed, self.trial, *key))))

    def answer(self, text: str) -> str:
        first, second = _FIRST.search(text), _SECOND.search(text)
        if first and second:
            a, b = int(first.group(1)), int(second.group(1))
            rng = self._rng(a, b)
            if self.model == "const":
                wrong = rng.random() < self.p
            else:
                wrong = rng.gauss(0.0, self.sigma * math.sqrt(2)) > abs(self.rank[a] - self.rank[b])
            better, worse = (a, b) if self.rank[a] < self.rank[b] else (b, a)
            return f"[[ ## better_id ## ]]\n{worse if wrong else better}\n\n[[ ## completed ## ]]"
        ids = [int(x) for x in _BLOCK.findall(text)]
        rng = self._rng("listwise")
        noisy = sorted(ids, key=lambda i: self.rank[i] + rng.gauss(0.0, self.sigma))
        kept = [i for i in noisy if rng.random() >= self.missing]
        return f"[[ ## ranking ## ]]\n{kept}\n\n[[ ## completed ## ]]"

    def complete(self, request: Any) -> Response:
        text = self.answer(request.messages[-1].text or "")
        return Response(id=None, model=request.model, message=Message.assistant(text), finish_reason="stop",
                        usage=Usage(input_tokens=1, output_tokens=1))  # fmt: skip

    def close(self) -> None:
        pass


def quality(order: list[int], rank: dict[int, int]) -> dict[str, float]:
    ranks = [rank[i] for i in order]
    pos = ranks.index(0)
    return {
        "hit@1": float(pos == 0),
        "mrr": 1.0 / (pos + 1),
        "tau": float(kendalltau(range(len(ranks)), ranks)[0]),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    k = args.k
    skb = candidate_skb(max(4 * k, 100))
    cfg = AutofocusConfig(k=k, concurrency=args.concurrency, context_budget_tokens=100_000)
    methods: dict[str, Reranker | None] = {
        "pre-rerank": None,
        "listwise": ListwiseReranker(cfg, describe=describe),
        "pairwise (binary insertion)": PairwiseReranker(cfg, describe=describe),
        "tournament": TournamentReranker(cfg, describe=describe),
    }
    if args.round_robin:
        methods["round robin (all pairs)"] = TournamentReranker(
            cfg, describe=describe, seeds=1, anchors=0, group_size=k
        )
    results: dict[str, Any] = {"settings": {**vars(args), "out": str(args.out)}, "runs": []}
    for model in args.models:
        for p in args.errors:
            sigma = thurstone_sigma(k, p)
            engine = JudgeEngine(model, p, sigma, args.listwise_missing, seed=args.seed)
            lm = dspy.LM(f"bench/judge-{model}-{p}", engine=engine, cache=False, num_retries=0)
            rng = random.Random(args.seed)
            acc: dict[str, dict[str, list[float]]] = {m: {} for m in methods}
            seconds = dict.fromkeys(methods, 0.0)
            for trial in range(args.trials):
                engine.trial = trial
                ids = rng.sample(range(skb.num_nodes), k)
                engine.rank = {node: r for r, node in enumerate(ids)}  # ids[0] is the true best
                pre = sorted(ids, key=lambda i: engine.rank[i] + rng.gauss(0.0, args.prior_sigma))
                for name, reranker in methods.items():
                    t0 = time.perf_counter()
                    trace = Trace()
                    if reranker is None:
                        order, sizes = pre, []
                    else:
                        with dspy.context(lm=lm):
                            order = reranker(question="q", candidates=pre, skb=skb, trace=trace)
                        data = trace.data["rerank"]
                        sizes = data.get("round_sizes", [1])
                    seconds[name] += time.perf_counter() - t0
                    row = quality(order, engine.rank)
                    row["rounds"] = len(sizes)
                    row["calls"] = sum(sizes)
                    for c in CONCURRENCY:
                        row[f"latency@c{c}"] = sum(math.ceil(s / c) for s in sizes)
                    comparisons = trace.data.get("rerank", {}).get("comparisons", [])
                    if comparisons:
                        wrong = sum((o > 0) != (engine.rank[a] < engine.rank[b]) for a, b, o in comparisons)
                        row["error rate"] = wrong / len(comparisons)
                    for key, value in row.items():
                        acc[name].setdefault(key, []).append(value)
            for name, cols in acc.items():
                summary = {key: float(np.mean(v)) for key, v in cols.items()}
                summary["rounds max"] = float(max(cols["rounds"]))
                summary["seconds per trial"] = seconds[name] / args.trials
                results["runs"].append({"model": model, "p": p, "sigma": sigma, "method": name, **summary})
    return results


def print_table(results: dict[str, Any]) -> None:
    cols = ["rounds", "rounds max", "calls", "latency@c4", "latency@c16", "hit@1", "mrr", "tau", "error rate"]
    s = results["settings"]
    print(
        f"k={s['k']} trials={s['trials']} prior_sigma={s['prior_sigma']} listwise_missing={s['listwise_missing']}"
    )
    header = f"{'model':<10}{'p':>5}  {'method':<30}" + "".join(f"{c:>12}" for c in cols)
    print(header)
    print("-" * len(header))
    for r in results["runs"]:
        cells = "".join(f"{r[c]:>12.3f}" if c in r else f"{'-':>12}" for c in cols)
        print(f"{r['model']:<10}{r['p']:>5.2f}  {r['method']:<30}{cells}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--errors", type=float, nargs="+", default=[0.1, 0.15, 0.2])
    ap.add_argument("--models", nargs="+", choices=["const", "thurstone"], default=["const", "thurstone"])
    ap.add_argument("--prior-sigma", type=float, default=4.0, help="rank noise of the pre-rerank order")
    ap.add_argument("--listwise-missing", type=float, default=0.05, help="chance that listwise omits an id")
    ap.add_argument("--concurrency", type=int, default=16, help="threads per round (config.runtime.concurrency)")
    ap.add_argument(
        "--round-robin", action="store_true", help="also run all-pairs round robin (k(k-1)/2 calls)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    results = run(args)
    print_table(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
