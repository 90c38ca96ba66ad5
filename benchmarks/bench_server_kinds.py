"""Prompt evaluation and generation speed of llama.cpp's server kinds, alternating: the prebuilt wheel
against a source build (``-march=native``), or any launcher ``AUTOFOCUS_LLAMA_SERVER`` can name, or
``llama-cpp-python`` (its Python server over the library that package compiled at install).

Each round starts each arm's server in turn (one slot, the run's thread count) and, ``--requests``
times, asks ``/v1/completions`` (which every kind serves) for one token after a fresh prompt of about
``--prompt-tokens`` tokens (each starts with a different line: nothing cached), then for
``--gen-tokens`` tokens after a short fresh prompt; then stops it. Arms alternate within each round
(and their order flips every round) so that a change in the machine's load hits both alike. Speeds are
tokens over wall-clock seconds of the request, the same measure for every kind: prompt tokens per
second of the first request, generated tokens per second of the second (its short prompt included);
medians per arm, the load average beside each.

    .venv/bin/python benchmarks/bench_server_kinds.py --arm wheel=wheel \\
        --arm native=$HOME/.cache/autofocus/bin/llama-server-0.3.36-<cpu key> --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results" / "server_kinds.json"
FILLER = ("A knowledge base holds typed nodes, each with a text document, and typed edges between them. "
          "A question names some nodes and asks for others that stand in given relations to them. ")  # fmt: skip


def _server(model: Path, launcher: str, args: argparse.Namespace) -> Any:
    from autofocus.local_lm.models import resolve_local
    from autofocus.local_lm.server import LocalServer
    from autofocus.local_lm.server_defaults import default_threads

    spec = resolve_local(f"local:{model}")
    n_ctx = args.prompt_tokens + args.gen_tokens + 256
    if launcher != "llama-cpp-python":
        os.environ["AUTOFOCUS_LLAMA_SERVER"] = launcher
        return LocalServer(spec.path, spec.alias, n_parallel=1, n_ctx=n_ctx)
    threads = str(default_threads())
    command = [sys.executable, "-m", "autofocus.local_lm.serve", "--model", str(spec.path), "--model_alias", spec.alias,
               "--port", "{port}", "--n_threads", threads, "--n_threads_batch", threads, "--n_ctx", str(n_ctx),
               "--use_mmap", "False", "--verbose", "False"]  # fmt: skip
    return LocalServer(spec.path, spec.alias, n_parallel=1, n_ctx=n_ctx, command=command)


def _timed(srv: Any, prompt: str, max_tokens: int) -> tuple[float, dict[str, int]]:
    body = {"model": srv.alias, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0}
    t0 = time.perf_counter()
    usage = srv.post("v1/completions", body, 900)["usage"]
    return time.perf_counter() - t0, usage


def one_round(model: Path, launcher: str, args: argparse.Namespace, salt: int) -> dict[str, Any]:
    srv = _server(model, launcher, args)
    t0 = time.perf_counter()
    srv.start()
    started = time.perf_counter() - t0
    try:
        prompt_tps, gen_tps = [], []
        repeat = max(1, args.prompt_tokens * 4 // len(FILLER))
        for i in range(args.requests):
            seconds, usage = _timed(srv, f"Request {salt}-{i}.\n" + FILLER * repeat + "\nIn short:", 1)
            prompt_tps.append(usage["prompt_tokens"] / seconds)
            evaluated = usage["prompt_tokens"]
            seconds, usage = _timed(srv, f"Request {salt}-{i}. Count from one to five hundred in words: one, two,",
                                    args.gen_tokens)  # fmt: skip
            gen_tps.append(usage["completion_tokens"] / seconds)
    finally:
        srv.stop()
    return {"start_s": started, "prompt_tokens": evaluated, "prompt_tps": prompt_tps, "gen_tps": gen_tps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arm", action="append", required=True, metavar="NAME=LAUNCHER",
                        help="an arm: AUTOFOCUS_LLAMA_SERVER's value (a binary, or 'wheel'), or 'llama-cpp-python'")
    parser.add_argument("--model", type=Path, default=None, help="GGUF file (default: the catalog's 'local')")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=2, help="requests per arm and round")
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--gen-tokens", type=int, default=64)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    from rich.console import Console
    from rich.table import Table

    from autofocus.local_lm.models import CATALOG

    model = args.model or CATALOG["local"].path
    arms = dict(arm.split("=", 1) for arm in args.arm)
    console = Console()
    rows: list[dict[str, Any]] = []
    for rnd in range(args.rounds):
        order = list(arms.items()) if rnd % 2 == 0 else list(arms.items())[::-1]
        for name, launcher in order:
            load = os.getloadavg()
            row = {"arm": name, "launcher": launcher, "round": rnd, "load_avg_start": load,
                   **one_round(model, launcher, args, rnd), "load_avg_end": os.getloadavg()}  # fmt: skip
            rows.append(row)
            console.print(f"round {rnd} {name}: prompt {statistics.median(row['prompt_tps']):.1f} tok/s, "
                          f"generation {statistics.median(row['gen_tps']):.2f} tok/s, load {load[0]:.1f}")  # fmt: skip
    summary = {}
    for name in arms:
        mine = [r for r in rows if r["arm"] == name]
        summary[name] = {"prompt_tps_median": statistics.median(t for r in mine for t in r["prompt_tps"]),
                         "gen_tps_median": statistics.median(t for r in mine for t in r["gen_tps"]),
                         "start_s_median": statistics.median(r["start_s"] for r in mine)}  # fmt: skip
    result = {"command": " ".join(["python benchmarks/bench_server_kinds.py", *sys.argv[1:]]), "model": str(model),
              "cpus": os.cpu_count(), "summary": summary, "rows": rows}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    table = Table(title=f"llama.cpp server kinds, {model.name}, {args.rounds} rounds x {args.requests} requests")
    for col in ("arm", "prompt tok/s", "generation tok/s", "start s"):
        table.add_column(col, justify="right")
    for name, s in summary.items():
        table.add_row(name, f"{s['prompt_tps_median']:.1f}", f"{s['gen_tps_median']:.2f}", f"{s['start_s_median']:.1f}")
    console.print(table)
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
