"""SKB scale benchmark: cache build, cache load, resident memory, batched neighbour expansion.

Targets on a MAG-sized synthetic SKB (1.9 M nodes, 40 M edges, 384-d float16
embeddings), 2 CPU cores: load <= 30 s, resident memory <= 8 GB, expanding 10,000 nodes through
one edge type and direction <= 20 ms (median). Each phase runs in its own process, so memory
numbers are not inflated by the previous phase. With ``--dir-nodes`` it also times the
SKB-directory-format path: first ``autofocus skb build`` (parse + progress bar + cache write)
and the second one (cache hit).

    .venv/bin/python benchmarks/bench_skb_scale.py --scale 1.0            # full size (~10 min)
    .venv/bin/python benchmarks/bench_skb_scale.py --scale 0.01 --out /tmp/quick.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).parent))

import synthetic_skb

from autofocus import paths

RESULTS = Path(__file__).parent / "results" / "skb_scale.json"
TARGETS = {"load_s": 30.0, "rss_gb": 8.0, "expand_10k_ms": 20.0}


def _rss_mb() -> float:
    return psutil.Process().memory_info().rss / 2**20


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def phase_build(workdir: Path, scale: float, seed: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    arrays = synthetic_skb.generate(scale, seed)
    t1 = time.perf_counter()
    skb = synthetic_skb.build_skb(arrays)
    t2 = time.perf_counter()
    del arrays
    from autofocus.skb.cache import write_cache

    write_cache(skb, workdir, source="synthetic")
    t3 = time.perf_counter()
    synthetic_skb.write_embeddings(workdir / "embeddings.f16.npy", skb.num_nodes, seed=seed)
    t4 = time.perf_counter()
    size = sum(p.stat().st_size for p in workdir.rglob("*.npy") if p.name != "embeddings.f16.npy")
    return {
        "nodes": skb.num_nodes,
        "edges": skb.num_edges,
        "edges_per_type": {e: skb.graph.num_edges(e) for e in skb.graph.edge_types},
        "generate_s": t1 - t0,
        "build_skb_s": t2 - t1,
        "write_cache_s": t3 - t2,
        "cache_build_s": t3 - t1,
        "cache_size_mb": size / 2**20,
        "write_embeddings_s": t4 - t3,
        "build_peak_rss_mb": _peak_mb(),
    }


def _time(fn: Any, repeats: int, make_rows: Any) -> tuple[list[float], list[int]]:
    times, sizes = [], []
    for _ in range(repeats):
        rows = make_rows()
        t0 = time.perf_counter()
        out = fn(rows)
        times.append(time.perf_counter() - t0)
        sizes.append(int(out.sum()) if out.dtype == bool else len(out))
    return times, sizes


def _expansion(skb: Any, sizes: list[int], repeats: int, seed: int) -> list[dict[str, Any]]:
    """Per edge type and direction: ``neighbour_mask`` (gather + scatter into a boolean mask of
    length N, what grounding does) and ``neighbours`` (gather + sorted unique ids)."""
    rng = np.random.default_rng(seed)
    g = skb.graph
    cases = []
    for edge_type in g.edge_types:
        info = skb.schema.edge_types[edge_type]
        for direction in ("out", "in"):
            pool = skb.ids_of_type(info.src_type if direction == "out" else info.dst_type)
            cases.append((edge_type, [edge_type], direction, pool))
    cases.append(("(all edge types)", None, "both", skb.ids_of_type(skb.schema.answer_types[0])))
    rows_out: list[dict[str, Any]] = []
    for label, types, direction, pool in cases:
        for size in sizes:

            def make_rows(pool: np.ndarray = pool, size: int = size) -> np.ndarray:
                return np.unique(pool[rng.integers(0, len(pool), size)])

            mask_t, found = _time(
                lambda rows, t=types, d=direction: g.neighbour_mask(rows, t, d), repeats, make_rows
            )
            uniq_t, _ = _time(lambda rows, t=types, d=direction: g.neighbours(rows, t, d), repeats, make_rows)
            rows_out.append(
                {
                    "edge_type": label,
                    "direction": direction,
                    "nodes": size,
                    "mask_median_ms": float(np.median(mask_t) * 1e3),
                    "mask_p95_ms": float(np.percentile(mask_t, 95) * 1e3),
                    "unique_median_ms": float(np.median(uniq_t) * 1e3),
                    "unique_p95_ms": float(np.percentile(uniq_t, 95) * 1e3),
                    "mean_neighbours": float(np.mean(found)),
                }
            )
    return rows_out


def phase_load(workdir: Path, repeats: int, seed: int) -> dict[str, Any]:
    from autofocus.skb.cache import read_cache

    rss0 = _rss_mb()
    t0 = time.perf_counter()
    skb = read_cache(workdir)
    emb = np.load(workdir / "embeddings.f16.npy", mmap_mode="r")
    load_s = time.perf_counter() - t0
    rss_load = _rss_mb()
    t0 = time.perf_counter()
    _ = skb.candidate_ids, [skb.ids_of_type(t) for t in skb.node_type_names]
    type_index_s = time.perf_counter() - t0
    expansion = _expansion(skb, [100, 10_000], repeats, seed)
    rss_expand = _rss_mb()
    t0 = time.perf_counter()
    checksum = 0.0
    for start in range(0, len(emb), 262144):  # touch every embedding page, the worst case for RSS
        checksum += float(emb[start : start + 262144, 0].astype(np.float32).sum())
    touch_s = time.perf_counter() - t0
    rss_all = _rss_mb()
    return {
        "load_s": load_s,
        "type_index_s": type_index_s,
        "rss_before_load_mb": rss0,
        "rss_after_load_mb": rss_load,
        "rss_after_expansion_mb": rss_expand,
        "rss_after_touching_embeddings_mb": rss_all,
        "touch_embeddings_s": touch_s,
        "load_peak_rss_mb": _peak_mb(),
        "embeddings_shape": list(emb.shape),
        "expansion": expansion,
    }


def phase_dir_check(nodes: int, seed: int) -> dict[str, Any]:
    """Write a ``nodes``-node SKB in the directory format, then ``autofocus skb build`` it twice."""
    tmp = Path(tempfile.mkdtemp(prefix="skb-dir-check-"))
    try:
        arrays = synthetic_skb.generate(nodes / synthetic_skb.FULL_NODES, seed)
        t0 = time.perf_counter()
        synthetic_skb.write_dir_format(tmp / "skb", arrays)
        write_s = time.perf_counter() - t0
        env = {**os.environ, "AUTOFOCUS_HOME": str(tmp / "home"), "COLUMNS": "120"}
        cli = [sys.executable, "-c", "from autofocus.cli import app; app()"]  # the `autofocus` command
        runs = []
        for _ in range(2):
            t0 = time.perf_counter()
            proc = subprocess.run(
                [*cli, "skb", "build", str(tmp / "skb")], env=env, capture_output=True, text=True, check=True
            )
            runs.append(
                {
                    "wall_s": time.perf_counter() - t0,
                    "output": proc.stdout.strip().splitlines() + proc.stderr.strip().splitlines(),
                }
            )
        size = sum(p.stat().st_size for p in (tmp / "skb").iterdir() if p.is_file())
        return {
            "nodes": len(arrays.node_type),
            "edges_in_file": len(arrays.src),
            "dir_size_mb": size / 2**20,
            "write_dir_s": write_s,
            "first_build": runs[0],
            "second_build": runs[1],
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run_phase(args: list[str]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"phase {args[:2]} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _print_table(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    b, ld = result["build"], result["load"]
    summary = Table(
        title=f"SKB scale benchmark: {b['nodes']:,} nodes, {b['edges']:,} edges (scale {result['scale']})"
    )
    summary.add_column("measure")
    summary.add_column("value", justify="right")
    summary.add_column("target", justify="right")
    rows = [
        ("generate arrays", f"{b['generate_s']:.1f} s", ""),
        ("build SKB (CSR etc.)", f"{b['build_skb_s']:.1f} s", ""),
        ("write cache", f"{b['write_cache_s']:.1f} s", ""),
        ("cache build (build + write)", f"{b['cache_build_s']:.1f} s", ""),
        ("cache size (without embeddings)", f"{b['cache_size_mb']:,.0f} MB", ""),
        ("build peak RSS", f"{b['build_peak_rss_mb']:,.0f} MB", ""),
        ("cache load (mmap, with embeddings)", f"{ld['load_s']:.3f} s", f"<= {TARGETS['load_s']:.0f} s"),
        ("type index (ids_of_type, candidates)", f"{ld['type_index_s']:.3f} s", ""),
        ("RSS after load", f"{ld['rss_after_load_mb']:,.0f} MB", f"<= {TARGETS['rss_gb']:.0f} GB"),
        ("RSS after expansions", f"{ld['rss_after_expansion_mb']:,.0f} MB", f"<= {TARGETS['rss_gb']:.0f} GB"),
        ("RSS with all embeddings touched", f"{ld['rss_after_touching_embeddings_mb']:,.0f} MB", f"<= {TARGETS['rss_gb']:.0f} GB"),
    ]  # fmt: skip
    for row in rows:
        summary.add_row(*row)
    console.print(summary)
    exp = Table(
        title="Batched neighbour expansion: median (p95) ms over random node sets of the edge's end type"
    )
    for col in ("edge type", "dir", "nodes", "mask (grounding)", "sorted unique", "neighbours"):
        exp.add_column(col, justify="right" if col not in ("edge type", "dir") else "left")
    for r in ld["expansion"]:
        exp.add_row(
            r["edge_type"], r["direction"], f"{r['nodes']:,}",
            f"{r['mask_median_ms']:.2f} ({r['mask_p95_ms']:.2f})", f"{r['unique_median_ms']:.2f} ({r['unique_p95_ms']:.2f})",
            f"{r['mean_neighbours']:,.0f}",
        )  # fmt: skip
    console.print(exp)
    if "dir_check" in result:
        d = result["dir_check"]
        console.print(
            f"Directory format, {d['nodes']:,} nodes / {d['edges_in_file']:,} edge rows ({d['dir_size_mb']:.0f} MB): "
            f"first `skb build` {d['first_build']['wall_s']:.1f} s, second {d['second_build']['wall_s']:.1f} s (wall, incl. start-up)"
        )
        for run in ("first_build", "second_build"):
            console.print(f"  {run}: " + " ".join(d[run]["output"]))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--workdir", type=Path, default=None, help="where the synthetic cache goes")
    parser.add_argument("--keep", action="store_true", help="keep the synthetic SKB after the run")
    parser.add_argument(
        "--dir-nodes", type=int, default=0, help="also time a directory-format SKB of this many nodes"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--phase", choices=["build", "load", "dir"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    workdir = args.workdir or paths.sub("bench") / f"synthetic-mag-{args.scale:g}"
    if args.phase == "build":
        print(json.dumps(phase_build(workdir, args.scale, args.seed)))
        return
    if args.phase == "load":
        print(json.dumps(phase_load(workdir, args.repeats, args.seed)))
        return
    if args.phase == "dir":
        print(json.dumps(phase_dir_check(args.dir_nodes, args.seed)))
        return
    common = [
        "--scale",
        str(args.scale),
        "--seed",
        str(args.seed),
        "--workdir",
        str(workdir),
        "--repeats",
        str(args.repeats),
    ]
    result: dict[str, Any] = {
        "scale": args.scale,
        "machine": {"cpus": os.cpu_count(), "ram_gb": psutil.virtual_memory().total / 2**30, "python": platform.python_version(),
                    "numpy": np.__version__, "platform": platform.platform()},
        "targets": TARGETS,
    }  # fmt: skip
    result["build"] = _run_phase(["--phase", "build", *common])
    result["load"] = _run_phase(["--phase", "load", *common])
    if args.dir_nodes:
        result["dir_check"] = _run_phase(["--phase", "dir", "--dir-nodes", str(args.dir_nodes), *common])
    per_type = [r for r in result["load"]["expansion"] if r["nodes"] == 10_000 and r["direction"] != "both"]
    worst_mask = max(r["mask_median_ms"] for r in per_type)
    result["verdict"] = {
        "load_ok": result["load"]["load_s"] <= TARGETS["load_s"],
        "rss_ok": result["load"]["rss_after_touching_embeddings_mb"] <= TARGETS["rss_gb"] * 1024,
        "expand_10k_worst_mask_median_ms": worst_mask,
        "expand_10k_worst_unique_median_ms": max(r["unique_median_ms"] for r in per_type),
        "expand_ok": worst_mask <= TARGETS["expand_10k_ms"],
    }
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    _print_table(result)
    print(f"results written to {args.out}")


if __name__ == "__main__":
    main()
