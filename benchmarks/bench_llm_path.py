"""Questions per minute of AF-Retriever steps 1-8 with the offline LM: an older revision against this one.

Each revision runs ``autofocus eval`` from its own source tree (a temporary ``git worktree`` of the
revision, or this working tree) in a fresh process, so it starts its own llama.cpp server exactly as a
user's run would, with a fresh DSPy answer cache (nothing answered from an earlier run). The levels are
interleaved (before c1, after c1, before c4, after c4, ...) so that a change in the machine's load hits
both revisions alike.

Throughput is counted between question completions: with ``c`` questions in flight, from the ``c``-th
completion to the last, so the server's start and the first questions' warm-up are not counted
(``questions_per_min = (n - c) / (t_last - t_c)``). Tokens per question come from the runs' traces:
``input`` is what the prompts held; ``evaluated`` subtracts what the server reused from its prompt cache
(where the revision records it). Rankings of the two revisions are compared question by question.

    .venv/bin/python benchmarks/bench_llm_path.py --before 4211fa9 --limit 12 --concurrency 1,4
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results" / "llm_path.json"


def source_tree(rev: str, tmp: Path) -> Path:
    """``.`` is this working tree; anything else is checked out into a temporary worktree."""
    if rev == ".":
        return ROOT
    where = tmp / f"src-{rev}"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(where), rev], check=True,
                   capture_output=True)  # fmt: skip
    return where


def run_eval(tree: Path, args: argparse.Namespace, concurrency: int, out: Path) -> float:
    """One ``autofocus eval`` of ``tree``'s code in a fresh process; returns its wall time."""
    env = {k: v for k, v in os.environ.items() if k != "AUTOFOCUS_LLM_SERVER"}  # its own server, cold
    env["PYTHONPATH"] = str(tree / "src")
    env["DSPY_CACHEDIR"] = str(out.parent / f"dspy-cache-{out.name}")
    cmd = [sys.executable, "-c", "from autofocus.cli import app; app()", "eval", "--skb", str(args.skb),
           "--split", args.split, "--limit", str(args.limit), "--out", str(out), "--system", args.system,
           "--lm", args.lm, "--reranker", args.reranker, "--concurrency", str(concurrency), "--no-progress"]  # fmt: skip
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, cwd=tree, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def summarise(out: Path, concurrency: int, wall: float) -> dict[str, Any]:
    records = [json.loads(line) for line in (out / "traces.jsonl").read_text().splitlines() if line.strip()]
    done = sorted(datetime.fromisoformat(r["finished_at"]).timestamp() for r in records)
    c = min(concurrency, len(done) - 1)
    span = done[-1] - done[c - 1]
    steps: dict[str, dict[str, float]] = {}
    for r in records:
        for name, rec in (r.get("trace") or {}).get("steps", {}).items():
            acc = steps.setdefault(name, {"lm_calls": 0.0, "input": 0.0, "cached": 0.0, "output": 0.0, "seconds": 0.0})
            acc["lm_calls"] += rec.get("lm_calls", 0)
            acc["input"] += rec.get("input_tokens", 0)
            acc["cached"] += rec.get("cached_tokens", 0)
            acc["output"] += rec.get("output_tokens", 0)
            acc["seconds"] += rec.get("seconds", 0.0)
    n = len(records)
    per_step = {s: {k: v / n for k, v in acc.items()} for s, acc in steps.items() if acc["lm_calls"]}
    total = {k: sum(s[k] for s in per_step.values()) for k in ("lm_calls", "input", "cached", "output")}
    return {
        "concurrency": concurrency, "questions": n, "wall_s": wall, "span_s": span,
        "questions_per_min": 60 * (n - c) / span if span > 0 else None,
        "question_s_median": float(np.median([r["seconds"] for r in records])),
        "lm_calls_per_question": total["lm_calls"], "input_tokens_per_question": total["input"],
        "evaluated_tokens_per_question": total["input"] - total["cached"],
        "output_tokens_per_question": total["output"], "per_step": per_step,
        "statuses": {s: sum(r["status"] == s for r in records) for s in {r["status"] for r in records}},
        "hit@1": float(np.mean([r.get("metrics", {}).get("hit@1", 0) for r in records])),
        "mrr": float(np.mean([r.get("metrics", {}).get("mrr", 0) for r in records])),
        "ranked": {str(r["id"]): r.get("ranked") for r in records},
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", default="4211fa9", help="the older revision (a git rev)")
    parser.add_argument("--after", default=".", help="the newer one ('.': this working tree)")
    parser.add_argument("--skb", type=Path, default=ROOT / "data" / "demo")
    parser.add_argument("--split", default="test")
    parser.add_argument("--limit", type=int, default=12)
    parser.add_argument("--concurrency", default="1,4")
    parser.add_argument("--system", default="afr")
    parser.add_argument("--reranker", default="pointwise")
    parser.add_argument("--lm", default="local")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--keep", type=Path, default=None, help="keep the runs in this directory")
    args = parser.parse_args()
    args.skb = args.skb.resolve()
    from rich.console import Console
    from rich.table import Table

    console = Console()
    levels = [int(c) for c in args.concurrency.split(",")]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-llm-path-") as tmpdir:
        tmp = Path(tmpdir)
        runs = args.keep.resolve() if args.keep else tmp / "runs"
        trees = {"before": source_tree(args.before, tmp), "after": source_tree(args.after, tmp)}
        try:
            for c in levels:
                for label, tree in trees.items():
                    out = runs / f"{label}-c{c}"
                    console.print(f"{label} ({getattr(args, label)}), concurrency {c} ...")
                    wall = run_eval(tree, args, c, out)
                    rows.append({"revision": label, "rev": getattr(args, label), **summarise(out, c, wall)})
                    console.print(f"  {rows[-1]['questions_per_min']:.2f} questions/min")
        finally:
            for tree in trees.values():
                if tree != ROOT:
                    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
    for c in levels:
        before, after = (next(r for r in rows if r["revision"] == v and r["concurrency"] == c) for v in ("before", "after"))
        same = sum(after["ranked"].get(q) == r for q, r in before["ranked"].items())
        after["speedup"] = after["questions_per_min"] / before["questions_per_min"]
        after["same_ranking_as_before"] = f"{same}/{len(before['ranked'])}"
    result = {"command": " ".join(["python benchmarks/bench_llm_path.py", *sys.argv[1:]]), "skb": str(args.skb),
              "split": args.split, "limit": args.limit, "system": args.system, "reranker": args.reranker,
              "cpus": os.cpu_count(), "load_avg_end": os.getloadavg(), "rows": rows}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    table = Table(title=f"{args.system}, reranker {args.reranker}, first {args.limit} {args.split} questions, {args.lm}")
    for col in ("revision", "c", "questions/min", "speed-up", "s/q median", "LM calls/q", "tokens in/q",
                "evaluated/q", "out/q", "hit@1", "MRR"):  # fmt: skip
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(f"{r['revision']} {r['rev']}", str(r["concurrency"]), f"{r['questions_per_min']:.2f}",
                      f"{r['speedup']:.2f}x" if "speedup" in r else "", f"{r['question_s_median']:.1f}",
                      f"{r['lm_calls_per_question']:.1f}", f"{r['input_tokens_per_question']:,.0f}",
                      f"{r['evaluated_tokens_per_question']:,.0f}", f"{r['output_tokens_per_question']:,.0f}",
                      f"{r['hit@1']:.2f}", f"{r['mrr']:.3f}")  # fmt: skip
    console.print(table)
    console.print(f"load average {tuple(round(x, 2) for x in os.getloadavg())} on {os.cpu_count()} CPUs; wrote {args.out}")


if __name__ == "__main__":
    main()
