"""What a shorter document costs the embedder: the same nodes' documents at several budgets, side by side.

Arms (one backend, the ``auto`` one unless ``--backend``): documents rendered at each ``--budgets`` value
(the renderer's budget: characters over ``CHARS_PER_TOKEN``) and read up to the model's input length
(MiniLM: 256 word pieces), and with ``--cut`` the first budget's documents read up to that many word
pieces only (the model's trained length). Every arm embeds its texts through the index build's
length-sorted batches, in rounds in one process, the arms' order reversed every other round; reported:
the word pieces the model reads (mean, share over 128) and each arm's speed relative to the first
(median and range of the rounds): on a shared machine the ratio is what to trust.

    python benchmarks/bench_doc_budget.py --skb data/demo --budgets 128,64 --cut 128
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from autofocus.index.embedders import DEFAULT_EMBEDDER, get_embedder, packaged_minilm_path, split_backend
from autofocus.index.exported_encoder import LengthBatchedEncoder
from autofocus.skb.documents import render_documents
from autofocus.skb.io import load_skb

RESULTS = Path(__file__).parent / "results" / "doc_budget.json"


def encoder(backend: str, max_seq_length: int) -> LengthBatchedEncoder:
    """The packaged MiniLM on ``backend`` (an exported one) reading at most ``max_seq_length`` word pieces."""
    from autofocus.index.onnx_model import OnnxEncoder
    from autofocus.index.openvino_model import OpenVinoEncoder

    kind = OpenVinoEncoder if backend.startswith("openvino") else OnnxEncoder
    return kind(packaged_minilm_path(), backend, max_seq_length)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skb", type=Path, default=Path("data/demo"))
    parser.add_argument("--variant", default="text+rel")
    parser.add_argument("--budgets", default="128,64", help="document budgets, the first the reference")
    parser.add_argument("--cut", type=int, default=None, help="also the first budget read up to this many word pieces")
    parser.add_argument("--docs", type=int, default=128, help="seeded nodes per arm and round")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--backend", default=None, help="an exported backend (default: auto's)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    backend = args.backend or split_backend(get_embedder(DEFAULT_EMBEDDER).name)[1]
    skb = load_skb(args.skb, progress=False)
    ids = np.sort(np.random.default_rng(0).choice(skb.num_nodes, size=min(args.docs, skb.num_nodes), replace=False))
    budgets = [int(b) for b in args.budgets.split(",")]
    full = encoder(backend, 256)
    arms: dict[str, tuple[LengthBatchedEncoder, list[str]]] = {
        f"budget {b}": (full, render_documents(skb, ids, args.variant, b)) for b in budgets}
    if args.cut:
        arms[f"budget {budgets[0]}, cut at {args.cut} word pieces"] = (encoder(backend, args.cut), arms[f"budget {budgets[0]}"][1])
    run: dict[str, Callable[[], np.ndarray]] = {name: (lambda e=e, t=t: e.encode(t, 64)) for name, (e, t) in arms.items()}
    for fn in run.values():
        fn()  # warm-up: export, compile
    wall: dict[str, list[float]] = {a: [] for a in run}
    for r in range(args.rounds):
        for name in list(run) if r % 2 == 0 else list(run)[::-1]:
            t0 = time.perf_counter()
            run[name]()
            wall[name].append(time.perf_counter() - t0)
    ref = next(iter(run))
    rows = {}
    for name, (enc, texts) in arms.items():
        pieces = np.array([len(e.ids) for e in enc.tokenizer.encode_batch(texts)])
        ratio = np.asarray(wall[ref]) / np.asarray(wall[name])
        rows[name] = {"mean_pieces": float(pieces.mean()), "share_over_128": float((pieces > 128).mean()),
                      "docs_per_s": len(texts) / float(np.median(wall[name])), "speed_vs_first": float(np.median(ratio)),
                      "ratio_range": [float(ratio.min()), float(ratio.max())]}  # fmt: skip
    result = {"command": "python benchmarks/bench_doc_budget.py " + " ".join(
        f"--{k} {v}" for k, v in vars(args).items() if v is not None and k != "out"),
        "backend": backend, "nodes": len(ids), "load_avg_1min": os.getloadavg()[0], "rows": rows}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{len(ids)} {args.variant!r} documents, {backend}, {args.rounds} rounds")
    print("| arm | word pieces read (mean) | over 128 | docs/s | speed vs first (median, range) |\n| --- | --- | --- | --- | --- |")
    for name, row in rows.items():
        lo, hi = row["ratio_range"]
        print(f"| {name} | {row['mean_pieces']:.1f} | {100 * row['share_over_128']:.0f} % | {row['docs_per_s']:.1f} | "
              f"{row['speed_vs_first']:.2f} ({lo:.2f}-{hi:.2f}) |")


if __name__ == "__main__":
    main()
