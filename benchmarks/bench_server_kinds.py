"""Prompt evaluation and generation speed of llama.cpp's server kinds, alternating: the prebuilt wheel
against a source build (``-march=native``), or any two launchers ``AUTOFOCUS_LLAMA_SERVER`` can name.

Each round starts each arm's server in turn (one slot, the run's thread count), evaluates a fresh prompt
of about ``--prompt-tokens`` tokens (no cached prefix: each prompt starts with a different line) and
generates ``--gen-tokens`` tokens greedily with the end-of-text ignored, ``--requests`` times, then
stops it; arms alternate within each round so that a change in the machine's load hits both alike.
Speeds are llama.cpp's own timings (``prompt_per_second``, ``predicted_per_second``), medians per arm;
the load average is recorded beside each.

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


def one_round(model: Path, launcher: str, args: argparse.Namespace, salt: int) -> dict[str, Any]:
    from autofocus.local_lm.models import resolve_local
    from autofocus.local_lm.server import LocalServer

    os.environ["AUTOFOCUS_LLAMA_SERVER"] = launcher
    spec = resolve_local(f"local:{model}")
    t0 = time.perf_counter()
    srv = LocalServer(spec.path, spec.alias, n_parallel=1, n_ctx=args.prompt_tokens + args.gen_tokens + 256).start()
    started = time.perf_counter() - t0
    try:
        prompt_tps, gen_tps = [], []
        repeat = max(1, args.prompt_tokens * 4 // len(FILLER))
        for i in range(args.requests):
            prompt = f"Request {salt}-{i}.\n" + FILLER * repeat + "\nSummarise the rules above in one line:"
            done = srv.post("completion", {"prompt": prompt, "n_predict": args.gen_tokens, "temperature": 0.0,
                                           "ignore_eos": True, "cache_prompt": False}, 900)  # fmt: skip
            prompt_tps.append(done["timings"]["prompt_per_second"])
            gen_tps.append(done["timings"]["predicted_per_second"])
            evaluated = done["timings"]["prompt_n"]
    finally:
        srv.stop()
    return {"start_s": started, "prompt_tokens": evaluated, "prompt_tps": prompt_tps, "gen_tps": gen_tps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arm", action="append", required=True, metavar="NAME=LAUNCHER",
                        help="an arm: AUTOFOCUS_LLAMA_SERVER's value (a binary, or 'wheel'); give two or more")
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
