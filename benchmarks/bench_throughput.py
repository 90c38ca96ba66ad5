"""Questions per minute of ``autofocus eval`` against one OpenAI-compatible server at several concurrencies.

Runs what ``autofocus eval`` runs (``runtime.assemble`` -> ``build_manifest`` -> ``run_eval`` with the real
program from the registry, its LMs from ``config.runtime.lm``) over the first ``--limit`` questions of a split,
once per concurrency (``--concurrency 1,4,16``), with the DSPy answer cache off so every level makes
its own LM calls. Question embeddings are warmed by an untimed first pass, so each level sees the same
caches.

Server: by default the scripted stand-in of ``tests/fake_openai_server.py`` with ``--latency`` seconds per
request (simulating a remote server; it answers every signature of the program: target type, Cypher,
listwise ranking, pointwise score, pairwise choice). With ``--base-url`` (e.g. llama.cpp's
``http://127.0.0.1:8080/v1``) and ``--lm`` (e.g. ``openai/qwen``) it measures that server instead; this
script never starts a local model.

Besides questions/minute it reports, from a DSPy callback on the client side, how many LM calls were
in flight on average (the sum of call durations over the wall time): with a remote server that is
the number the server was kept busy with. Each level's rankings are compared with the first level's:
with a deterministic server, concurrency must not change any answer (no state shared by threads).

    .venv/bin/python benchmarks/bench_throughput.py                               # fake server, 300 ms
    .venv/bin/python benchmarks/bench_throughput.py --reranker pointwise --limit 32
    .venv/bin/python benchmarks/bench_throughput.py --base-url http://127.0.0.1:8080/v1 --lm openai/local
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from dspy.utils.callback import BaseCallback

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/fake_openai_server.py

from tests.fake_openai_server import FakeOpenAIServer, chat_adapter_reply  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "throughput.json"
DEMO_CYPHER = 'MATCH (m:module {name: "json"})<-[:function_defined_in_module]-(y:function) RETURN y.name'


def scripted_reply(body: dict[str, Any]) -> str:
    """An answer in ChatAdapter format for whichever signature the request is for."""
    system = body["messages"][0]["content"] if body.get("messages") else ""
    user = body["messages"][-1]["content"] if body.get("messages") else ""
    user = user if isinstance(user, str) else json.dumps(user)
    ids = [int(x) for x in re.findall(r"\[(\d+)\]", user)]
    if "`target_type`" in system.split("Your output fields are", 1)[-1]:
        return chat_adapter_reply(target_type="function")
    if "`cypher`" in system:
        return chat_adapter_reply(cypher=DEMO_CYPHER)
    if "`ranking`" in system:
        return chat_adapter_reply(ranking=json.dumps(ids))
    if "`better_id`" in system:
        return chat_adapter_reply(better_id=str(ids[0] if ids else 0))
    if "`score`" in system:
        return chat_adapter_reply(score="0.5")
    return chat_adapter_reply(answer="unknown")


class InFlight(BaseCallback):
    """Client-side LM call intervals: how busy the server was kept."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open: dict[str, float] = {}
        self.durations: list[float] = []
        self.now = 0
        self.peak = 0

    def reset(self) -> None:
        with self.lock:
            self.open.clear()
            self.durations.clear()
            self.now = self.peak = 0

    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        with self.lock:
            self.open[call_id] = time.perf_counter()
            self.now += 1
            self.peak = max(self.peak, self.now)

    def on_lm_end(self, call_id: str, outputs: Any, exception: Exception | None = None) -> None:
        with self.lock:
            start = self.open.pop(call_id, None)
            self.now -= 1
            if start is not None:
                self.durations.append(time.perf_counter() - start)


def run_level(kb_for: Any, system: str, cfg: Any, items: list[Any], out: Path, meter: InFlight) -> dict[str, Any]:
    """One ``autofocus eval`` run at ``cfg.runtime.concurrency``; returns wall time, throughput and call stats."""
    import numpy as np

    from autofocus import runtime
    from autofocus.console import RichReporter
    from autofocus.evaluation.program_runs import index_checksums
    from autofocus.evaluation.runner import build_manifest, run_eval
    from autofocus.evaluation.traces import read_traces
    from autofocus.index.store import skb_fingerprint
    from autofocus.program.systems.base import program_copy

    system, cfg = runtime.resolve_system(system, cfg)
    kb = kb_for(cfg.index.embedder, cfg.index.index_kind, cfg.index.doc_budget_tokens)
    program = runtime.assemble(system, kb, cfg, lms="lazy")  # each thread's copy attaches its LMs

    def factory() -> Any:
        return program_copy(program)

    manifest = build_manifest(system=system, config=cfg, split="bench", skb_fingerprint=skb_fingerprint(kb.skb),
                              index_checksums=index_checksums(kb, cfg))  # fmt: skip
    meter.reset()
    t0 = time.perf_counter()
    with RichReporter() as reporter:
        result = run_eval(factory, items, out, manifest=manifest, concurrency=cfg.runtime.concurrency, resume=False,
                          skb=kb.skb, reporter=reporter)  # fmt: skip
    wall = time.perf_counter() - t0
    records, _ = read_traces(out / "traces.jsonl")
    seconds = [r["seconds"] for r in records]
    calls = [sum(s.get("lm_calls", 0) for s in (r.get("trace") or {}).get("steps", {}).values()) for r in records]
    return {
        "concurrency": cfg.runtime.concurrency, "questions": result.total, "errors": result.errors, "wall_s": wall,
        "questions_per_min": 60 * result.finished / wall,
        "question_s_median": float(np.median(seconds)), "question_s_p95": float(np.percentile(seconds, 95)),
        "lm_calls_per_question": float(np.mean(calls)), "lm_calls": len(meter.durations),
        "lm_call_s_median": float(np.median(meter.durations)) if meter.durations else None,
        "mean_calls_in_flight": sum(meter.durations) / wall, "peak_calls_in_flight": meter.peak,
        "hit@1": float(np.mean([r["metrics"]["hit@1"] for r in records if r["status"] == "ok"] or [0])),
        "ranked": {str(r["id"]): r.get("ranked") for r in records},
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skb", type=Path, default=ROOT / "data" / "demo", help="SKB (built if it is the demo path and missing)")
    parser.add_argument("--split", default="test")
    parser.add_argument("--limit", type=int, default=None, help="questions per level (default: the whole split)")
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--system", default="afr")
    parser.add_argument("--reranker", default=None, help="auto (default: listwise for a hosted LM), pointwise, ...")
    parser.add_argument("--latency", type=float, default=0.3, help="seconds per request of the stand-in server")
    parser.add_argument("--base-url", default=None, help="a real OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1")
    parser.add_argument("--lm", default=None, help="LM spec for --base-url, e.g. openai/<model alias>; or local")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    from autofocus.lm import get_lm, is_local_spec

    local = args.lm is not None and is_local_spec(args.lm)
    if (args.base_url is None) != (args.lm is None) and not local:
        parser.error("--base-url and --lm go together (or --lm local: the offline model's managed server)")

    import dspy
    from rich.console import Console
    from rich.table import Table

    from autofocus.runtime import kb_opener, load_config
    from autofocus.skb.qa import load_qa

    console = Console(width=max(Console().width, 110))
    if not args.skb.exists() and args.skb == ROOT / "data" / "demo":
        from autofocus.demo.build import build_demo_skb

        console.print(f"building the demo SKB into {args.skb} (a few minutes)")
        build_demo_skb(args.skb, warn=False)
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    meter = InFlight()
    dspy.configure(callbacks=[*(dspy.settings.get("callbacks") or []), meter])
    items = load_qa(args.skb, args.split)[: args.limit]
    levels = [int(c) for c in args.concurrency.split(",")]
    server = None
    if local and args.base_url is None:  # autofocus's own llama.cpp server, started here, stopped at exit
        served = get_lm(args.lm)
        base_url, lm = served.kwargs["api_base"], served.model
        os.environ["AUTOFOCUS_LM_API_KEY"] = served.kwargs["api_key"]  # the server asks its key of every request
    elif args.base_url is None:
        server = FakeOpenAIServer(scripted_reply, latency=args.latency).start()
        base_url, lm = server.api_base, "openai/fake-model"
    else:
        base_url, lm = args.base_url, args.lm
    os.environ["AUTOFOCUS_LM_API_BASE"] = base_url
    kb_for = kb_opener(args.skb)
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-throughput-") as tmp:
            warm = load_config(None, lm=lm, reranker=args.reranker, concurrency=max(levels))
            console.print("untimed warm-up pass (index, question embeddings)")
            run_level(kb_for, args.system, warm, items, Path(tmp) / "warmup", meter)
            for c in levels:
                cfg = load_config(None, lm=lm, reranker=args.reranker, concurrency=c)
                rows.append(run_level(kb_for, args.system, cfg, items, Path(tmp) / f"c{c}", meter))
                same = [rows[-1]["ranked"].get(q) == r for q, r in rows[0]["ranked"].items()]
                rows[-1]["same_ranking_as_first_level"] = f"{sum(same)}/{len(same)}"  # threads share no state
                console.print(f"concurrency {c}: {rows[-1]['questions_per_min']:.1f} questions/min")
    finally:
        if server is not None:
            server.stop()
    result = {
        "command": " ".join(["python benchmarks/bench_throughput.py", *sys.argv[1:]]),
        "server": "fake (tests/fake_openai_server.py)" if server else base_url, "lm": lm,
        "latency_s": args.latency if server else None, "skb": str(args.skb), "split": args.split,
        "system": args.system, "reranker": args.reranker or "auto", "cpus": os.cpu_count(),
        "load_avg": os.getloadavg(), "levels": rows,
    }  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    where = f"stand-in server, {args.latency * 1e3:.0f} ms per request" if server else f"{base_url} ({lm})"
    table = Table(title=f"autofocus eval throughput: {args.system} (reranker {args.reranker or 'auto'}), "
                        f"{len(items)} {args.split} questions, {where}")  # fmt: skip
    for col in ("concurrency", "questions/min", "speed-up", "s/question (p95)", "LM calls/q", "in flight (peak)",
                "errors", "same ranking"):  # fmt: skip
        table.add_column(col, justify="right")
    base = rows[0]["questions_per_min"] if rows else 1.0
    for r in rows:
        table.add_row(str(r["concurrency"]), f"{r['questions_per_min']:.1f}", f"{r['questions_per_min'] / base:.1f}x",
                      f"{r['question_s_median']:.2f} ({r['question_s_p95']:.2f})", f"{r['lm_calls_per_question']:.1f}",
                      f"{r['mean_calls_in_flight']:.1f} ({r['peak_calls_in_flight']})", str(r["errors"]),
                      r["same_ranking_as_first_level"])  # fmt: skip
    console.print(table)
    console.print(f"load average {tuple(round(x, 2) for x in os.getloadavg())} on {os.cpu_count()} CPUs; wrote {args.out}")


if __name__ == "__main__":
    main()
