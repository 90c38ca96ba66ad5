"""An exact top-k over int8 codes: is it faster than FAISS's fp16 flat scan at MAG scale?

Step 7's exact scan over 710 k paper vectors reads 545 MB of fp16 per query and is bound by memory
bandwidth (README, "MAG-scale exact search"); FAISS's 8-bit scalar-quantizer scan is not faster,
because it decodes every code to float (``bench_sq_codes.py``). This measures the alternative:

1. int8 codes with one scale per vector (``x ~ scale * code``) and the norm of each vector's rounding
   residual, scored by torch's ``_weight_int8pack_mm`` (a CPU kernel made for int8 weight-only
   matmuls, bf16 activations);
2. a bound on each approximate score: the residual (Cauchy-Schwarz, unit query) plus bf16 rounding
   of the query, the scales and the output (3 * 2**-8);
3. every vector whose upper bound reaches the k-th best lower bound is rescored exactly from fp16 rows,
   so the top k is exact: the script checks it against FAISS for every query.

Vectors are correlated unit vectors around 2,000 random centres (like ``bench_retrieval.py``'s
clustered ones); queries lie near a random vector. One query at a time, 2 threads, medians; each
method answers all queries before the other starts.

    .venv/bin/python benchmarks/bench_int8_scan.py --n 710000 --queries 30
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import faiss
import numpy as np
import torch

RESULTS = Path(__file__).parent / "results" / "int8_scan.json"
BF16_EPS = 2.0**-8


def vectors(n: int, d: int, rng: np.random.Generator) -> np.ndarray:
    centres = rng.standard_normal((2000, d), dtype=np.float32)
    x = centres[rng.integers(0, 2000, n)] + 0.8 * rng.standard_normal((n, d), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype(np.float16)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=710_000)
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    d = 384
    x16 = vectors(args.n, d, rng)
    xf = x16.astype(np.float32)
    scale = np.abs(xf).max(axis=1) / 127
    codes = np.round(xf / scale[:, None]).astype(np.int8)
    residual = np.linalg.norm(xf - codes * scale[:, None], axis=1).astype(np.float32)
    slack = float(residual.max()) + 3 * BF16_EPS  # one bound for all vectors (query, scale and output in bf16)
    codes_t, scale_t = torch.from_numpy(codes), torch.from_numpy(scale).to(torch.bfloat16)
    sq = faiss.IndexScalarQuantizer(d, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT)
    sq.train(xf[:1000])
    sq.add(xf)

    def int8_exact(q: np.ndarray) -> tuple[np.ndarray, int]:
        approx = torch.ops.aten._weight_int8pack_mm(torch.from_numpy(q[None]).to(torch.bfloat16), codes_t, scale_t)[0]
        kth = float(torch.topk(approx, args.k).values[-1])
        cand = torch.nonzero(approx >= kth - 2 * slack).flatten().numpy()
        exact = x16[cand].astype(np.float32) @ q
        order = np.lexsort((cand, -exact))[: args.k]
        return cand[order], len(cand)

    queries = xf[rng.integers(0, args.n, args.queries)] + 0.05 * rng.standard_normal((args.queries, d), dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    for q in queries[:3]:  # warm up
        int8_exact(q)
        sq.search(q[None], args.k)
    t_int8, t_faiss, rescored, found = [], [], [], []
    for q in queries:  # one method after the other: FAISS's OpenMP threads spin after a search and
        t0 = time.perf_counter()  # would take the cores from torch's if the two alternated
        ids, n_cand = int8_exact(q)
        t_int8.append(time.perf_counter() - t0)
        found.append(ids)
        rescored.append(n_cand)
    refs = []
    for q in queries:
        t0 = time.perf_counter()
        refs.append(sq.search(q[None], args.k)[1][0])
        t_faiss.append(time.perf_counter() - t0)
    same = sum(bool(np.allclose(np.sort(xf[ids] @ q), np.sort(xf[ref] @ q), atol=1e-5))
               for q, ids, ref in zip(queries, found, refs, strict=True))  # fmt: skip
    result = {
        "command": f"python benchmarks/bench_int8_scan.py --n {args.n} --queries {args.queries} --k {args.k}",
        "n": args.n, "k": args.k, "threads": args.threads, "load_avg_end": os.getloadavg(),
        "faiss_fp16_ms_median": 1000 * float(np.median(t_faiss)),
        "int8_exact_ms_median": 1000 * float(np.median(t_int8)),
        "rescored_median": int(np.median(rescored)), "rescored_max": int(np.max(rescored)),
        "same_top_k_scores": f"{same}/{len(queries)}", "slack": slack,
        "bytes_scanned": {"fp16": int(x16.nbytes), "int8": int(codes.nbytes)},
    }  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
