"""Wall time of one `autofocus ask` with the offline LM, as a user meets it: first ever, cold, warm.

Each run is a fresh process with a fresh DSPy answer cache (every LM answer computed), timed from the
command's start to its exit:

* ``first``: no server running and no prompt cache on disk (the folder of the server's settings is
  emptied first): the server starts and the prompts' shared start is evaluated and saved;
* ``cold``: no server running, the prompt cache on disk: the server starts and restores it;
* ``warm``: a server that ``autofocus lm serve --detach`` started beforehand (not timed) and kept; its
  process answers the ``ask`` (``autofocus.resident``) after one other question (not timed) opened the
  knowledge base and program there, as for a user's second question;
* ``warm-own``: the same, with ``AUTOFOCUS_RESIDENT=0``: the ``ask`` runs in its own process and uses
  only the server.

Arms alternate within each repeat (first, cold, warm), so a change in the machine's load hits them alike;
the load average is recorded beside each run. Each run's trace gives its start-up (the server, the prompt
cache: what restoring cost against evaluating) apart from its steps, and its ranking, which must be the
same in every arm (a restored prompt against a freshly evaluated one).

    python benchmarks/bench_ask_startup.py --repeats 3            # on a quiet machine: the issue's <= 25 s / <= 10 s
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results" / "ask_startup.json"
QUESTION = "Which functions of the json module raise TypeError?"
WARM_UP = "Which exceptions defined in the json module subclass ValueError?"  # another question, opening the program
CLI = [sys.executable, "-m", "autofocus"]


def prompt_cache(lm: str) -> Path:
    """The prompt cache folder of the server ``lm`` gets with this environment's settings."""
    from autofocus.lm import draft_model
    from autofocus.local_lm.models import resolve_local
    from autofocus.local_lm.server import LocalServer

    spec = resolve_local(lm)
    return LocalServer(spec.path, spec.alias, draft_model=draft_model(lm)).prompt_cache_dir()


def environment(tmp: Path, name: str, own: bool = False) -> dict[str, str]:
    """A run's environment: a DSPy answer cache of its own; ``own``: not answered by ``lm serve``'s process."""
    env = {k: v for k, v in os.environ.items() if k not in ("AUTOFOCUS_LLM_SERVER", "AUTOFOCUS_RESIDENT")}
    env["DSPY_CACHEDIR"] = str(tmp / f"dspy-{name}")
    if own:
        env["AUTOFOCUS_RESIDENT"] = "0"
    return env


def ask(args: argparse.Namespace, tmp: Path, name: str, env: dict[str, str], question: str | None = None) -> dict[str, Any]:
    """One `autofocus ask` in a fresh process: wall seconds, its trace's start-up, steps and ranking."""
    trace = tmp / f"{name}.json"
    cmd = [*CLI, "ask", question or args.question, "--skb", str(args.skb), "--system", args.system, "--lm", args.lm,
           "--trace-json", str(trace)]  # fmt: skip
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    data = json.loads(trace.read_text())
    steps = {step: round(rec["seconds"], 2) for step, rec in data["steps"].items()}
    return {"wall_s": round(wall, 2), "load_avg": round(load, 2), "startup": data["data"].get("startup", {}),
            "steps_s": steps, "cypher": data["data"].get("cypher"), "target_type": data["data"].get("target_type"),
            "target_type_probs": data["data"].get("target_type_probs"),
            "stderr_notes": [line for line in done.stderr.splitlines() if line.strip()][-3:]}  # fmt: skip


def serve(args: argparse.Namespace, stop: bool = False, env: dict[str, str] | None = None) -> float:
    """``lm serve --detach`` (or ``lm stop``) in ``env``: its wall seconds."""
    t0 = time.perf_counter()
    cmd = [*CLI, "lm", "stop"] if stop else [*CLI, "lm", "serve", "--model", args.lm, "--detach"]
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, env=env)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skb", type=Path, default=ROOT / "data" / "demo")
    parser.add_argument("--system", default="afr:steps=1-7")
    parser.add_argument("--lm", default="local")
    parser.add_argument("--question", default=QUESTION)
    parser.add_argument("--repeats", type=int, default=2, help="rounds of the arms")
    parser.add_argument("--arms", default="first,cold,warm,warm-own")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    arms = args.arms.split(",")
    from rich.console import Console
    from rich.table import Table

    console = Console()
    folder = prompt_cache(args.lm)
    runs: list[dict[str, Any]] = []
    serve(args, stop=True)  # no server of an earlier session
    with tempfile.TemporaryDirectory(prefix="bench-ask-") as tmpdir:
        tmp = Path(tmpdir)
        for rep in range(args.repeats):
            for arm in arms:
                serve_s = None
                env = environment(tmp, f"{arm}-{rep}", own=arm == "warm-own")
                if arm == "first":
                    for saved in folder.glob("start-*.bin"):
                        saved.unlink()
                if arm.startswith("warm"):
                    serve_s = serve(args, env=env)
                    if arm == "warm":
                        ask(args, tmp, f"{arm}-{rep}-warm-up", env, WARM_UP)
                run = {"arm": arm, "repeat": rep, **ask(args, tmp, f"{arm}-{rep}", env), "serve_s": serve_s}
                if arm.startswith("warm"):
                    serve(args, stop=True)
                runs.append(run)
                console.print(f"{arm} #{rep}: {run['wall_s']:.1f} s wall (load {run['load_avg']:.1f}); start-up "
                              f"{json.dumps(run['startup'])}; steps {json.dumps(run['steps_s'])}")  # fmt: skip
    answers = {json.dumps([r["target_type"], r["cypher"], r["target_type_probs"]]) for r in runs}
    result = {"command": " ".join(["python benchmarks/bench_ask_startup.py", *sys.argv[1:]]), "question": args.question,
              "skb": str(args.skb), "system": args.system, "lm": args.lm, "cpus": os.cpu_count(),
              "same_answers_in_every_run": len(answers) == 1, "runs": runs}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    table = Table(title=f"autofocus ask, {args.system}, {args.lm}: wall seconds per arm")
    for col in ("arm", "runs", "wall median", "wall min-max", "server start", "prompt cache", "steps 1-2", "load"):
        table.add_column(col, justify="right")
    for arm in arms:
        mine = [r for r in runs if r["arm"] == arm]
        walls = [r["wall_s"] for r in mine]

        def med(key: str, rows: list[dict[str, Any]] = mine) -> str:
            values = [r["startup"].get(key, {}).get("seconds") for r in rows]
            values = [v for v in values if v is not None]
            return f"{statistics.median(values):.2f} s" if values else "-"

        steps12 = [sum(v for k, v in r["steps_s"].items() if k[:1] in "12") for r in mine]
        table.add_row(arm, str(len(mine)), f"{statistics.median(walls):.1f}", f"{min(walls):.1f}-{max(walls):.1f}",
                      med("lm_server"), med("prompt_cache"), f"{statistics.median(steps12):.1f}",
                      f"{statistics.median(r['load_avg'] for r in mine):.1f}")  # fmt: skip
    console.print(table)
    console.print(f"same step 1-2 answers and step 1 probabilities in every run: {result['same_answers_in_every_run']}; wrote {args.out}")


if __name__ == "__main__":
    main()
