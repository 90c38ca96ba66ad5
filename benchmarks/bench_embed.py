"""``index build`` speed before/after on the same SKB, lever by lever, and how far the backends agree.

Configurations, each embedding every node of the SKB in both document variants (what ``index build
--variant all`` did; the default config searches both), timed in interleaved rounds in one process:

- ``before``: today's defaults: torch, documents cut at 384 tokens, the old build loop (chunks of
  2,048 handed to sentence-transformers as they come: it sorts by length inside 512-text calls);
- one lever at a time on top of it: the new loop (each chunk sorted by length, duplicates embedded
  once), then the 128-token budget (MiniLM's trained length), then each exported backend installed
  (ONNX Runtime fp32 / int8, OpenVINO fp32 / bf16);
- ``after``: the new defaults (``auto`` backend, the embedder's trained budget, the new loop).

Also: the default backend at budgets 64 and 256, texts per second of each backend on the very same
texts (equal length), the cosine of each exported backend's vectors to torch's, and VSS on the QA
split (``--split``) with each backend's index: hit@20 and how many questions keep the same top 20.
Writes ``benchmarks/results/embed.json``.

    .venv/bin/python benchmarks/bench_embed.py --skb data/demo
    .venv/bin/python benchmarks/bench_embed.py --skb data/demo --rounds 1 --limit 500   # quick look
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from autofocus.index.build import embed_unique
from autofocus.index.embedders import DEFAULT_EMBEDDER, Embedder, get_embedder
from autofocus.skb.documents import render_documents
from autofocus.skb.model import SKB

RESULTS = Path(__file__).parent / "results" / "embed.json"
VARIANTS = ("text", "text+rel")
EXPORTED = ("onnx", "onnx-int8", "openvino", "openvino-bf16")
CHUNK = 2048


def old_loop(embedder: Embedder, texts: list[str]) -> np.ndarray:
    """The build loop before this change: chunks embedded in node order, nothing sorted or deduplicated."""
    return np.concatenate([embedder.embed(texts[s : s + CHUNK], batch_size=64) for s in range(0, len(texts), CHUNK)])


def new_loop(embedder: Embedder, texts: list[str]) -> np.ndarray:
    """``build_embeddings``'s loop: each chunk sorted by length, each distinct text embedded once."""
    return np.concatenate([embed_unique(embedder, texts[s : s + CHUNK], 64) for s in range(0, len(texts), CHUNK)])


def available() -> set[str]:
    """The exported backends' runtimes installed here."""
    from autofocus.index.onnx_model import onnx_available
    from autofocus.index.openvino_model import openvino_available

    return {name for name, ok in (("onnx", onnx_available()), ("openvino", openvino_available())) if ok}


def documents(skb: SKB, ids: np.ndarray, budget: int) -> list[str]:
    return [t for v in VARIANTS for t in render_documents(skb, ids, v, budget)]


def timed(fn: Callable[[], np.ndarray]) -> tuple[float, float, np.ndarray]:
    """Wall seconds and CPU seconds (all threads): on a shared machine the CPU time is the steadier measure."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - t0, time.process_time() - c0, out


def cosine(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    cos = (a * b).sum(axis=1)
    return {"mean": float(cos.mean()), "min": float(cos.min()), "p1": float(np.percentile(cos, 1)),
            "share_ge_0.99": float((cos >= 0.99).mean())}  # fmt: skip


def vss_agreement(skb_path: Path, split: str, backends: list[str], budget: int) -> dict[str, Any]:
    """VSS top 20 on the split with each backend's own index (built in a temporary folder)."""
    import autofocus
    from autofocus.kb import KnowledgeBase
    from autofocus.metrics import compute_metrics
    from autofocus.skb.qa import load_qa

    items = load_qa(skb_path, split)
    tops: dict[str, list[list[int]]] = {}
    hits: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for backend in backends:
            kb = KnowledgeBase.open(skb_path, f"{DEFAULT_EMBEDDER}@{backend}", Path(tmp) / backend,
                                    doc_budget_tokens=budget, progress=False)
            program = autofocus.open(kb, "vss")
            tops[backend] = [program(question=q.query).ranked_ids[:20] for q in items]
            hits[backend] = float(np.mean([compute_metrics(t, q.answer_ids, ks=(20,))["hit@20"]
                                           for t, q in zip(tops[backend], items, strict=True)]))  # fmt: skip
    ref = backends[0]
    out: dict[str, Any] = {"questions": len(items), "hit@20": hits}
    for b in backends[1:]:
        same_hit = [(set(x) & set(q.answer_ids) != set()) == (set(y) & set(q.answer_ids) != set())
                    for x, y, q in zip(tops[ref], tops[b], items, strict=True)]  # fmt: skip
        out[f"{b}_vs_{ref}"] = {
            "same_hit@20": float(np.mean(same_hit)),
            "same_top20_set": float(np.mean([set(x) == set(y) for x, y in zip(tops[ref], tops[b], strict=True)])),
            "mean_top20_overlap": float(np.mean([len(set(x) & set(y)) / 20 for x, y in zip(tops[ref], tops[b], strict=True)])),
        }  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skb", type=Path, default=Path("data/demo"))
    parser.add_argument("--rounds", type=int, default=2, help="interleaved timing rounds (median reported)")
    parser.add_argument("--limit", type=int, default=None, help="embed only this many nodes (a seeded sample)")
    parser.add_argument("--split", default="test", help="QA split of the VSS agreement check ('' skips it)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    from autofocus.index.embedders import trained_tokens
    from autofocus.skb.io import load_skb

    skb = load_skb(args.skb, progress=False)
    ids = np.arange(skb.num_nodes)
    if args.limit:
        ids = np.sort(np.random.default_rng(0).choice(skb.num_nodes, size=args.limit, replace=False))
    t0 = time.perf_counter()
    exported = [b for b in EXPORTED if b.split("-")[0] in available()]
    emb = {b: get_embedder(f"{DEFAULT_EMBEDDER}@{b}") for b in ("torch", *exported)}
    auto = get_embedder(DEFAULT_EMBEDDER)
    for e in emb.values():
        e.embed(["warm up"])  # loads torch, exports the ONNX and OpenVINO models on first use
    setup_s = time.perf_counter() - t0
    new_budget = trained_tokens(auto)
    docs = {b: documents(skb, ids, b) for b in sorted({64, new_budget, 256, 384})}
    configs: dict[str, Callable[[], np.ndarray]] = {
        "before: torch, 384 tokens, old loop": lambda: old_loop(emb["torch"], docs[384]),
        "torch, 384, new loop (sorted chunks, dedup)": lambda: new_loop(emb["torch"], docs[384]),
        f"torch, {new_budget}, new loop": lambda: new_loop(emb["torch"], docs[new_budget]),
    }
    for b in exported:
        configs[f"{b}, {new_budget}, new loop"] = lambda b=b: new_loop(emb[b], docs[new_budget])
        configs[f"{b}, 384, new loop (backend alone)"] = lambda b=b: new_loop(emb[b], docs[384])
    fastest = auto.name.rsplit("@", 1)[1]
    for budget in (64, 256):
        configs[f"{fastest}, {budget}, new loop (budget)"] = lambda b=budget: new_loop(emb[fastest], docs[b])
    seconds: dict[str, list[float]] = {name: [] for name in configs}
    cpu: dict[str, list[float]] = {name: [] for name in configs}
    vectors: dict[str, np.ndarray] = {}
    load: list[tuple[float, ...]] = []
    for _ in range(args.rounds):
        for name, fn in configs.items():
            load.append(os.getloadavg())
            s, c, vectors[name] = timed(fn)
            seconds[name].append(s)
            cpu[name].append(c)
            print(f"{name}: {len(docs[384]) / s:.1f} docs/s, {len(docs[384]) / c:.1f} docs per CPU second", flush=True)
    n_docs = len(docs[384])
    rows = {name: {"median_s": float(np.median(s)), "docs_per_s": n_docs / float(np.median(s)), "runs_s": s,
                   "docs_per_cpu_s": n_docs / float(np.median(cpu[name])), "runs_cpu_s": cpu[name]}
            for name, s in seconds.items()}  # fmt: skip
    before = rows["before: torch, 384 tokens, old loop"]["docs_per_s"]
    before_cpu = rows["before: torch, 384 tokens, old loop"]["docs_per_cpu_s"]
    after_name = f"{auto.name.rsplit('@', 1)[1]}, {new_budget}, new loop"
    for r in rows.values():
        r["speedup_vs_before"] = r["docs_per_s"] / before
        r["cpu_speedup_vs_before"] = r["docs_per_cpu_s"] / before_cpu
    result: dict[str, Any] = {
        "command": "python benchmarks/bench_embed.py " + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v),
        "skb": str(args.skb), "nodes": len(ids), "documents": n_docs, "rounds": args.rounds,
        "default_backend": auto.name, "default_budget": new_budget, "after": after_name, "setup_s": setup_s,
        "configs": rows, "speedup_after_vs_before": rows[after_name]["speedup_vs_before"],
        "cpu_speedup_after_vs_before": rows[after_name]["cpu_speedup_vs_before"],
        "cosine_to_torch": {
            f"{b}, {budget} tokens": cosine(vectors[f"{b}, {budget}, new loop" + (" (backend alone)" if budget == 384 else "")],
                                            vectors["torch, 384, new loop (sorted chunks, dedup)" if budget == 384 else f"torch, {new_budget}, new loop"])
            for b in exported for budget in (384, new_budget)
        },
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_avg_during": load},
    }  # fmt: skip
    if args.split:
        result["vss"] = vss_agreement(args.skb, args.split, ["torch", *exported], new_budget)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=1))


if __name__ == "__main__":
    main()
