"""Steps 3-7 of AF-Retriever end to end on the MAG-sized synthetic SKB, per step, with memory.

The SKB (1.9 M nodes, 40 M typed edges, ``benchmarks/synthetic_skb.py``) gets two 384-d float16
embedding stores, ``text`` (steps 4 and 6) and ``text+rel`` (step 7), as the default config uses,
registered for the real query embedder (MiniLM, offline), so the run goes through the same
``KnowledgeBase`` / ``NodeIndex`` objects as ``autofocus ask``. Node vectors are random unit
vectors: search cost does not depend on what the vectors mean, and grounding (exact name hits
first, then graph filters) does not use them.

Queries are Cypher strings in the shapes of the paper's MAG examples (Table 24, the golden cases in
``tests/golden``): 1-3 triplets, 1-2 constants (names, titles, ``CONTAINS``), ``year`` filters,
built around a sampled answer paper so that grounding has real work. Each goes through step 3
(``parse_cypher``), step 4 (symbol candidates, ``l_max`` = 100, embedding included), step 5
(grounding with expansion), step 6, step 7 and the merge, exactly as ``AutofocusRetriever`` runs them.

Run in two child processes: ``prepare`` (build the SKB cache and stores once, kept under
``~/.cache/autofocus/bench``) and ``run`` (a fresh process: open, warm up, answer the queries, report
resident memory). Prints a table and writes ``benchmarks/results/retrieval.json``.

    .venv/bin/python benchmarks/bench_retrieval.py                      # full scale, 300 queries
    .venv/bin/python benchmarks/bench_retrieval.py --scale 0.01 --queries 50 --out /tmp/r.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).parent))

import synthetic_skb

from autofocus import paths

RESULTS = Path(__file__).parent / "results" / "retrieval.json"
EMBEDDER = "local:all-MiniLM-L6-v2"
TARGET_MS = {"median": 50.0, "p95": 300.0}
# Table 8, MAG validation set, seconds (median, mean, max); step 5 with l_max = 100
PAPER_MAG_S = {
    "4_symbols": (2.44, 3.26, 17.36),
    "5_grounding": (0.10, 0.23, 7.75),
    "6_vss_grounded": (4.61, 4.01, 5.10),
    "7_vss_rest": (2.62, 2.70, 3.13),
}
STEPS = ("3_parse", "embed_question", "4_symbols", "5_grounding", "6_vss_grounded", "7_vss_rest", "merge")
VARIANT_SEEDS = {"text": 1, "text+rel": 2}


# --- preparing the SKB and its embedding stores ------------------------------------------------------
def _ready_file(workdir: Path) -> Path:
    return workdir / "READY.json"


def phase_prepare(workdir: Path, scale: float, seed: int) -> dict[str, Any]:
    """Write the SKB cache and both embedding stores once; a ``READY.json`` marks a finished build."""
    ready = _ready_file(workdir)
    wanted = {"scale": scale, "seed": seed, "embedder": EMBEDDER, "variants": sorted(VARIANT_SEEDS)}
    if ready.is_file() and json.loads(ready.read_text()).get("spec") == wanted:
        return {"reused": True, **json.loads(ready.read_text())}
    import shutil

    from autofocus.index.embedders import get_embedder
    from autofocus.index.store import DONE, MANIFEST, VECTORS, Manifest, now, sha256_file, store_dir
    from autofocus.skb.cache import write_cache

    shutil.rmtree(workdir, ignore_errors=True)
    t0 = time.perf_counter()
    arrays = synthetic_skb.generate(scale, seed)
    skb = synthetic_skb.build_skb(arrays)
    n = skb.num_nodes
    del arrays
    write_cache(skb, workdir / "skb", source="synthetic")
    t_skb = time.perf_counter() - t0
    name = get_embedder(EMBEDDER).name
    t0 = time.perf_counter()
    for variant, vseed in VARIANT_SEEDS.items():
        directory = store_dir(workdir / "index", name, variant)
        directory.mkdir(parents=True)
        synthetic_skb.write_embeddings(directory / VECTORS, n, seed=seed * 10 + vseed)
        np.save(directory / DONE, np.ones(n, dtype=bool))
        manifest = Manifest(
            model=name, dim=384, variant=variant, doc_budget_tokens=384, skb_fingerprint=skb.fingerprint,
            num_nodes=n, rows_done=n, sha256=sha256_file(directory / VECTORS), source="synthetic", updated=now(),
        )
        (directory / MANIFEST).write_text(manifest.model_dump_json(indent=2))
    info = {"spec": wanted, "nodes": n, "edges": skb.num_edges, "skb_build_s": t_skb,
            "stores_build_s": time.perf_counter() - t0}  # fmt: skip
    ready.write_text(json.dumps(info, indent=2))
    return {"reused": False, **info}


# --- queries --------------------------------------------------------------------------------------
def _one_of(rng: np.random.Generator, csr: Any, node: int) -> int | None:
    lo, hi = int(csr.indptr[node]), int(csr.indptr[node + 1])
    return None if hi == lo else int(csr.indices[rng.integers(lo, hi)])


def _word(rng: np.random.Generator, title: str) -> str:
    words = [w for w in title.replace(" of ", " ").split() if len(w) > 3]
    return words[rng.integers(len(words))] if words else title.split()[0]


SHAPES = (
    "author_papers", "author_papers_year", "coauthor_title_contains", "institution_year", "cites_title_since",
    "field_after", "author_field", "author_cited_field", "institution_cites", "name_contains_title_contains",
)  # fmt: skip


def make_queries(skb: Any, count: int, seed: int) -> list[dict[str, Any]]:
    """``count`` Cypher queries cycling through ``SHAPES``, each built around a random answer paper."""
    rng = np.random.default_rng(seed)
    g = skb.graph
    writes_in = g.adjacency("author___writes___paper", "in")
    writes_out = g.adjacency("author___writes___paper", "out")
    cites = g.adjacency("paper___cites___paper", "out")
    topic = g.adjacency("paper___has_topic___field_of_study", "out")
    affil = g.adjacency("author___affiliated_with___institution", "out")
    papers = skb.ids_of_type("paper")
    year = skb.columns["year"].values
    queries: list[dict[str, Any]] = []
    while len(queries) < count:
        shape = SHAPES[len(queries) % len(SHAPES)]
        y = int(papers[rng.integers(len(papers))])
        a, q, f = _one_of(rng, writes_in, y), _one_of(rng, cites, y), _one_of(rng, topic, y)
        i = None if a is None else _one_of(rng, affil, a)
        p = None if a is None else _one_of(rng, writes_out, a)
        needs = {
            "author_papers": (a,), "author_papers_year": (a,), "coauthor_title_contains": (a, p),
            "institution_year": (a, i), "cites_title_since": (q,), "field_after": (f,), "author_field": (a, f),
            "author_cited_field": (a, q, f), "institution_cites": (a, i, q), "name_contains_title_contains": (a,),
        }[shape]  # fmt: skip
        if any(x is None for x in needs) or (shape == "coauthor_title_contains" and p == y):
            continue
        yr = int(year[y])
        ends = {"a": a, "q": q, "f": f, "i": i, "p": p, "y": y}
        nm = defaultdict(str, {k: skb.name(v) for k, v in ends.items() if v is not None})  # all templates format
        w = _word(rng, nm["y"])
        cypher, question = {
            "author_papers": (
                f'MATCH (a:author {{name: "{nm["a"]}"}})-[:author_writes_paper]->(y:paper) RETURN y.title',
                f"Which papers did {nm['a']} write?"),
            "author_papers_year": (
                f'MATCH (a:author)-[:author_writes_paper]->(y:paper) WHERE a.name = "{nm["a"]}" AND y.year = {yr} '
                "RETURN y.title",
                f"Papers by {nm['a']} from {yr}"),
            "coauthor_title_contains": (
                f'MATCH (p:paper title: "{nm["p"]}")<-[:author_writes_paper]-(a:author)-[:author_writes_paper]->'
                f'(y:paper) WHERE y.title CONTAINS "{w}" RETURN y.title',
                f"Find publications by coauthors of \"{nm['p']}\" on {w}"),
            "institution_year": (
                f'MATCH (i:institution name: "{nm["i"]}")<-[:author_affiliated_with_institution]-(a:author)'
                f"-[:author_writes_paper]->(y:paper) WHERE y.year = {yr} RETURN y.title",
                f"Research papers from {nm['i']} published in {yr}"),
            "cites_title_since": (
                f'MATCH (y:paper)-[:paper_cites_paper]->(q:paper {{title: "{nm["q"]}"}}) WHERE y.year >= {yr - 2} '
                "RETURN y.title",
                f"Papers since {yr - 2} that cite \"{nm['q']}\""),
            "field_after": (
                f'MATCH (y:paper)-[:paper_has_topic_field_of_study]->(f:field_of_study {{name: "{nm["f"]}"}}) '
                f"WHERE y.year > {yr - 1} RETURN y.title",
                f"Papers on {nm['f']} after {yr - 1}"),
            "author_field": (
                f'MATCH (a:author {{name: "{nm["a"]}"}})-[:author_writes_paper]->(y:paper)'
                f'-[:paper_has_topic_field_of_study]->(f:field_of_study {{name: "{nm["f"]}"}}) RETURN y.title',
                f"Papers by {nm['a']} about {nm['f']}"),
            "author_cited_field": (
                f'MATCH (a:author {{name: "{nm["a"]}"}})-[:author_writes_paper]->(y:paper)'
                f'-[:paper_cites_paper]->(q:paper {{title: "{nm["q"]}"}}), '
                f'(y)-[:paper_has_topic_field_of_study]->(f:field_of_study) RETURN y.title',
                f"Which paper by {nm['a']} cites \"{nm['q']}\"?"),
            "institution_cites": (
                f'MATCH (i:institution {{name: "{nm["i"]}"}})<-[:author_affiliated_with_institution]-(a:author)'
                f'-[:author_writes_paper]->(y:paper)-[:paper_cites_paper]->(q:paper {{title: "{nm["q"]}"}}) '
                "RETURN y.title",
                f"Papers from {nm['i']} citing \"{nm['q']}\""),
            "name_contains_title_contains": (
                f'MATCH (y:paper)<-[:author_writes_paper]-(a:author) WHERE a.name CONTAINS "{nm["a"].split()[-1]}" '
                f'AND y.title CONTAINS "{w}" RETURN y.title',
                f"Papers by someone called {nm['a'].split()[-1]} about {w}"),
        }[shape]  # fmt: skip
        queries.append({"shape": shape, "cypher": cypher, "question": question, "answer": y})
    return queries


# --- running steps 3-7 ----------------------------------------------------------------------------
class TimedKB:
    """The knowledge base with the time spent embedding queries counted (step 4 embeds its constants)."""

    def __init__(self, kb: Any) -> None:
        self.kb = kb
        self.skb = kb.skb
        self.embed_s = 0.0

    def index(self, variant: str = "text") -> Any:
        return self.kb.index(variant)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_queries([text])[0]

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        t0 = time.perf_counter()
        try:
            return self.kb.embed_queries(texts)
        finally:
            self.embed_s += time.perf_counter() - t0


def retrieve(kb: TimedKB, cfg: Any, cypher: str, question: str, target_type: str) -> tuple[dict[str, float], dict]:
    """Steps 3-7 and the merge as ``AutofocusRetriever.forward`` runs them; returns per-step seconds and stats."""
    from autofocus.cypher import parse_cypher
    from autofocus.program.grounding import ground_with_expansion
    from autofocus.program.symbols import retrieve_symbol_candidates
    from autofocus.program.vss import grounded_slots, merge, step6_rank_grounded, step7_rank_rest

    skb = kb.skb
    times: dict[str, float] = {}

    def timed(name: str, fn: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        out = fn()
        times[name] = time.perf_counter() - t0
        return out

    qg = timed("3_parse", lambda: parse_cypher(cypher, skb.schema, mode=cfg.type_mode, target_type=target_type))
    qvec = timed("embed_question", lambda: kb.embed_query(question))
    grounded, round_of, stats = np.zeros(0, np.int64), {}, {"usable": qg.usable, "triplets": len(qg.triplets)}
    if qg.usable:
        kb.embed_s = 0.0
        sc = timed("4_symbols", lambda: retrieve_symbol_candidates(
            kb, qg, cfg.l_max, variant=cfg.doc_variant_step4, strict=cfg.type_mode == "strict",
            exact_name_first=cfg.exact_name_first))  # fmt: skip
        times["4_embed"] = kb.embed_s
        res = timed("5_grounding", lambda: ground_with_expansion(
            skb, qg, sc.constants, sc.variables, sc.type_masks, cfg.k, cfg.l_max, cfg.expansion))  # fmt: skip
        grounded, round_of = res.answers, res.round_of
        stats.update(constants=len(sc.constants), rounds=len(res.rounds), events=len(sc.events))
    n6 = grounded_slots(cfg.alpha, cfg.k)
    step6, _ = timed("6_vss_grounded", lambda: step6_rank_grounded(
        kb, qvec, grounded, n6, cfg.doc_variant_step6, round_of if cfg.step6_order == "round" else None))  # fmt: skip
    exclude = grounded if cfg.step7_exclude == "grounded" else np.zeros(0, np.int64)
    n7 = cfg.k - len(step6) if cfg.step7_exclude == "grounded" else cfg.k
    step7, _ = timed("7_vss_rest", lambda: step7_rank_rest(kb, qvec, [target_type], exclude, n7, cfg.doc_variant_step7))
    merged = timed("merge", lambda: merge(step6, step7, cfg.k))
    stats.update(grounded=len(grounded), returned=len(merged.ids))
    return times, stats


def _memory() -> dict[str, float]:
    """Resident memory now: total, anonymous (private heap) and file-backed (mmapped SKB and vectors)."""
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    kib = {k: float(status[k].split()[0]) for k in ("VmRSS", "RssAnon", "RssFile", "VmHWM") if k in status}
    full = psutil.Process().memory_full_info()
    return {"rss_mb": kib.get("VmRSS", 0) / 1024, "anon_mb": kib.get("RssAnon", 0) / 1024,
            "file_mb": kib.get("RssFile", 0) / 1024, "uss_mb": full.uss / 2**20, "peak_rss_mb": kib.get("VmHWM", 0) / 1024}  # fmt: skip


def _summary(values: list[float]) -> dict[str, float]:
    ms = np.asarray(values) * 1e3
    return {"median_ms": float(np.median(ms)), "p95_ms": float(np.percentile(ms, 95)), "max_ms": float(ms.max()),
            "mean_ms": float(ms.mean())}  # fmt: skip


def phase_run(workdir: Path, count: int, seed: int, index_kind: str, warmup: int, torch_threads: int) -> dict[str, Any]:
    import torch

    from autofocus.config import AutofocusConfig
    from autofocus.index.cache import EmbeddingCache
    from autofocus.index.embedders import get_embedder
    from autofocus.kb import KnowledgeBase
    from autofocus.skb.cache import read_cache

    if torch_threads:
        torch.set_num_threads(torch_threads)
    cold: dict[str, float] = {}
    mem0 = _memory()
    t0 = time.perf_counter()
    skb = read_cache(workdir / "skb")
    cold["load_skb_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    embedder = get_embedder(EMBEDDER)
    embedder.embed(["warm up"])
    cold["load_embedder_s"] = time.perf_counter() - t0
    kb = KnowledgeBase(skb, embedder, workdir / "index", index_kind=index_kind, build_missing=False,  # type: ignore[arg-type]
                       progress=False, cache=EmbeddingCache(None))  # fmt: skip
    t0 = time.perf_counter()
    for variant in VARIANT_SEEDS:
        kb.index(variant).prepare(["paper"] if variant == "text+rel" else None)
    cold["open_or_build_faiss_s"] = time.perf_counter() - t0
    mem_open = _memory()
    cfg = AutofocusConfig()
    timed_kb = TimedKB(kb)
    queries = make_queries(skb, count + warmup, seed)
    t0 = time.perf_counter()
    for q in queries[:warmup]:  # first-use costs: name index, column caches, page faults
        retrieve(timed_kb, cfg, q["cypher"], q["question"], "paper")
    cold["warmup_queries_s"] = time.perf_counter() - t0
    rows = []
    for q in queries[warmup:]:
        times, stats = retrieve(timed_kb, cfg, q["cypher"], q["question"], "paper")
        rows.append({"shape": q["shape"], "times": times, "stats": stats})
    mem_end = _memory()
    return {"cold": cold, "memory": {"start": mem0, "after_open": mem_open, "after_queries": mem_end},
            "rows": rows, "examples": [{k: q[k] for k in ("shape", "cypher")} for q in queries[warmup : warmup + len(SHAPES)]],
            "index_kind": index_kind, "torch_threads": torch.get_num_threads(), "load_avg": os.getloadavg()}  # fmt: skip


# --- report ---------------------------------------------------------------------------------------
def aggregate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    steps = {s: _summary([r["times"].get(s, 0.0) for r in rows]) for s in (*STEPS, "4_embed")}
    totals = [sum(r["times"].get(s, 0.0) for s in STEPS) for r in rows]
    no_embed = [t - r["times"].get("embed_question", 0) - r["times"].get("4_embed", 0) for t, r in zip(totals, rows, strict=True)]
    by_shape: dict[str, Any] = {}
    for shape in SHAPES:
        sel = [t for t, r in zip(totals, rows, strict=True) if r["shape"] == shape]
        stats = [r["stats"] for r in rows if r["shape"] == shape]
        if sel:
            by_shape[shape] = {**_summary(sel), "n": len(sel),
                               "median_grounded": float(np.median([s["grounded"] for s in stats]))}  # fmt: skip
    total = _summary(totals)
    paper = {s: {"paper_median_s": v[0], "ours_median_ms": steps[s]["median_ms"],
                 "ratio": v[0] * 1e3 / max(steps[s]["median_ms"], 1e-6)} for s, v in PAPER_MAG_S.items()}  # fmt: skip
    paper_sum = sum(v[0] for v in PAPER_MAG_S.values())
    ours_4_7 = _summary([sum(r["times"].get(s, 0.0) for s in PAPER_MAG_S) for r in rows])
    paper["4-7"] = {"paper_median_s": paper_sum, "ours_median_ms": ours_4_7["median_ms"],
                    "ratio": paper_sum * 1e3 / ours_4_7["median_ms"]}  # fmt: skip
    return {
        "queries": len(rows), "steps": steps, "total": total, "total_without_embedding": _summary(no_embed),
        "by_shape": by_shape, "paper_ratio": paper,
        "target_met": {"median": total["median_ms"] <= TARGET_MS["median"], "p95": total["p95_ms"] <= TARGET_MS["p95"]},
        "grounded_nonempty": float(np.mean([r["stats"]["grounded"] > 0 for r in rows])),
    }  # fmt: skip


def print_report(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    agg, run = result["aggregate"], result["run"]
    t = Table(title=f"Steps 3-7 on the synthetic MAG SKB ({result['prepare']['nodes']:,} nodes, "
                    f"{result['prepare']['edges']:,} edges), {agg['queries']} queries, index {run['index_kind']}")  # fmt: skip
    for col in ("step", "median ms", "p95 ms", "max ms", "paper MAG median", "paper / ours"):
        t.add_column(col, justify="left" if col == "step" else "right")
    for s in (*STEPS[:3], "4_embed", *STEPS[3:]):
        v = agg["steps"][s]
        p = agg["paper_ratio"].get(s)
        label = "  of which embedding" if s == "4_embed" else s
        t.add_row(label, f"{v['median_ms']:.2f}", f"{v['p95_ms']:.2f}", f"{v['max_ms']:.1f}",
                  f"{p['paper_median_s']:.2f} s" if p else "", f"{p['ratio']:,.0f}x" if p else "")  # fmt: skip
    p47 = agg["paper_ratio"]["4-7"]
    t.add_row("steps 4-7", f"{p47['ours_median_ms']:.2f}", "", "", f"{p47['paper_median_s']:.2f} s", f"{p47['ratio']:,.0f}x")
    for key, label in (("total", "total 3-7 (incl. embedding)"), ("total_without_embedding", "total 3-7 without embedding")):
        v = agg[key]
        t.add_row(f"[bold]{label}", f"{v['median_ms']:.2f}", f"{v['p95_ms']:.2f}", f"{v['max_ms']:.1f}",
                  f"target <= {TARGET_MS['median']:.0f}", f"p95 <= {TARGET_MS['p95']:.0f}")  # fmt: skip
    console.print(t)
    s = Table(title="Total per query shape (ms)")
    for col in ("shape", "n", "median", "p95", "max", "median |grounded|"):
        s.add_column(col, justify="left" if col == "shape" else "right")
    for shape, v in agg["by_shape"].items():
        s.add_row(shape, str(v["n"]), f"{v['median_ms']:.1f}", f"{v['p95_ms']:.1f}", f"{v['max_ms']:.1f}",
                  f"{v['median_grounded']:,.0f}")  # fmt: skip
    console.print(s)
    m = run["memory"]
    console.print(
        f"Resident memory after {agg['queries']} queries: {m['after_queries']['rss_mb']:,.0f} MB "
        f"(anonymous {m['after_queries']['anon_mb']:,.0f} MB, file-backed mmap {m['after_queries']['file_mb']:,.0f} MB, "
        f"USS {m['after_queries']['uss_mb']:,.0f} MB, peak {m['after_queries']['peak_rss_mb']:,.0f} MB); "
        f"after opening: {m['after_open']['rss_mb']:,.0f} MB"
    )
    console.print("Cold start: " + ", ".join(f"{k} {v:.2f}" for k, v in run["cold"].items()))
    console.print(f"Grounded strand non-empty for {agg['grounded_nonempty']:.0%} of queries; "
                  f"load average during the run {tuple(round(x, 2) for x in run['load_avg'])} on {result['machine']['cpus']} CPUs")  # fmt: skip
    met = agg["target_met"]
    console.print(f"Target median <= {TARGET_MS['median']:.0f} ms: {'met' if met['median'] else 'NOT met'}; "
                  f"p95 <= {TARGET_MS['p95']:.0f} ms: {'met' if met['p95'] else 'NOT met'}")  # fmt: skip


def _run_phase(args: list[str]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, __file__, *args], stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"phase {args[:2]} failed (exit {proc.returncode})")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0, help="1.0 = 1.9 M nodes, 40 M edges")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=10, help="queries run first and not counted")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--index-kind", choices=["flat", "hnsw", "ivf"], default="flat", help="unfiltered searches")
    parser.add_argument("--torch-threads", type=int, default=1,
                        help="intra-op threads of the query embedder (0: torch's default, all cores; on a busy "
                             "machine its spinning threads made one embedding 5x slower at the median)")
    parser.add_argument("--workdir", type=Path, default=None, help="SKB + stores (kept and reused)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--phase", choices=["prepare", "run"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    workdir = args.workdir or paths.sub("bench") / f"retrieval-mag-{args.scale:g}-seed{args.seed}"
    if args.phase == "prepare":
        print(json.dumps(phase_prepare(workdir, args.scale, args.seed)))
        return
    if args.phase == "run":
        print(json.dumps(phase_run(workdir, args.queries, args.seed, args.index_kind, args.warmup, args.torch_threads)))
        return
    common = ["--scale", str(args.scale), "--seed", str(args.seed), "--workdir", str(workdir)]
    result: dict[str, Any] = {
        "command": " ".join(["python benchmarks/bench_retrieval.py", *sys.argv[1:]]),
        "machine": {"cpus": os.cpu_count(), "ram_gb": psutil.virtual_memory().total / 2**30,
                    "python": platform.python_version(), "platform": platform.platform(), "load_avg_start": os.getloadavg()},
        "targets_ms": TARGET_MS, "paper_mag_s": PAPER_MAG_S,
    }  # fmt: skip
    result["prepare"] = _run_phase(["--phase", "prepare", *common])
    run = _run_phase(["--phase", "run", *common, "--queries", str(args.queries), "--warmup", str(args.warmup),
                      "--index-kind", args.index_kind, "--torch-threads", str(args.torch_threads)])  # fmt: skip
    result["aggregate"] = aggregate(run["rows"])
    result["run"] = {k: v for k, v in run.items() if k != "rows"}
    result["rows"] = run["rows"]
    result["peak_rss_mb_parent"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print_report(result)
    print(f"results written to {args.out}")


if __name__ == "__main__":
    main()
