"""Step 8's yes/no scoring from the packaged Q4_K_M weights against their bf16 copy.

Two parts:

* **kernels**: llama.cpp tokens per second (of any other file types named with ``--also`` too) for the shape of step 8 (a shared 60-token prefix, then ten
  130-token candidate tails, each evaluated from the prefix's KV cache) and for generation (one token
  at a time), with each weights file, in this process, 2 threads, ``use_mmap=False`` as the server runs;
* **agreement** (``--runs A B``): two ``autofocus eval`` runs of the same questions with steps 1-2
  replayed, one per weights setting (``AUTOFOCUS_LLM_SCORING_WEIGHTS=model`` / ``bf16``): per question,
  the P(yes) of the same candidates side by side (largest difference, rank correlation), whether the
  first candidate and the whole order agree.

    .venv/bin/python benchmarks/bench_scoring_weights.py --runs runs/yn2-test runs/bf16-test --also q8_0 q4_0 iq4_nl
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import spearmanr

from autofocus.local_lm import scoring_weights
from autofocus.local_lm.models import resolve_local

RESULTS = Path(__file__).parent / "results" / "scoring_weights.json"


def kernel_speeds(path: Path, rounds: int, threads: int) -> dict[str, Any]:
    import llama_cpp

    llm = llama_cpp.Llama(str(path), n_ctx=4096, n_threads=threads, n_threads_batch=threads, n_batch=512,
                          use_mmap=False, verbose=False)  # fmt: skip
    tokens = [int(t) for t in np.random.default_rng(0).integers(1000, 30000, 2000)]
    prefill, generate = [], []
    for _ in range(rounds):
        llm.reset()
        llm.eval(tokens[:60])
        t0 = time.perf_counter()
        for i in range(10):
            llm.n_tokens = 60
            llm.eval(tokens[60 + 130 * i : 60 + 130 * (i + 1)])
        prefill.append(1300 / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        for tok in tokens[:32]:
            llm.eval([tok])
        generate.append(32 / (time.perf_counter() - t0))
    del llm
    return {"file": path.name, "bytes": path.stat().st_size, "step8_tokens_per_s": prefill,
            "generate_tokens_per_s": generate}  # fmt: skip


def _scores(run: Path) -> dict[str, dict[int, float]]:
    out = {}
    for line in (run / "traces.jsonl").open():
        row = json.loads(line)
        rerank = row.get("trace", {}).get("data", {}).get("rerank") or {}
        ids, scores = rerank.get("input", []), rerank.get("scores", [])
        if scores:
            out[str(row["id"])] = dict(zip(ids[: len(scores)], scores, strict=True))
    return out


def agreement(a: Path, b: Path) -> dict[str, Any]:
    left, right = _scores(a), _scores(b)
    diffs, rhos, same_top, same_order, n = [], [], 0, 0, 0
    for qid in sorted(set(left) & set(right)):
        if set(left[qid]) != set(right[qid]):  # steps 1-7 differ: not the same candidates
            continue
        ids = sorted(left[qid])
        x, y = np.array([left[qid][i] for i in ids]), np.array([right[qid][i] for i in ids])
        n += 1
        diffs.append(float(np.abs(x - y).max()))
        if len(ids) > 2 and x.std() > 0 and y.std() > 0:
            rhos.append(float(spearmanr(x, y).statistic))
        order_x = sorted(ids, key=lambda i: -left[qid][i])
        order_y = sorted(ids, key=lambda i: -right[qid][i])
        same_top += order_x[0] == order_y[0]
        same_order += order_x == order_y
    return {
        "runs": [str(a), str(b)], "questions": n,
        "max_abs_p_yes_diff": {"median": statistics.median(diffs), "max": max(diffs)} if diffs else None,
        "spearman": {"median": statistics.median(rhos), "min": min(rhos)} if rhos else None,
        "same_first": same_top, "same_order": same_order,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="local", help="local, local-small or local:/file.gguf")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", nargs=2, type=Path, default=None, help="two eval runs: model weights, bf16 copy")
    parser.add_argument("--also", nargs="*", default=[], metavar="FORMAT",
                        help="other llama.cpp file types to measure too (q8_0 q4_0 iq4_nl ...), converted into a temporary folder")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    import llama_cpp  # the local-lm extra: only once the arguments are read, so --help needs none

    model = resolve_local(args.model)
    copy = scoring_weights.convert_bf16(model.path, scoring_weights.copy_path(model.name, model.sha256))
    result: dict[str, Any] = {
        "command": "python benchmarks/bench_scoring_weights.py " + " ".join(sys.argv[1:]),
        "bf16_kernels": scoring_weights.bf16_kernels(),
        "kernels": [kernel_speeds(p, args.rounds, args.threads) for p in (model.path, copy)],
    }
    with tempfile.TemporaryDirectory(dir=copy.parent) as tmp:
        for name in args.also:
            ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{name.upper()}")
            other = scoring_weights.convert(model.path, Path(tmp) / f"{model.name}.{name}.gguf", ftype)
            result["kernels"].append(kernel_speeds(other, args.rounds, args.threads))
    for row in result["kernels"]:
        print(f"{row['file']}: step-8 shape {statistics.median(row['step8_tokens_per_s']):.1f} tokens/s, "
              f"generation {statistics.median(row['generate_tokens_per_s']):.1f} tokens/s")  # fmt: skip
    if args.runs:
        result["agreement"] = agreement(*args.runs)
        print(json.dumps(result["agreement"], indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
