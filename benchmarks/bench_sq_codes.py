"""Does a smaller code make step 7's exact whole-type scan faster? FAISS scalar-quantizer scans per code.

Step 7 at MAG scale is one top-k scan over ~710 k paper vectors (README: 48-52 ms inside the
retrieval runs, over the 50 ms target). If the scan were bound by memory traffic, int8 (half the
bytes of fp16) or 4-bit codes with an error bound and an exact re-score of the few candidates the
bound cannot exclude would make an exact step 7 faster. This measures the scan alone per code, on
correlated unit vectors (a low-rank part plus noise, like sentence embeddings), 1 and 2 threads,
median over ``--queries`` single-query searches for the top ``--k``.

    .venv/bin/python benchmarks/bench_sq_codes.py      # about 2 min on 2 cores

Writes ``benchmarks/results/sq_codes.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import faiss
import numpy as np

CODES = {"fp16": "QT_fp16", "int8": "QT_8bit", "int8 uniform": "QT_8bit_uniform", "6-bit": "QT_6bit",
         "4-bit": "QT_4bit"}  # fmt: skip


def vectors(n: int, d: int, queries: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    basis = rng.standard_normal((64, d)).astype("float32")
    x = rng.standard_normal((n, 64)).astype("float32") @ basis + 0.5 * rng.standard_normal((n, d)).astype("float32")
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = x[rng.integers(0, n, queries)] + 0.3 * rng.standard_normal((queries, d)).astype("float32")
    return x, q / np.linalg.norm(q, axis=1, keepdims=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=710_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "sq_codes.json")
    args = ap.parse_args()
    x, q = vectors(args.n, args.dim, args.queries)
    rows = []
    for name, qt in CODES.items():
        index = faiss.IndexScalarQuantizer(args.dim, getattr(faiss.ScalarQuantizer, qt), faiss.METRIC_INNER_PRODUCT)
        index.train(x)
        index.add(x)
        for threads in (1, 2):
            faiss.omp_set_num_threads(threads)
            times = []
            for i in range(args.queries):
                t = time.perf_counter()
                index.search(q[i : i + 1], args.k)
                times.append(time.perf_counter() - t)
            rows.append({"code": name, "bytes_per_vector": index.sa_code_size(), "threads": threads,
                         "median_ms": 1000 * float(np.median(times))})  # fmt: skip
            print(f"{name:>13}  {index.sa_code_size():>4} B  {threads} thread(s)  {rows[-1]['median_ms']:.1f} ms")
    args.out.write_text(json.dumps({"n": args.n, "dim": args.dim, "k": args.k, "queries": args.queries,
                                    "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                                "faiss": faiss.__version__, "load": os.getloadavg()},
                                    "rows": rows}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
