"""Questions per minute of AF-Retriever with the offline LM: an older revision against this one, alternating.

Each revision runs ``autofocus eval`` from its own source tree (``git archive`` of the revision into a
temporary folder, or this working tree) in a fresh process, so it starts its own LM server exactly as a
user's run would, with a fresh DSPy answer cache (nothing answered from an earlier run). The arms are
interleaved (for each SKB and step range: before, after, before, ...) so that a change in the machine's
load hits both revisions alike; the load average is recorded beside each arm.

Throughput is counted between question completions: with ``c`` questions in flight, from the ``c``-th
completion to the last, so the server's start and the first questions' warm-up are not counted
(``questions_per_min = (n - c) / (t_last - t_c)``). Tokens per question come from the runs' traces:
``input`` is what the prompts held; ``evaluated`` subtracts what the server reused from its prompt cache
(where the revision records it); ``output`` is what it generated. Rankings of the two revisions are compared
question by question.

    .venv/bin/python benchmarks/bench_llm_path.py --before f253bdc --skb data/demo --steps 1-7:16,1-8:8 --concurrency 4
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results" / "llm_path.json"


def source_tree(rev: str, tmp: Path) -> Path:
    """``.`` is this working tree, a directory is a source tree as it stands (a worktree with local
    changes); anything else is exported (``git archive``) into a temporary folder."""
    if rev == ".":
        return ROOT
    if Path(rev).is_dir():
        return Path(rev).resolve()
    where = tmp / f"src-{rev}"
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(where, filter="data")
    return where


def run_eval(tree: Path, args: argparse.Namespace, skb: Path, steps: str, limit: int, concurrency: int, out: Path,
             extra_env: dict[str, str]) -> float:
    """One ``autofocus eval`` of ``tree``'s code in a fresh process; returns its wall time."""
    env = {k: v for k, v in os.environ.items() if k != "AUTOFOCUS_LLM_SERVER"}  # its own server, cold
    env.update(extra_env)
    env["PYTHONPATH"] = str(tree / "src")
    env["DSPY_CACHEDIR"] = str(out.parent / f"dspy-cache-{out.name}")
    cmd = [sys.executable, "-c", "from autofocus.cli import app; app()", "eval", "--skb", str(skb),
           "--split", args.split, "--limit", str(limit), "--out", str(out), "--system", args.system, "--steps", steps,
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
    per_step = {s: {k: v / n for k, v in acc.items()} for s, acc in steps.items()}
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
    parser.add_argument("--before", default="f253bdc", help="the older revision (a git rev or a source tree's directory)")
    parser.add_argument("--after", default=".", help="the newer one ('.': this working tree)")
    parser.add_argument("--env-before", action="append", default=[], metavar="KEY=VALUE",
                        help="environment of the before arm (e.g. AUTOFOCUS_LLM_PARALLEL=1: one slot, one request at a time)")
    parser.add_argument("--env-after", action="append", default=[], metavar="KEY=VALUE", help="environment of the after arm")
    parser.add_argument("--skb", type=Path, action="append", help="SKB directory (repeatable; default data/demo)")
    parser.add_argument("--split", default="test")
    parser.add_argument("--steps", default="1-7:16,1-8:8", help="step ranges with their question counts")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=1, help="before/after pairs per SKB and step range")
    parser.add_argument("--system", default="afr")
    parser.add_argument("--reranker", default="pointwise")
    parser.add_argument("--lm", default="local")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--keep", type=Path, default=None, help="keep the runs in this directory")
    args = parser.parse_args()
    skbs = [p.resolve() for p in (args.skb or [ROOT / "data" / "demo"])]
    plan = [(steps, int(limit)) for steps, limit in (part.split(":") for part in args.steps.split(","))]
    from rich.console import Console
    from rich.table import Table

    console = Console()
    c = args.concurrency
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-llm-path-") as tmpdir:
        tmp = Path(tmpdir)
        runs = args.keep.resolve() if args.keep else tmp / "runs"
        trees = {"before": source_tree(args.before, tmp), "after": source_tree(args.after, tmp)}
        for skb in skbs:
            for steps, limit in plan:
                for rep in range(args.repeats):
                    for label, tree in trees.items():
                        out = runs / f"{skb.name}-{steps}-{label}-{rep}"
                        load = os.getloadavg()
                        console.print(f"{skb.name} steps {steps}: {label} ({getattr(args, label)}), {limit} questions, "
                                      f"load {load[0]:.1f} ...")  # fmt: skip
                        extra = dict(kv.split("=", 1) for kv in getattr(args, f"env_{label}"))
                        wall = run_eval(tree, args, skb, steps, limit, c, out, extra)
                        rows.append({"skb": skb.name, "steps": steps, "repeat": rep, "revision": label,
                                     "rev": getattr(args, label), "env": extra, "load_avg_start": load, "load_avg_end": os.getloadavg(),
                                     **summarise(out, c, wall)})  # fmt: skip
                        console.print(f"  {rows[-1]['questions_per_min']:.2f} questions/min")
    for row in rows:
        if row["revision"] != "after":
            continue
        before = next(r for r in rows if r["revision"] == "before" and
                      (r["skb"], r["steps"], r["repeat"]) == (row["skb"], row["steps"], row["repeat"]))  # fmt: skip
        same = sum(row["ranked"].get(q) == r for q, r in before["ranked"].items())
        row["speedup"] = row["questions_per_min"] / before["questions_per_min"]
        row["speedup_wall"] = before["wall_s"] / row["wall_s"]
        row["same_ranking_as_before"] = f"{same}/{len(before['ranked'])}"
    result = {"command": " ".join(["python benchmarks/bench_llm_path.py", *sys.argv[1:]]), "skbs": [str(s) for s in skbs],
              "split": args.split, "system": args.system, "reranker": args.reranker, "concurrency": c,
              "cpus": os.cpu_count(), "rows": rows}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    table = Table(title=f"{args.system}, reranker {args.reranker}, {args.split} questions, {args.lm}, concurrency {c}")
    for col in ("SKB", "steps", "revision", "q", "load", "wall", "wall speed-up", "questions/min", "speed-up",
                "same ranking", "s/q median",
                "LM calls/q", "tokens in/q", "evaluated/q", "out/q", "hit@1", "MRR"):  # fmt: skip
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(r["skb"], r["steps"], f"{r['revision']} {r['rev']}", str(r["questions"]),
                      f"{r['load_avg_start'][0]:.1f}-{r['load_avg_end'][0]:.1f}", f"{r['wall_s']:.0f} s",
                      f"{r['speedup_wall']:.2f}x" if "speedup_wall" in r else "", f"{r['questions_per_min']:.2f}",
                      f"{r['speedup']:.2f}x" if "speedup" in r else "", r.get("same_ranking_as_before", ""),
                      f"{r['question_s_median']:.1f}", f"{r['lm_calls_per_question']:.1f}",
                      f"{r['input_tokens_per_question']:,.0f}", f"{r['evaluated_tokens_per_question']:,.0f}",
                      f"{r['output_tokens_per_question']:,.0f}", f"{r['hit@1']:.2f}", f"{r['mrr']:.3f}")  # fmt: skip
    console.print(table)
    for r in rows:
        steps = ", ".join(f"{name} {v['seconds']:.1f} s" for name, v in sorted(r["per_step"].items()))
        console.print(f"{r['skb']} {r['steps']} {r['revision']}: seconds per question by step: {steps}")
    console.print(f"load average {tuple(round(x, 2) for x in os.getloadavg())} on {os.cpu_count()} CPUs; wrote {args.out}")


if __name__ == "__main__":
    main()
