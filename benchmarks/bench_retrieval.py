"""Steps 3-7 of AF-Retriever end to end on the MAG-sized synthetic SKB, per step, with memory.

The SKB (1.9 M nodes, 40 M typed edges, ``benchmarks/synthetic_skb.py``) gets two 384-d float16
embedding stores, ``text`` (steps 4 and 6) and ``text+rel`` (step 7), as the default config uses,
registered for the real query embedder (MiniLM, offline), so the run goes through the same
``KnowledgeBase`` / ``NodeIndex`` objects as ``autofocus ask``. Node vectors are random: exact
search costs the same whatever they mean, and grounding (exact name hits first, then graph
filters) does not use them. ``--vectors clustered`` (default: 2,000 Gaussian clusters) gives the
approximate indexes (``--index-kind hnsw|ivf``) the neighbourhood structure real embeddings have;
``uniform`` is their worst case. Query vectors (``--query-vectors near-target``, default) lie near
the node the text names, as a good embedder's would, while MiniLM still runs for its cost;
``minilm`` keeps MiniLM's vectors, which point nowhere in particular among random node vectors (the
worst case for approximate search). With an approximate kind, the same queries are answered again
with exact search afterwards and recall@20 against it is reported.

Queries are Cypher strings in the shapes of the paper's MAG examples (Table 24, the golden cases in
``tests/golden``): 1-3 triplets, 1-2 constants (names, titles, ``CONTAINS``), ``year`` filters,
built around a sampled answer paper so that grounding has real work. Each goes through
``AutofocusRetriever.retrieve`` (steps 3-7 without LM calls, the path ``forward`` runs): step 3
(``parse_cypher``), the question's embedding, step 4 (symbol candidates, ``l_max`` = 100, their
embedding included), step 5 (grounding with expansion), step 6, step 7 and the merge.

Two paths through steps 3-7 (``--runs BACKEND/PATH,...``): ``sequential`` embeds the question, runs
steps 3-5, then scans for step 7 (``scan_ahead=False``, the path before the scan moved); ``ahead`` (the
default) embeds the question and scans step 7's type on a worker thread while steps 3-5 run, and step 7
drops the grounded nodes from that scan (``ahead-N``: the scan split over N threads, ``scan_shards``).
In ``ahead`` runs, "embed_question" and "scan (worker)" run beside steps 3-5; steps 6 and 7 include
the time spent waiting for them ("waited"), so the total is the critical path.

Run in child processes: ``prepare`` (build the SKB cache and stores once, kept under
``~/.cache/autofocus/bench``) and one ``run`` per entry of ``--runs`` (a fresh process each, one after
the other: open, warm up, answer the queries, report resident memory). With near-target query vectors
every run must rank every query identically (merged top 20, step 7, constants): the script checks that
and exits with status 1 if one differs. Prints a table per run and writes
``benchmarks/results/retrieval.json``.

    .venv/bin/python benchmarks/bench_retrieval.py                      # full scale, 300 queries
    .venv/bin/python benchmarks/bench_retrieval.py --scale 0.01 --queries 50 --out /tmp/r.json
    # before/after in one run, alternating, identical rankings asserted:
    .venv/bin/python benchmarks/bench_retrieval.py --runs torch/sequential,auto/ahead,torch/sequential,auto/ahead
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
import zlib
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).parent))

import synthetic_skb

from autofocus import paths

RESULTS = Path(__file__).parent / "results" / "retrieval.json"
EMBEDDER = "local:all-MiniLM-L6-v2"  # embeds the questions and constants (its time is real), any backend
STORE_MODEL, STORE_BUDGET = "synthetic:random-vectors", 128  # what the stores are registered under, once for every backend
TARGET_MS = {"median": 50.0, "p95": 300.0}
# Table 8, MAG validation set, seconds (median, mean, max); step 5 with l_max = 100
PAPER_MAG_S = {
    "4_symbols": (2.44, 3.26, 17.36),
    "5_grounding": (0.10, 0.23, 7.75),
    "6_vss_grounded": (4.61, 4.01, 5.10),
    "7_vss_rest": (2.62, 2.70, 3.13),
}
STEPS = ("3_parse", "embed_question", "4_symbols", "5_grounding", "6_vss_grounded", "7_vss_rest", "other")
WORKER = ("scan_worker", "waited")  # ahead runs: step 7's scan on the worker thread; time steps 6-7 waited for it
PATHS = ("sequential", "ahead")
VARIANTS = ("text", "text+rel")
REL_NOISE = 0.3  # text+rel vectors: the text vector plus noise of this norm (cosine ~0.96 to it)
QUERY_NOISE = 0.5  # near-target query vectors: the target's vector plus noise of this norm (as bench_search.py)


# --- preparing the SKB and its embedding stores ------------------------------------------------------
def _ready_file(workdir: Path) -> Path:
    return workdir / "READY.json"


def _noisy(rng: np.random.Generator, x: np.ndarray, norm: float) -> np.ndarray:
    """Rows of ``x`` plus Gaussian noise of about ``norm``, normalised again."""
    y = x + norm * rng.standard_normal(x.shape, dtype=np.float32) / np.sqrt(x.shape[-1])
    return y / np.linalg.norm(y, axis=-1, keepdims=True)


def write_vectors(directory: Path, n: int, kind: str, seed: int, dim: int = 384, chunk: int = 131072) -> None:
    """Both stores' vectors: ``text`` uniform random or around 2,000 Gaussian centres (as bench_search.py);
    ``text+rel`` the same plus a little noise, as a node's two documents embed close to each other."""
    from autofocus.index.store import VECTORS

    rng, noise = np.random.default_rng(seed), np.random.default_rng(seed + 1000)
    text = np.lib.format.open_memmap(directory["text"] / VECTORS, mode="w+", dtype=np.float16, shape=(n, dim))
    rel = np.lib.format.open_memmap(directory["text+rel"] / VECTORS, mode="w+", dtype=np.float16, shape=(n, dim))
    centres = rng.standard_normal((2000, dim), dtype=np.float32)
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        if kind == "clustered":
            x = centres[rng.integers(0, len(centres), m)] + 0.9 * rng.standard_normal((m, dim), dtype=np.float32)
        else:
            x = rng.standard_normal((m, dim), dtype=np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        text[start : start + m] = x
        rel[start : start + m] = _noisy(noise, x, REL_NOISE)
    for out in (text, rel):
        out.flush()
    del text, rel


def phase_prepare(workdir: Path, scale: float, seed: int, vectors: str) -> dict[str, Any]:
    """Write the SKB cache and both embedding stores once; a ``READY.json`` marks a finished build.

    FAISS indexes cached under the stores are kept: they record the checksum of the vectors they
    were built from and are rebuilt only when those changed."""
    ready = _ready_file(workdir)
    wanted = {"scale": scale, "seed": seed, "model": STORE_MODEL, "budget": STORE_BUDGET, "variants": list(VARIANTS),
              "vectors": vectors, "rel_noise": REL_NOISE}  # fmt: skip
    if ready.is_file() and json.loads(ready.read_text()).get("spec") == wanted:
        return {"reused": True, **json.loads(ready.read_text())}
    from autofocus.index.store import DONE, MANIFEST, VECTORS, Manifest, now, sha256_file, store_dir
    from autofocus.skb.cache import write_cache

    ready.unlink(missing_ok=True)
    t0 = time.perf_counter()
    arrays = synthetic_skb.generate(scale, seed)
    skb = synthetic_skb.build_skb(arrays)
    n = skb.num_nodes
    del arrays
    write_cache(skb, workdir / "skb", source="synthetic")
    t_skb = time.perf_counter() - t0
    name = STORE_MODEL
    t0 = time.perf_counter()
    dirs = {v: store_dir(workdir / "index", name, v, STORE_BUDGET) for v in VARIANTS}
    for directory in dirs.values():
        directory.mkdir(parents=True, exist_ok=True)
        (directory / MANIFEST).unlink(missing_ok=True)
    write_vectors(dirs, n, vectors, seed=seed * 10 + 1)
    for variant, directory in dirs.items():
        np.save(directory / DONE, np.ones(n, dtype=bool))
        manifest = Manifest(
            model=name, dim=384, variant=variant, doc_budget_tokens=STORE_BUDGET, skb_fingerprint=skb.fingerprint,
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
        surname = nm["a"].split()[-1] if a is not None else ""
        named = {  # what each constant's search string names (for --query-vectors near-target)
            "author_papers": {nm["a"]: a}, "author_papers_year": {nm["a"]: a}, "coauthor_title_contains": {nm["p"]: p, w: y},
            "institution_year": {nm["i"]: i}, "cites_title_since": {nm["q"]: q}, "field_after": {nm["f"]: f},
            "author_field": {nm["a"]: a, nm["f"]: f}, "author_cited_field": {nm["a"]: a, nm["q"]: q},
            "institution_cites": {nm["i"]: i, nm["q"]: q}, "name_contains_title_contains": {surname: a, w: y},
        }[shape]  # fmt: skip
        queries.append({"shape": shape, "cypher": cypher, "question": question, "answer": y,
                        "targets": {question: y, **named}})  # fmt: skip
    return queries


# --- running steps 3-7 ----------------------------------------------------------------------------
class NearTargetEmbedder:
    """MiniLM's cost with a good embedder's geometry: a text that names a node (a query's answer, a
    constant's node) gets that node's ``text`` vector plus noise; other texts keep MiniLM's vector.

    MiniLM vectors of the synthetic strings point nowhere in particular among random node vectors,
    a worst case for approximate indexes that real embeddings (query near its target) are not.
    The noise is seeded by the text, so exact and approximate runs see the same query vectors.
    """

    def __init__(self, inner: Any, vectors: np.ndarray, targets: dict[str, int]) -> None:
        self.inner, self.vectors, self.targets = inner, vectors, targets
        self.name = STORE_MODEL  # the stores' model, whichever backend pays the embedding time

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed(self, texts: Any, batch_size: int = 64, progress: bool = False) -> np.ndarray:
        out = self.inner.embed(texts, batch_size=batch_size, progress=progress)  # the model's time is real
        for row, text in enumerate(texts):
            if text in self.targets:
                rng = np.random.default_rng(zlib.crc32(text.encode()))
                out[row] = _noisy(rng, np.asarray(self.vectors[self.targets[text]], np.float32), QUERY_NOISE)
        return out


class TimedKB:
    """The knowledge base with the time spent embedding counted: the question (one ``embed_query``,
    before step 3) and step 4's constants (one ``embed_queries`` batch)."""

    def __init__(self, kb: Any) -> None:
        self.kb = kb
        self.skb = kb.skb
        self.question_s = self.constants_s = 0.0

    def index(self, variant: str = "text") -> Any:
        return self.kb.index(variant)

    def embed_query(self, text: str) -> np.ndarray:
        t0 = time.perf_counter()
        try:
            return self.kb.embed_query(text)
        finally:
            self.question_s += time.perf_counter() - t0

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        t0 = time.perf_counter()
        try:
            return self.kb.embed_queries(texts)
        finally:
            self.constants_s += time.perf_counter() - t0


def retrieve(program: Any, kb: TimedKB, cypher: str, question: str, target_type: str) -> tuple[dict, dict, dict]:
    """``AutofocusRetriever.retrieve`` (steps 3-7) for one query: per-step seconds, stats, result ids.

    On the ``ahead`` path the question's embedding runs beside steps 3-5, so it is left out of "other"
    (the waits for it are inside steps 6 and 7)."""
    from autofocus.trace import Trace

    trace = Trace(system="bench", question=question)
    kb.question_s = kb.constants_s = 0.0
    t0 = time.perf_counter()
    found = program.retrieve(question, target_type, cypher, trace=trace)
    total = time.perf_counter() - t0
    times = {name: rec.seconds for name, rec in trace.steps.items()}
    ahead = trace.data.get("scan_ahead")
    times.update(embed_question=kb.question_s, **{"4_embed": kb.constants_s}, total=total)
    on_path = kb.question_s if ahead is None else 0.0
    times["other"] = total - on_path - sum(rec.seconds for rec in trace.steps.values())
    if ahead is not None:
        times.update(scan_worker=sum(ahead["scan_s"].values()), waited=ahead["waited_s"])
    rounds = found.grounding.rounds if found.grounding is not None else []
    stats = {"usable": bool(trace.flags.get("has_constant")), "constants": len(trace.data.get("symbol_candidates", {})),
             "rounds": len(rounds), "grounded": len(found.grounded), "returned": len(found.ids)}  # fmt: skip
    ids = {"merged": found.ids, "step7": [i for i in found.ids if found.strand[i] != "grounded"],
           "constants": {v: c["ids"] for v, c in trace.data.get("symbol_candidates", {}).items()}}  # fmt: skip
    return times, stats, ids


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


def _recall(got: list[int], truth: list[int]) -> float | None:
    return len(set(got) & set(truth)) / len(truth) if truth else None


def split_run(spec: str) -> tuple[str, str, int]:
    """``BACKEND[/PATH]`` -> (backend, path, shards); PATH is ``sequential``, ``ahead`` (default) or ``ahead-N``."""
    backend, _, path = spec.partition("/")
    path = path or "ahead"
    base, _, shards = path.partition("-")
    if base not in PATHS or (shards and (base != "ahead" or not shards.isdigit() or int(shards) < 1)):
        raise SystemExit(f"bad run {spec!r}: BACKEND/PATH with PATH sequential, ahead or ahead-N")
    return backend, base, int(shards or 1)


def phase_run(
    workdir: Path, count: int, seed: int, index_kind: str, warmup: int, torch_threads: int, query_vectors: str,
    run: str,
) -> dict[str, Any]:
    import torch

    from autofocus.config import AutofocusConfig
    from autofocus.index.cache import EmbeddingCache
    from autofocus.index.embedders import get_embedder, with_backend
    from autofocus.kb import KnowledgeBase
    from autofocus.program.systems.afr import AutofocusRetriever
    from autofocus.skb.cache import read_cache

    backend, path, shards = split_run(run)
    config = AutofocusConfig(scan_ahead=path == "ahead", scan_shards=shards)
    if torch_threads:
        torch.set_num_threads(torch_threads)
    cold: dict[str, float] = {}
    mem0 = _memory()
    t0 = time.perf_counter()
    skb = read_cache(workdir / "skb")
    cold["load_skb_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    model = get_embedder(with_backend(EMBEDDER, backend))
    model.embed(["warm up"])
    cold["load_embedder_s"] = time.perf_counter() - t0
    queries = make_queries(skb, count + warmup, seed)
    from autofocus.index.store import EmbeddingStore, store_dir

    stored = EmbeddingStore.open(store_dir(workdir / "index", STORE_MODEL, "text", STORE_BUDGET)).vectors
    targets = {t: n for q in queries for t, n in q["targets"].items()} if query_vectors == "near-target" else {}
    embedder = NearTargetEmbedder(model, stored, targets)

    def open_kb(kind: str) -> TimedKB:
        kb = KnowledgeBase(skb, embedder, workdir / "index", index_kind=kind, build_missing=False,  # type: ignore[arg-type]
                           progress=False, cache=EmbeddingCache(None), doc_budget_tokens=STORE_BUDGET)  # fmt: skip
        for variant in VARIANTS:
            kb.index(variant).prepare(["paper"] if variant == "text+rel" else None)
        return TimedKB(kb)

    t0 = time.perf_counter()
    kb = open_kb(index_kind)
    cold["open_or_build_faiss_s"] = time.perf_counter() - t0
    mem_open = _memory()
    program = AutofocusRetriever(kb, config)
    t0 = time.perf_counter()
    for q in queries[:warmup]:  # first-use costs: name index, column caches, page faults
        retrieve(program, kb, q["cypher"], q["question"], "paper")
    cold["warmup_queries_s"] = time.perf_counter() - t0
    rows = []
    for q in queries[warmup:]:
        times, stats, ids = retrieve(program, kb, q["cypher"], q["question"], "paper")
        stats["answer_in_top20"] = q["answer"] in ids["merged"]
        rows.append({"shape": q["shape"], "times": times, "stats": stats, "ids": ids})
    mem_end = _memory()
    recall = None
    if index_kind != "flat":  # the same queries with exact search, after the timing and the memory reading
        exact_kb = open_kb("flat")
        exact = AutofocusRetriever(exact_kb, config)
        per = {"merged@20": [], "step7": [], "step4_constants@20": []}
        for q, row in zip(queries[warmup:], rows, strict=True):
            _, _, truth = retrieve(exact, exact_kb, q["cypher"], q["question"], "paper")
            per["merged@20"].append(_recall(row["ids"]["merged"], truth["merged"]))
            per["step7"].append(_recall(row["ids"]["step7"], truth["step7"]))
            per["step4_constants@20"] += [_recall(row["ids"]["constants"].get(v, []), t)
                                          for v, t in truth["constants"].items()]  # fmt: skip
        recall = {k: float(np.mean([x for x in v if x is not None])) for k, v in per.items()}
    return {"cold": cold, "memory": {"start": mem0, "after_open": mem_open, "after_queries": mem_end},
            "rows": rows, "recall": recall, "examples": [{k: q[k] for k in ("shape", "cypher")} for q in queries[warmup : warmup + len(SHAPES)]],
            "index_kind": index_kind, "query_vectors": query_vectors, "torch_threads": torch.get_num_threads(),
            "embedder": model.name, "path": path, "scan_shards": shards, "load_avg": os.getloadavg()}  # fmt: skip


# --- report ---------------------------------------------------------------------------------------
def aggregate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    steps = {s: _summary([r["times"].get(s, 0.0) for r in rows]) for s in (*STEPS, "4_embed", *WORKER)}
    totals = [r["times"]["total"] for r in rows]
    no_embed = [t - (r["times"].get("embed_question", 0) if "scan_worker" not in r["times"] else 0)
                - r["times"].get("4_embed", 0) for t, r in zip(totals, rows, strict=True)]  # fmt: skip
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
        "answer_in_top20": float(np.mean([r["stats"]["answer_in_top20"] for r in rows])),
    }  # fmt: skip


def print_report(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    agg, run = result["aggregate"], result["run"]
    path = run.get("path", "sequential") + (f", {run['scan_shards']} shards" if run.get("scan_shards", 1) > 1 else "")
    t = Table(title=f"Steps 3-7 on the synthetic MAG SKB ({result['prepare']['nodes']:,} nodes, "
                    f"{result['prepare']['edges']:,} edges), {agg['queries']} queries, index {run['index_kind']}, "
                    f"{run['query_vectors']} query vectors, {path} path")  # fmt: skip
    for col in ("step", "median ms", "p95 ms", "max ms", "paper MAG median", "paper / ours"):
        t.add_column(col, justify="left" if col == "step" else "right")
    ahead = run.get("path") == "ahead"
    for s in (*STEPS[:3], "4_embed", *STEPS[3:], *(WORKER if ahead else ())):
        v = agg["steps"][s]
        p = agg["paper_ratio"].get(s)
        label = {"4_embed": "  of which embedding", "other": "other (merge, trace)",
                 "embed_question": "embed_question (worker thread)" if ahead else "embed_question",
                 "scan_worker": "step 7 scan (worker thread, beside 3-5)",
                 "waited": "  steps 6-7 waiting for the worker"}.get(s, s)  # fmt: skip
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
    if run.get("recall"):
        console.print("Recall against exact search: " + ", ".join(f"{k} {v:.3f}" for k, v in run["recall"].items()))
    console.print(f"Grounded strand non-empty for {agg['grounded_nonempty']:.0%} of queries, the sampled answer in "
                  f"the top 20 for {agg['answer_in_top20']:.0%}; "
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
    parser.add_argument("--vectors", choices=["clustered", "uniform"], default="clustered", help="node vectors")
    parser.add_argument("--query-vectors", choices=["near-target", "minilm"], default="near-target",
                        help="query vectors near the node the text names (MiniLM still runs for its time), or "
                             "MiniLM's own (unrelated to the random node vectors: the worst case for hnsw/ivf)")
    parser.add_argument("--torch-threads", type=int, default=1,
                        help="intra-op threads of the query embedder (0: torch's default, all cores; on a busy "
                             "machine its spinning threads made one embedding 5x slower at the median)")
    parser.add_argument("--embedder-backend", default=None,
                        help="what embeds the questions and constants: auto, torch (the path before ONNX Runtime), onnx, "
                             "onnx-int8; a comma list runs each in turn (ahead path); same as --runs B1,B2")
    parser.add_argument("--runs", default=None,
                        help="comma list of BACKEND/PATH, run in turn in fresh processes: PATH sequential (question "
                             "embedded, steps 3-5, then step 7's scan), ahead (the scan on a worker thread beside "
                             "steps 3-5; the default) or ahead-N (that scan in N shards); default auto/ahead")
    parser.add_argument("--workdir", type=Path, default=None, help="SKB + stores (kept and reused)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--phase", choices=["prepare", "run"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    workdir = args.workdir or paths.sub("bench") / f"retrieval-mag-{args.scale:g}-seed{args.seed}-{args.vectors}"
    if args.phase == "prepare":
        print(json.dumps(phase_prepare(workdir, args.scale, args.seed, args.vectors)))
        return
    if args.phase == "run":
        print(json.dumps(phase_run(workdir, args.queries, args.seed, args.index_kind, args.warmup, args.torch_threads,
                                   args.query_vectors, args.runs)))
        return
    common = ["--scale", str(args.scale), "--seed", str(args.seed), "--workdir", str(workdir), "--vectors", args.vectors]
    result: dict[str, Any] = {
        "command": " ".join(["python benchmarks/bench_retrieval.py", *sys.argv[1:]]),
        "machine": {"cpus": os.cpu_count(), "ram_gb": psutil.virtual_memory().total / 2**30,
                    "python": platform.python_version(), "platform": platform.platform(), "load_avg_start": os.getloadavg()},
        "targets_ms": TARGET_MS, "paper_mag_s": PAPER_MAG_S,
    }  # fmt: skip
    result["prepare"] = _run_phase(["--phase", "prepare", *common])
    specs = (args.runs or args.embedder_backend or "auto").split(",")
    for spec in specs:
        split_run(spec)  # a bad spec fails before any run
    runs = {}
    for i, spec in enumerate(specs):  # one fresh process each, one after the other (repeat a spec to alternate)
        runs[f"{i + 1}:{spec}"] = _run_phase(["--phase", "run", *common, "--queries", str(args.queries), "--warmup", str(args.warmup),
                                    "--index-kind", args.index_kind, "--torch-threads", str(args.torch_threads),
                                    "--query-vectors", args.query_vectors, "--runs", spec])  # fmt: skip
    if len(runs) > 1 and args.query_vectors == "near-target":  # same query vectors: every ranking must be the same
        first = [r["ids"] for r in next(iter(runs.values()))["rows"]]
        result["queries_ranked_differently"] = {key: sum(row["ids"] != f for row, f in zip(r["rows"], first, strict=True))
                                               for key, r in runs.items()}  # fmt: skip
        result["identical_rankings"] = not any(result["queries_ranked_differently"].values())
    result["by_backend"] = {b: {"aggregate": aggregate(r["rows"]), "run": {k: v for k, v in r.items() if k != "rows"}}
                            for b, r in runs.items()}  # fmt: skip
    last = runs[f"{len(specs)}:{specs[-1]}"]
    result["aggregate"] = aggregate(last["rows"])
    result["run"] = {k: v for k, v in last.items() if k != "rows"}
    result["rows"] = last["rows"]
    result["peak_rss_mb_parent"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for key, r in result["by_backend"].items():
        print(f"--- run {key}: questions and constants embedded by {r['run']['embedder']}, {r['run']['path']} path ---")
        print_report({**result, **r})
    if len(runs) > 1:
        print("median total per run (ms): " + ", ".join(f"{key} {r['aggregate']['total']['median_ms']:.1f}"
                                                    for key, r in result["by_backend"].items()))  # fmt: skip
    print(f"results written to {args.out}")
    if "identical_rankings" in result:
        print(f"rankings (merged top 20, step 7, constants) identical in every run: {result['identical_rankings']} "
              f"(queries ranked differently from the first run: {result['queries_ranked_differently']})")
        if not result["identical_rankings"]:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
