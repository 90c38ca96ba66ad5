"""Fault-injection probe of ``autofocus eval`` (docs/guide.md, "Reliability"; results in docs/results.md), on the demo SKB by default.

1. Faulty server: AF-Retriever's LM is the scripted stand-in of ``tests/fake_openai_server.py``; each
   request draws, from a seeded generator, an outage (HTTP 503, a hang past the LM timeout, an empty
   answer, a 500 whose message echoes the API key), a 1.2 MB garbage answer, or a valid answer. The
   run is then resumed against the healthy server until nothing is left to do.
2. kill -9: ``autofocus eval`` in a subprocess is killed once some lines are written, then resumed.

It reports the faults injected, the questions answered, the degraded share, the passes a resume
needed, lost or duplicated questions, the largest trace line and whether the key reached a file.

    .venv/bin/python benchmarks/probe_faults.py --limit 50
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_throughput import scripted_reply  # noqa: E402
from tests.fake_openai_server import FakeOpenAIServer  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "faults.json"
KEY = "sk-probe-0123456789abcdefghijklmn"
FAULTS = {"503": 0.12, "hang": 0.03, "empty answer": 0.05, "echoed key": 0.03, "garbage": 0.03}


class Faulty:
    """Answers as ``scripted_reply`` does, or injects a fault drawn per request (thread-safe, seeded)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.on = True
        self.injected: Counter[str] = Counter()
        self.release = threading.Event()

    def __call__(self, body: dict[str, Any]) -> Any:
        with self.lock:
            draw, fault = self.rng.random(), None
            if self.on:
                for name, p in FAULTS.items():
                    if draw < p:
                        fault = name
                        break
                    draw -= p
            if fault:
                self.injected[fault] += 1
        if fault == "503":
            return {"json": {"error": {"message": "upstream overloaded"}}, "status": 503}
        if fault == "hang":
            self.release.wait(120)
        if fault == "empty answer":
            return ""
        if fault == "echoed key":
            return {"json": {"error": {"message": f"bad request with key {KEY}"}}, "status": 500}
        if fault == "garbage":
            return "ý{[" * 400_000
        return scripted_reply(body)


def eval_once(skb: Path, split: str, limit: int, out: Path, lm_timeout: float, concurrency: int) -> Any:
    """What ``autofocus eval`` runs, in this process, through the public API; the call's ``EvalResult``."""
    import autofocus
    from autofocus.runtime import with_waits

    cfg = with_waits(autofocus.load_config(None, "openai/fake-model", concurrency=concurrency), lm_timeout, 1)
    program = autofocus.open(skb, "afr", config=cfg)
    return autofocus.evaluate(program, split, out, limit=limit).result


def summary(out: Path) -> dict[str, Any]:
    from autofocus.evaluation.traces import latest_by_id, read_traces

    records, _ = read_traces(out / "traces.jsonl", repair=False)
    latest = latest_by_id(records)
    text = (out / "traces.jsonl").read_text()
    return {
        "lines": len(records), "questions": len(latest), "status": dict(Counter(r["status"] for r in latest.values())),
        "largest_line_bytes": max(len(line.encode()) for line in text.splitlines()), "key_in_traces": KEY in text,
    }  # fmt: skip


def kill9(skb: Path, split: str, limit: int, out: Path, api_base: str, after_lines: int) -> dict[str, Any]:
    """Run the CLI in a subprocess, kill -9 it once ``after_lines`` lines are written, resume here."""
    env = {**os.environ, "AUTOFOCUS_LM_API_BASE": api_base, "AUTOFOCUS_LM_API_KEY": KEY,
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-c", "from autofocus.cli import app; app()", "eval", "--skb", str(skb), "--split", split, "--limit", str(limit),
           "--out", str(out), "--system", "afr", "--lm", "openai/fake-model", "--concurrency", "1", "--no-progress"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    traces = out / "traces.jsonl"
    deadline = time.monotonic() + 600
    while proc.poll() is None and time.monotonic() < deadline:
        if traces.exists() and traces.read_bytes().count(b"\n") >= after_lines:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = traces.read_bytes().count(b"\n") if traces.exists() else 0
    return {"lines_when_killed": killed_at}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skb", type=Path, default=ROOT / "data" / "demo")
    parser.add_argument("--split", default="test")
    parser.add_argument("--limit", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--lm-timeout", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    import dspy

    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    os.environ["AUTOFOCUS_LM_API_KEY"] = KEY
    faulty = Faulty(args.seed)
    result: dict[str, Any] = {"command": " ".join(["python benchmarks/probe_faults.py", *sys.argv[1:]]),
                              "skb": os.path.relpath(args.skb, ROOT), "split": args.split, "limit": args.limit, "fault_rates": FAULTS}  # fmt: skip
    with FakeOpenAIServer(faulty) as server, tempfile.TemporaryDirectory(prefix="probe-faults-") as tmp:
        os.environ["AUTOFOCUS_LM_API_BASE"] = server.api_base
        out = Path(tmp) / "faulty"
        start = time.perf_counter()
        first = eval_once(args.skb, args.split, args.limit, out, args.lm_timeout, args.concurrency)
        result["faulty_pass"] = {"seconds": time.perf_counter() - start, "finished": first.finished,
                                 "degraded": first.degraded, "errors": first.errors,
                                 "requests": server.request_count, "faults_injected": dict(faulty.injected),
                                 **summary(out)}  # fmt: skip
        faulty.on = False
        faulty.release.set()
        passes = 0
        while True:
            passes += 1
            res = eval_once(args.skb, args.split, args.limit, out, args.lm_timeout, args.concurrency)
            if res.complete or passes == 5:
                break
        result["resumed"] = {"passes": passes, "retried": res.finished, **summary(out)}

        killed = Path(tmp) / "killed"
        result["kill9"] = kill9(args.skb, args.split, args.limit, killed, server.api_base, after_lines=args.limit // 3)
        res = eval_once(args.skb, args.split, args.limit, killed, args.lm_timeout, args.concurrency)
        result["kill9"].update(resumed=res.finished, skipped=res.skipped, complete=res.complete, **summary(killed))
    print(json.dumps(result, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
