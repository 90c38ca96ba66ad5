"""Where ``autofocus index build`` spends its time: the real build of one variant, its parts timed in place.

The build (``index.build.build_embeddings`` through ``KnowledgeBase.build``) runs unchanged, with timers
wrapped around its parts: rendering the documents, tokenising them, the model's forward passes, the
store's writes (vectors, done mask, manifest, checksum), then opening the FAISS index over the result.
What the wrapped parts do not cover (deduplication, length sorting, building each batch's padded
inputs, Python between them) is reported as the rest. Padding: the batches' padded tokens over their
real ones (1.0 = none). The share of each part is what to read on a shared machine; documents per second
are indicative only there.

    python benchmarks/profile_index_build.py --skb data/demo --variant text+rel
    python benchmarks/profile_index_build.py --skb data/demo --embedder local:all-MiniLM-L6-v2@openvino --budget 64

Writes ``benchmarks/results/profile_index_build.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from autofocus.index import store as store_module
from autofocus.index.embedders import DEFAULT_EMBEDDER, get_embedder
from autofocus.index.exported_encoder import physical_cores
from autofocus.kb import KnowledgeBase
from autofocus.skb.documents import render_documents

RESULTS = Path(__file__).parent / "results" / "profile_index_build.json"


class Timers:
    """Seconds per part, and wrappers that add to them."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.padded = self.real = 0

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - t0

        return timed

    def model(self, run: Callable[[dict[str, np.ndarray]], np.ndarray]) -> Callable[[dict[str, np.ndarray]], np.ndarray]:
        timed = self.wrap("model", run)

        def counted(feed: dict[str, np.ndarray]) -> np.ndarray:
            self.padded += int(feed["attention_mask"].size)
            self.real += int(feed["attention_mask"].sum())
            return timed(feed)

        return counted


class _Tokenizer:
    """The encoder's tokenizer with ``encode_batch`` timed (a Rust object takes no new attributes)."""

    def __init__(self, inner: Any, timers: Timers) -> None:
        self.inner, self.encode_batch = inner, timers.wrap("tokenise", inner.encode_batch)


def instrument(embedder: Any, timers: Timers) -> None:
    """Timers around an exported backend's tokenizer and model runner (torch runs as one ``model`` part)."""
    model = embedder.model.load()
    if not hasattr(model, "_cached_runner"):  # torch: tokenising and padding happen inside sentence-transformers
        model.encode = timers.wrap("model", model.encode)
        return
    model.tokenizer = _Tokenizer(model.tokenizer, timers)
    threads = physical_cores()
    model._runners[threads] = timers.model(model._cached_runner(threads))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skb", type=Path, default=Path("data/demo"))
    parser.add_argument("--variant", default="text+rel")
    parser.add_argument("--embedder", default=DEFAULT_EMBEDDER, help="embedder spec (default: the auto backend)")
    parser.add_argument("--budget", type=int, default=None, help="document budget (default: the trained length)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    timers = Timers()
    embedder = get_embedder(args.embedder)
    embedder.embed(["warm-up: the export, the compiled model"] * 16)
    instrument(embedder, timers)
    timed_write = timers.wrap("store", store_module.EmbeddingStore.write_rows)
    timed_finish = timers.wrap("store", store_module.EmbeddingStore.finish)
    store_module.EmbeddingStore.write_rows = lambda self, ids, vecs: timed_write(self, ids, vecs)  # type: ignore[method-assign]
    store_module.EmbeddingStore.finish = lambda self: timed_finish(self)  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as tmp:
        kb = KnowledgeBase.open(args.skb, embedder=embedder, index_dir=Path(tmp), doc_budget_tokens=args.budget,
                                documents=timers.wrap("render", render_documents), progress=False)
        n = kb.skb.num_nodes
        load0, t0, c0 = os.getloadavg()[0], time.perf_counter(), time.process_time()
        kb.build(args.variant)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        t1 = time.perf_counter()
        kb.index(args.variant)
        faiss_s = time.perf_counter() - t1
    parts = dict(timers.seconds)
    parts["rest (dedup, sort, padding, Python)"] = wall - sum(parts.values())
    result = {
        "command": "python benchmarks/profile_index_build.py " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v is not None and k != "out"),
        "embedder": embedder.name, "nodes": n, "variant": args.variant, "budget": kb.doc_budget_tokens,
        "wall_s": wall, "cpu_s": cpu, "docs_per_s": n / wall, "docs_per_cpu_s": n / cpu,
        "parts_s": parts, "faiss_open_s": faiss_s,
        "padding": timers.padded / timers.real if timers.real else None,
        "mean_tokens": timers.real / n if timers.real else None,
        "load_avg_1min": [load0, os.getloadavg()[0]], "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA"),
    }  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{embedder.name}: {n} {args.variant!r} documents at {kb.doc_budget_tokens} tokens "
          f"(mean {result['mean_tokens'] or 0:.1f}) in {wall:.1f} s wall, {cpu:.1f} s CPU "
          f"({n / wall:.1f} docs/s; load {load0:.1f})")
    print("| part | seconds | share of the build |\n| --- | --- | --- |")
    for name, s in parts.items():
        print(f"| {name} | {s:.2f} | {100 * s / wall:.1f} % |")
    print(f"padding: {result['padding'] or 0:.3f} padded tokens per real token; FAISS open: {faiss_s:.3f} s")


if __name__ == "__main__":
    main()
