"""Search latency and memory at MAG scale through ``NodeIndex`` (the code the retriever runs).

Measures, on ``--n`` (default 1.1 M) random unit float16 vectors of dim 384 in one node type:

- step 7 shape: top-20 over the whole type, exact (``flat`` = FAISS fp16 scalar-quantizer scan),
  with 1 and 2 OpenMP threads, with 13 excluded ids, against FAISS ``IndexFlatIP`` on float32;
- steps 4/6 shape: top-20 inside random candidate sets of 1 k .. 300 k nodes, by gather + matmul and
  by the FAISS bitmap selector, to locate the crossover the default rule uses;
- approximate kinds (HNSW, IVF) on ``--ann-n`` clustered vectors (default 100 k: building HNSW on
  1.1 M takes tens of minutes on 2 cores; pass ``--ann-n 1100000`` to pay for it): build time,
  latency and recall@20 against the exact result. Uniform random vectors have no neighbourhood
  structure, the worst case for graph indexes, so the ANN part uses clustered data unless
  ``--ann-data uniform``.

Writes ``benchmarks/results/search.json`` and prints a table.

    .venv/bin/python benchmarks/bench_search.py            # about 5 min on 2 cores
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import faiss
import numpy as np
import psutil
from rich.console import Console
from rich.table import Table

from autofocus.index.search import AnnParams, NodeIndex
from autofocus.index.store import EmbeddingStore

K = 20
RESULTS = Path(__file__).parent / "results" / "search.json"


def rss_gib() -> float:
    return psutil.Process().memory_info().rss / 2**30


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def make_store(path: Path, n: int, dim: int, data: str, seed: int) -> EmbeddingStore:
    """A store of ``n`` unit vectors, written in chunks (uniform random, or 2000 Gaussian clusters)."""
    rng = np.random.default_rng(seed)
    store = EmbeddingStore.create(path, model="bench/random", dim=dim, variant="text", doc_budget_tokens=None,
                                  skb_fingerprint=f"bench-{data}-{n}-{seed}", num_nodes=n)
    centres = rng.standard_normal((2000, dim), dtype=np.float32)
    step = 131072
    for start in range(0, n, step):
        m = min(step, n - start)
        x = rng.standard_normal((m, dim), dtype=np.float32)
        if data == "clustered":
            x = centres[rng.integers(0, len(centres), m)] + 0.9 * x
        store.write_rows(np.arange(start, start + m), unit(x))
    store.finish()
    return EmbeddingStore.open(path)


def make_queries(store: EmbeddingStore, count: int, seed: int) -> np.ndarray:
    """Perturbed stored vectors, so each query has real near neighbours."""
    rng = np.random.default_rng(seed + 1)
    base = np.asarray(store.vectors[np.sort(rng.choice(len(store.vectors), count, replace=False))], np.float32)
    return unit(base + 0.5 * rng.standard_normal(base.shape, dtype=np.float32) / np.sqrt(base.shape[1]))


def latency(fn: Callable[[np.ndarray], object], qs: np.ndarray) -> dict[str, float]:
    fn(qs[0])
    times = []
    for q in qs:
        t = time.perf_counter()
        fn(q)
        times.append(time.perf_counter() - t)
    ms = np.array(times) * 1000
    return {"median_ms": round(float(np.median(ms)), 3), "p95_ms": round(float(np.percentile(ms, 95)), 3)}


def recall(got: list[np.ndarray], truth: list[np.ndarray]) -> float:
    return round(float(np.mean([len(set(g.tolist()) & set(t.tolist())) / len(t) for g, t in zip(got, truth, strict=True)])), 4)


def bench_exact(store: EmbeddingStore, qs: np.ndarray, node_type: np.ndarray) -> dict[str, object]:
    out: dict[str, object] = {}
    n = len(node_type)
    rss0 = rss_gib()
    t = time.perf_counter()
    flat = NodeIndex(store, node_type, ["t"])
    flat.prepare()
    out["flat_fp16_build_s"] = round(time.perf_counter() - t, 2)
    out["flat_fp16_rss_delta_gib"] = round(rss_gib() - rss0, 3)
    out["flat_fp16_file_gib"] = round(sum(p.stat().st_size for p in store.directory.glob("faiss/flat/*.faiss")) / 2**30, 3)
    out["store_file_gib"] = round((store.directory / "embeddings.f16.npy").stat().st_size / 2**30, 3)
    for threads in (1, 2):
        idx = NodeIndex(store, node_type, ["t"], threads=threads)
        out[f"flat_fp16_top20_{threads}thr"] = latency(lambda q, i=idx: i.search(q, node_type="t", k=K), qs)
    rng = np.random.default_rng(5)
    excl = [rng.choice(n, 13, replace=False) for _ in qs]
    it = iter(excl * 2)
    out["flat_fp16_top20_exclude13"] = latency(lambda q: flat.search(q, node_type="t", k=K, exclude=next(it)), qs)

    rss0 = rss_gib()
    f32 = faiss.IndexFlatIP(store.manifest.dim)
    for start in range(0, n, 131072):
        f32.add(np.asarray(store.vectors[start : start + 131072], np.float32))
    out["flatip_fp32_rss_delta_gib"] = round(rss_gib() - rss0, 3)
    faiss.omp_set_num_threads(1)
    out["flatip_fp32_top20_1thr"] = latency(lambda q: f32.search(q[None], K), qs)
    same = [set(flat.search(q, k=K)[0].tolist()) == set(f32.search(q[None], K)[1][0].tolist()) for q in qs]
    out["fp16_same_top20_as_fp32"] = bool(all(same))
    return out


def bench_filtered(store: EmbeddingStore, qs: np.ndarray, node_type: np.ndarray, sizes: list[int]) -> dict[str, object]:
    n = len(node_type)
    gather = NodeIndex(store, node_type, ["t"], gather_max=n)
    bitmap = NodeIndex(store, node_type, ["t"], gather_max=0)
    auto = NodeIndex(store, node_type, ["t"])
    rng = np.random.default_rng(9)
    rows = {}
    for m in [s for s in sizes if s <= n]:
        cand = np.sort(rng.choice(n, m, replace=False))
        g = latency(lambda q, c=cand: gather.search(q, candidates=c, k=K), qs)
        b = latency(lambda q, c=cand: bitmap.search(q, candidates=c, k=K), qs)
        a = latency(lambda q, c=cand: auto.search(q, candidates=c, k=K), qs)
        assert np.array_equal(gather.search(qs[0], candidates=cand, k=K)[0], bitmap.search(qs[0], candidates=cand, k=K)[0])
        rows[str(m)] = {"gather": g, "bitmap": b, "default": a,
                        "default_path": "gather" if m <= auto._gather_limit(n) else "bitmap"}
    mask = rng.random(n) < 0.1
    rows["mask_10pct"] = {"default": latency(lambda q: auto.search(q, candidates=mask, k=K), qs)}
    return rows


def bench_ann(path: Path, n: int, dim: int, data: str, qs_count: int, seed: int) -> dict[str, object]:
    store = make_store(path, n, dim, data, seed + 2)
    qs = make_queries(store, qs_count, seed + 2)
    node_type = np.zeros(n, np.int16)
    exact = NodeIndex(store, node_type, ["t"])
    truth = [exact.search(q, k=K)[0] for q in qs]
    out: dict[str, object] = {"n": n, "data": data}
    params = AnnParams(min_ann_size=1)
    rss0 = rss_gib()
    t = time.perf_counter()
    hnsw = NodeIndex(store, node_type, ["t"], kind="hnsw", params=params)
    hnsw.prepare()
    out["hnsw_m32_efc80_build_s"] = round(time.perf_counter() - t, 1)
    out["hnsw_rss_delta_gib"] = round(rss_gib() - rss0, 3)
    for ef in (64, 128, 256):
        idx = NodeIndex(store, node_type, ["t"], kind="hnsw", params=AnnParams(min_ann_size=1, hnsw_ef_search=ef))
        out[f"hnsw_ef{ef}"] = {**latency(lambda q, i=idx: i.search(q, k=K), qs),
                               "recall@20": recall([idx.search(q, k=K)[0] for q in qs], truth)}
    t = time.perf_counter()
    ivf = NodeIndex(store, node_type, ["t"], kind="ivf", params=params)
    ivf.prepare()
    out["ivf_auto_build_s"] = round(time.perf_counter() - t, 1)
    for nprobe in (16, 64, 256):
        idx = NodeIndex(store, node_type, ["t"], kind="ivf", params=AnnParams(min_ann_size=1, ivf_nprobe=nprobe))
        out[f"ivf_nprobe{nprobe}"] = {**latency(lambda q, i=idx: i.search(q, k=K), qs),
                                      "recall@20": recall([idx.search(q, k=K)[0] for q in qs], truth)}
    out["flat_fp16_top20"] = latency(lambda q: exact.search(q, k=K), qs)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1_100_000, help="vectors for the exact and filtered part (0: skip)")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--ann-n", type=int, default=100_000, help="vectors for the HNSW/IVF part (0: skip)")
    parser.add_argument("--ann-data", choices=["clustered", "uniform"], default="clustered")
    parser.add_argument("--sizes", default="1000,3000,10000,17000,30000,100000,300000")
    parser.add_argument("--workdir", type=Path, default=None, help="where the temporary stores go")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    faiss.omp_set_num_threads(2)
    work = Path(tempfile.mkdtemp(prefix="bench_search-", dir=args.workdir))
    console = Console()
    try:
        result: dict[str, object] = {
            "n": args.n, "dim": args.dim, "k": K, "queries": args.queries,
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "faiss": faiss.__version__,
                        "load_avg_start": os.getloadavg()},
        }
        if args.n:
            t = time.perf_counter()
            store = make_store(work / "uniform", args.n, args.dim, "uniform", args.seed)
            console.print(f"wrote {args.n:,} x {args.dim} float16 in {time.perf_counter() - t:.1f}s")
            qs = make_queries(store, args.queries, args.seed)
            node_type = np.zeros(args.n, np.int16)
            result["exact"] = bench_exact(store, qs, node_type)
            result["filtered"] = bench_filtered(store, qs, node_type, [int(s) for s in args.sizes.split(",")])
            del store
            shutil.rmtree(work / "uniform")
        if args.ann_n:
            result["ann"] = bench_ann(work / "ann", args.ann_n, args.dim, args.ann_data, args.queries, args.seed)
        result["peak_rss_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)  # KiB on Linux
        result["machine"]["load_avg_end"] = os.getloadavg()  # type: ignore[index]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    show(result, console)
    console.print(f"wrote {args.out}")


def show(result: dict, console: Console) -> None:
    table = Table("measurement", "median ms", "p95 ms", "recall@20 / note", title=f"top-{K} search, {result['n']:,} x {result['dim']}")
    ex = result.get("exact", {})
    for key in ("flat_fp16_top20_1thr", "flat_fp16_top20_2thr", "flat_fp16_top20_exclude13", "flatip_fp32_top20_1thr"):
        if key in ex:
            table.add_row(key, str(ex[key]["median_ms"]), str(ex[key]["p95_ms"]), "exact")
    for m, row in result.get("filtered", {}).items():
        for path in ("gather", "bitmap", "default"):
            if path in row:
                note = f"default -> {row.get('default_path', 'mask')}" if path == "default" else "exact"
                table.add_row(f"candidates {m}: {path}", str(row[path]["median_ms"]), str(row[path]["p95_ms"]), note)
    ann = result.get("ann")
    if ann:
        for key, val in ann.items():
            if isinstance(val, dict):
                table.add_row(f"{ann['data']} {ann['n']:,}: {key}", str(val["median_ms"]), str(val["p95_ms"]),
                              str(val.get("recall@20", "exact")))
    console.print(table)
    mem = {k: v for k, v in ex.items() if "gib" in k or k.endswith("_s")}
    if ann:
        mem.update({f"ann_{k}": v for k, v in ann.items() if not isinstance(v, dict) and k not in ("n", "data")})
    console.print(mem)


if __name__ == "__main__":
    main()
