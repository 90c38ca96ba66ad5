"""Hostile-input probes of issue 34, one line each, against whichever autofocus is importable: run it
with ``PYTHONPATH=<checkout>/src`` of the code before a fix and after it (docs/results.md, "Hardening
probes"). The tests of the same probes are ``tests/test_hostile_inputs.py``.

Work bounds (steps 3-3b on a query of many clauses, ``eval`` where the LM writes 10,000 MATCH
clauses) run in a subprocess under ``--timeout``; the rest in this process. A full disk needs a small
filesystem (root: ``mount -t tmpfs -o size=48k tmpfs /mnt/small``, then ``autofocus index build
data/demo --index-dir /mnt/small/idx``), so it is not among them.

    PYTHONPATH=src .venv/bin/python benchmarks/probe_hostile.py
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TMP = Path(tempfile.mkdtemp(prefix="hostile-"))
os.environ["AUTOFOCUS_HOME"] = str(TMP / "home")

import pandas as pd  # noqa: E402

from tests.conftest import TINY_EDGES, TINY_NODES, TINY_QA, TINY_SCHEMA, TINY_SPLITS  # noqa: E402

AUTOFOCUS = [str(Path(sys.executable).parent / "autofocus")]  # the console script, importing from PYTHONPATH
SKB = TMP / "skb"
PROBES: list[tuple[str, Callable[[], str]]] = []


def probe(name: str) -> Callable[[Callable[[], str]], Callable[[], str]]:
    def register(fn: Callable[[], str]) -> Callable[[], str]:
        PROBES.append((name, fn))
        return fn
    return register


def run(*args: Any, env: dict[str, str] | None = None, timeout: float = 120) -> tuple[Any, str, float]:
    """Exit code (or "timeout"), output with line breaks undone, seconds."""
    start = time.perf_counter()
    try:
        p = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout,
                           env={**os.environ, "COLUMNS": "200", **(env or {})})
    except subprocess.TimeoutExpired:
        return "timeout", "", time.perf_counter() - start
    return p.returncode, " ".join((p.stdout + p.stderr).split()), time.perf_counter() - start


def python(code: str, timeout: float) -> tuple[Any, str, float]:
    return run(sys.executable, "-c", textwrap.dedent(code), timeout=timeout)


# --- 1. work bounds ------------------------------------------------------------------------------------

STEP3 = """
    import time
    from autofocus.cypher import parse_cypher
    from autofocus.language import language
    from autofocus.program.steps.reading import QuestionReading
    from autofocus.program.steps.repairs import repair_query
    from autofocus.skb.skbdir import load_skb_dir
    skb = load_skb_dir("{skb}", progress=False)
    text = "\\n".join(f"MATCH (n{{i}}:paper)-[:paper_cites_paper]->(m{{i}}:paper)" for i in range({n})) + "\\nRETURN n0"
    start = time.perf_counter()
    qg = parse_cypher(text, skb.schema, target_type="paper")
    reading = QuestionReading("Which papers cite Graph Retrieval at Scale?", skb, language("en"))
    repair_query(qg, reading, "paper")
    print(f"{{time.perf_counter() - start:.2f}} s, {{len(qg.triplets)}} triplets kept")
"""


def step3(n: int, timeout: float) -> str:
    rc, out, _ = python(STEP3.format(skb=SKB, n=n), timeout)
    return f"over {timeout:.0f} s (stopped)" if rc == "timeout" else out


EVAL = """
    import json, os, sys
    sys.path.insert(0, "{root}")
    import dspy
    from dspy.clients.cache import Cache
    from typer.testing import CliRunner
    from autofocus import runtime
    from autofocus.cli import app
    from autofocus.skb.skbdir import load_skb_dir
    from tests.fake_openai_server import FakeOpenAIServer, chat_adapter_reply
    from tests.test_systems_common import make_kb
    kb = make_kb(load_skb_dir("{skb}", progress=False), __import__("pathlib").Path("{tmp}/kb"), source="{skb}")
    runtime.open_kb = lambda *a, **k: kb
    dspy.cache = Cache(False, False, "", 0, 0)
    hostile = "\\n".join(f"MATCH (n{{i}}:paper)-[:paper_cites_paper]->(m{{i}}:paper)" for i in range(10_000)) + "\\nRETURN n0"
    def answer(body):
        outputs = body["messages"][0]["content"].split("Your output fields are:")[1]
        return chat_adapter_reply(target_type="paper") if "`target_type`" in outputs else chat_adapter_reply(cypher=hostile)
    with FakeOpenAIServer(answer) as srv:
        os.environ["AUTOFOCUS_LM_API_BASE"] = srv.api_base
        res = CliRunner().invoke(app, ["eval", "--skb", "{skb}", "--split", "train", "--out", "{tmp}/run10k", "--system",
                                       "afr:steps=1-7", "--lm", "openai/fake", "--no-progress", "--deadline", "60"])
    recs = [json.loads(line) for line in open("{tmp}/run10k/traces.jsonl")]
    print(f"exit {{res.exit_code}}; " + ", ".join(f"{{r['seconds']:.1f}} s {{r['status']}}" for r in recs))
"""


# --- the probes ------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=300, help="seconds for each work-bound probe")
    args = parser.parse_args()
    from autofocus.skb.writer import write_skb_dir

    schema = {**TINY_SCHEMA, "candidate_types": ["paper", "author"]}  # step 1 asks the LM
    write_skb_dir(SKB, schema, TINY_NODES, TINY_EDGES, TINY_QA, {**TINY_SPLITS, "empty": []})
    PROBES[:0] = [
        ("steps 3-3b, 20 MATCH clauses", lambda: step3(20, args.timeout)),
        ("steps 3-3b, 10,000 MATCH clauses", lambda: step3(10_000, args.timeout)),
        ("eval, the LM writes 10,000 MATCH clauses (--deadline 60)",
         lambda: (lambda r: f"over {args.timeout:.0f} s (stopped)" if r[0] == "timeout" else r[1])(
             python(EVAL.format(root=ROOT, skb=SKB, tmp=TMP), args.timeout))),
    ]
    for name, fn in PROBES:
        try:
            out = fn()
        except Exception as exc:
            out = f"raised {type(exc).__name__}: {str(exc)[:150]}"
        print(f"| {name} | {out} |", flush=True)


def imported(files: dict[str, str | bytes]) -> tuple[Any, Path]:
    from autofocus.skb.importers import import_skb
    from autofocus.skb.importers.model import ImportOptions

    src = Path(tempfile.mkdtemp(dir=TMP))
    for name, data in files.items():
        (src / name).write_bytes(data if isinstance(data, bytes) else data.encode())
    return import_skb(src, src / "out", ImportOptions(drop_dangling=True)), src / "out"


@probe("import: a node id NA, a value NA")
def _na() -> str:
    result, out = imported({"nodes.csv": "id,type,name,code\n1,country,Namibia,NA\nNA,element,Sodium,Na\n",
                            "edges.csv": "src,type,dst\n1,r,NA\n"})
    ids = pd.read_csv(out / "source_ids.csv", dtype=str, keep_default_na=False)["source_id"].tolist()
    code = json.loads((out / "nodes.jsonl").read_text().splitlines()[0]).get("code", "missing")
    return f"{result.nodes} nodes, ids {ids}, Namibia's code {code!r}"


@probe("import: one id that is no number among edge ends")
def _odd_id() -> str:
    result, _ = imported({"nodes.csv": "id,type,name\n1,a,A\n2,a,B\n3,a,C\n",
                          "edges.csv": "src,type,dst\n1,r,2\n2,r,3\nx9,r,1\n"})
    return f"{sum(result.edge_types.values())} of 3 edges imported (2 are real)"


@probe("import: an invalid UTF-8 byte")
def _utf8() -> str:
    _, out = imported({"nodes.csv": b"id,type,name\n1,p,Bob\n2,p,Al\xffice\n"})
    return f"exit 0; names stored as {[json.loads(line).get('name') for line in (out / 'nodes.jsonl').read_text().splitlines()]}"


@probe("import: a CSV row with an extra field")
def _bad_row() -> str:
    imported({"nodes.csv": "id,type,name\n1,p,Bob\n2,p,Alice,extra\n"})
    return "imported"


WRITER = """
    import sys, time
    import dspy
    from autofocus.evaluation.runner import run_eval
    from autofocus.trace import Trace
    class Item:
        def __init__(self, i): self.id, self.query, self.answer_ids = i, f"q {{i}}", [i]
    def program(question):
        time.sleep({sleep}); return dspy.Prediction(ranked_ids=[1], trace=Trace(question=question))
    try:
        run_eval(lambda: program, [Item(i) for i in range({n})], "{out}", resume={resume}, progress=False)
        print("finished")
    except Exception as exc:
        print(type(exc).__name__, str(exc)[:100])
"""


def writer(out: Path, n: int, resume: bool = True, sleep: float = 0.3) -> subprocess.Popen[str]:
    code = textwrap.dedent(WRITER.format(out=out, n=n, resume=resume, sleep=sleep))
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def started(out: Path, first: subprocess.Popen[str]) -> None:
    """Wait until the first writer has begun its run (its manifest is there) and is still running."""
    while not (out / "manifest.json").exists() and first.poll() is None:
        time.sleep(0.05)


@probe("two evals on one --out (8 questions)")
def _two_evals() -> str:
    out = TMP / "two"
    first = writer(out, 8, sleep=3.0)  # long enough to outlast the second one's start on a loaded machine
    started(out, first)
    second = writer(out, 8)
    first.communicate(120)
    said = second.communicate(120)[0].strip().splitlines()[-1]
    return f"{len((out / 'traces.jsonl').read_text().splitlines())} trace lines; the second: {said[:90]}"


@probe("--force-new while another eval writes")
def _force_new() -> str:
    out = TMP / "force"
    first = writer(out, 8, sleep=3.0)  # long enough to outlast the second one's start on a loaded machine
    started(out, first)
    said = writer(out, 1, resume=False, sleep=0).communicate(120)[0].strip().splitlines()[-1]
    first.communicate(120)
    moved = [p for p in out.iterdir() if p.name.startswith("previous-")]
    return f"{said[:90]}; runs moved aside: {len(moved)}"


@probe("two index builds of one store at once")
def _two_builds() -> str:
    from autofocus.index.build import build_embeddings
    from autofocus.index.embedders import l2_normalise
    from autofocus.skb.skbdir import load_skb_dir
    from tests.test_systems_common import HashEmbedder

    class Slow(HashEmbedder):
        def embed(self, texts: Any, batch_size: int = 64, progress: bool = False) -> Any:
            time.sleep(0.1)
            return l2_normalise(super().embed(texts, batch_size=batch_size))

    skb, said = load_skb_dir(SKB, progress=False), []

    def build() -> None:
        try:
            build_embeddings(skb, Slow(), "text", TMP / "store", chunk_size=2, progress=False)
            said.append("ok")
        except Exception as exc:
            said.append(f"{type(exc).__name__}: ...{str(exc)[-55:]}")

    threads = [threading.Thread(target=build) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return "; ".join(said)


@probe("report on a run killed at 2 of 4 questions (1 degraded)")
def _killed() -> str:
    path = TMP / "killed"
    path.mkdir()

    def record(i: int, status: str) -> str:
        return json.dumps({"v": 1, "id": i, "query": "q", "gold": [i], "status": status, "ranked": [i], "n_ranked": 1,
                           "metrics": {"hit@1": 1.0, "mrr": 1.0}, "derived": {}, "trace": None, "seconds": 0.1})

    (path / "traces.jsonl").write_text(record(1, "ok") + "\n" + record(2, "degraded") + "\n")
    (path / "manifest.json").write_text(json.dumps({"system": "afr", "sessions": [{"started": "x", "todo": 4, "skipped": 0}]}))
    _, out, _ = run(*AUTOFOCUS, "report", path)
    summary = json.loads((path / "summary.json").read_text())
    title = out[out.find("):") + 2 : out.find("┏")].strip()
    return f"title: {title}; summary.json n_ok {summary['n_ok']}"


@probe("eval on an empty split")
def _empty() -> str:
    return f"exit {run(*AUTOFOCUS, 'eval', '--skb', SKB, '--split', 'empty', '--out', TMP / 'e', '--system', 'bm25', '--no-progress')[0]}"


@probe("ask with every LM call failed")
def _no_lm() -> str:
    rc, _, _ = run(*AUTOFOCUS, "ask", "Which papers cite Graph Retrieval at Scale?", "--skb", SKB, "--system", "afr:steps=1-5",
                   "--lm", "openai/x", "--lm-retries", "0", env={"AUTOFOCUS_LM_API_BASE": "http://127.0.0.1:9/v1"},
                   timeout=600)  # it embeds the SKB first
    return f"exit {rc}"


@probe("bootstrap CI of MRR, one run's lines in two orders")
def _order() -> str:
    from autofocus.evaluation.report import summarize

    records = [{"id": i, "status": "ok", "metrics": {"mrr": m}} for i, m in enumerate([1, 0.5, 0.25, 0.2, 1, 0, 0.33, 0.5])]
    a, b = summarize(records)["metrics"]["mrr"], summarize(records[::-1])["metrics"]["mrr"]
    return f"{a['low']:.4f}-{a['high']:.4f} vs {b['low']:.4f}-{b['high']:.4f}"


@probe("a key echoed in a successful answer, in DSPy's disk cache")
def _cache() -> str:
    import dspy
    from dspy.clients.cache import Cache

    from autofocus.lm import get_lm
    from tests.fake_openai_server import FakeOpenAIServer

    key = "sk-cache-0123456789abcdefghij"
    dspy.cache = Cache(True, True, str(TMP / "dspy_cache"))
    with FakeOpenAIServer(lambda body: f"your key is {key}") as srv:
        get_lm("openai/fake", api_base=srv.api_base, api_key=key, num_retries=0)("echo")
    dspy.cache.disk_cache.close()
    stored = b"".join(p.read_bytes() for p in (TMP / "dspy_cache").rglob("*") if p.is_file())
    return "stored" if key.encode() in stored else "not stored"


@probe("a 5-character key in traces.jsonl")
def _short_key() -> str:
    import dspy

    from autofocus.evaluation.runner import run_eval
    from autofocus.redact import register_secret
    from autofocus.trace import Trace

    register_secret("k3y9z")

    class Item:
        id, query, answer_ids = 1, "q", [1]

    def program(question: str) -> Any:
        trace = Trace(question=question)
        trace.degrade("2_query", "401: key k3y9z rejected")
        return dspy.Prediction(ranked_ids=[1], trace=trace)

    run_eval(lambda: program, [Item()], TMP / "key", progress=False)
    return "there" if "k3y9z" in (TMP / "key" / "traces.jsonl").read_text() else "redacted"


@probe("ANSI escapes from an LM through console.safe")
def _ansi() -> str:
    from autofocus.console import safe

    return "passed through" if "\x1b" in safe("x\x1b[2Jy") else "removed"


@probe("a STaRK node_info.pkl that holds 42: index build, skb info")
def _node_info() -> str:
    root = TMP / "mag"
    shutil.copytree(ROOT / "tests" / "fixtures" / "stark" / "mag_like", root)
    (root / "processed" / "node_info.pkl").write_bytes(pickle.dumps(42))

    def how(out: str) -> str:
        return "traceback" if "Traceback" in out else "names node_info.pkl" if "node_info.pkl" in out else out[:60]

    rc1, out1, _ = run(*AUTOFOCUS, "index", "build", root, "--variant", "text", "--index-dir", TMP / "ix")
    rc2, out2, _ = run(*AUTOFOCUS, "skb", "info", root)
    return f"exit {rc1}, {how(out1)}; exit {rc2}, {how(out2)}"


@probe("--program naming a file that is no JSON")
def _program() -> str:
    bad = TMP / "program.json"
    bad.write_text("not json")
    rc, out, _ = run(*AUTOFOCUS, "ask", "q", "--skb", SKB, "--program", bad)
    return f"exit {rc}, {'a traceback' if 'Traceback' in out else 'one line'}"


@probe("--skb naming a symbolic link loop")
def _loop() -> str:
    loop = TMP / "loop"
    os.symlink(loop, loop)
    rc, out, _ = run(*AUTOFOCUS, "skb", "info", loop)
    return f"exit {rc}: {out.replace(str(TMP), '...')[:80]}"


@probe("the read-timeout hint")
def _hint() -> str:
    try:
        from autofocus.program.steps.llm_call import describe_error
    except ImportError:
        return "names Timeouts(read=...)"
    return "names --lm-timeout" if "--lm-timeout" in describe_error(TimeoutError("raise it with Timeouts(read=...)")) \
        else "names Timeouts(read=...)"


@probe("tokens of a call that never reached a server")
def _tokens() -> str:
    import dspy

    from autofocus import usage

    usage.install_usage_callback()
    lm = dspy.LM("openai/fake", api_base="http://127.0.0.1:9/v1", api_key="x", num_retries=0, cache=False)
    with usage.usage_scope() as used, contextlib.suppress(Exception):  # connection refused, as DSPy types it
        lm("a long prompt " * 800)
    return f"{used.calls} call, {used.input_tokens} input tokens"


if __name__ == "__main__":
    main()
