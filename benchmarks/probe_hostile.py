"""Hostile-input probes, one line each, against whichever autofocus is importable: run it with
``PYTHONPATH=<checkout>/src`` of the code before a fix and after it (docs/results.md, "Hardening
probes"). The tests of the same probes are ``tests/test_hostile_inputs.py``.

Without ``--demo`` it runs issue 34's probes (on a tiny SKB); with ``--demo PATH`` issue 47's, each on
a copy of that demo SKB under a temporary folder (its cache and indexes in a temporary
``AUTOFOCUS_HOME``: the demo is embedded once there). ``--gguf`` (a GGUF file; a copy cut at 200 MB
is evaluated with) and ``--lm local`` (the offline LM, for a 40,000-character question sent past the
length bound) add the probes that need the offline LM; as root, ``--mount`` adds those that need a
small or read-only filesystem (tmpfs). ``--demo PATH --adapt`` runs issue 57's instead, on step 8's
caches, trained folders and ``autofocus adapt`` (the demo read in place, an adaptation of 40 template
questions trained first); ``--home DIR`` keeps the autofocus home (the demo's index) in DIR, so the
runs before and after a fix embed the demo once.

``--lm-serve`` runs issue 57's probes of ``autofocus lm serve`` and its worker (items 1-8) on the tiny
SKB, with ``tests/fake_openai_server.py`` as llama-server (``AUTOFOCUS_LLAMA_SERVER``) and the embedder
of ``AUTOFOCUS_MODELS`` (default: the user's models); as root, another local user is uid 65534 (a forked
process that gives up root). With ``--gguf`` the key probe (item 2) also runs on llama.cpp's own server
with that model.

Work bounds (steps 3-3b on a query of many clauses, ``eval`` where the LM writes 10,000 MATCH
clauses) run in a subprocess under ``--timeout``; the rest in this process. A full disk needs a small
filesystem (root: ``mount -t tmpfs -o size=48k tmpfs /mnt/small``, then ``autofocus index build
data/demo --index-dir /mnt/small/idx``), so it is not among them.

    PYTHONPATH=src .venv/bin/python benchmarks/probe_hostile.py
    PYTHONPATH=src .venv/bin/python benchmarks/probe_hostile.py --demo data/demo --mount \
        --gguf ~/.cache/autofocus/models/<model>.gguf --lm local
    PYTHONPATH=src .venv/bin/python benchmarks/probe_hostile.py --demo data/demo --adapt --home /tmp/probe-home
    PYTHONPATH=src .venv/bin/python benchmarks/probe_hostile.py --lm-serve [--gguf <model>.gguf]
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
from collections.abc import Callable, Iterator
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
    parser.add_argument("--demo", type=Path, help="run issue 47's probes on copies of this demo SKB")
    parser.add_argument("--gguf", type=Path, help="issue 47: a GGUF model file to cut at 200 MB")
    parser.add_argument("--lm", help="issue 47: the LM that gets a 40,000-character question (e.g. local)")
    parser.add_argument("--mount", action="store_true", help="issue 47: probes on small/read-only tmpfs (root)")
    parser.add_argument("--adapt", action="store_true", help="issue 57: step 8's caches, trained folders, adapt")
    parser.add_argument("--home", type=Path, help="the autofocus home to keep (the demo's index) across runs")
    parser.add_argument("--lm-serve", action="store_true", help="issue 57: probes of `lm serve` and its worker")
    args = parser.parse_args()
    if args.home is not None:
        os.environ["AUTOFOCUS_HOME"] = str(args.home.resolve())
    if args.lm_serve:
        for name, out in lm_serve_probes(args.gguf):
            print(f"| {name} | {out} |", flush=True)
        return
    if args.demo is not None and args.adapt:
        for name, out in adapt_probes(args.demo.resolve()):
            print(f"| {name} | {out} |", flush=True)
        return
    if args.demo is not None:
        for name, out in demo_probes(args.demo.resolve(), args.gguf, args.lm, args.mount):
            print(f"| {name} | {out} |", flush=True)
        return
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


# --- issue 47: on copies of the demo ------------------------------------------------------------------


def first_line(out: str, *marks: str) -> str:
    """The error line of a command's output (from its first mark on), or a traceback's last line."""
    if "Traceback" in out:
        return "traceback: " + out.split("Traceback")[-1][-160:]
    at = min((i for i in (out.find(m) for m in marks) if i >= 0), default=-1)
    return out[at: at + 230] if at >= 0 else out[:230]


def demo_copy(demo: Path, name: str) -> Path:
    copy = TMP / name
    shutil.copytree(demo, copy, ignore=shutil.ignore_patterns("runs"))
    return copy


def store_of(skb: Path) -> Path:
    """The text store of a demo copy's default index folder."""
    from autofocus.skb.cache import cache_dir_for

    return next((cache_dir_for(skb) / "index").glob("*/text-*t"))


def demo_probes(demo: Path, gguf: Path | None, lm: str | None, mount: bool) -> Iterator[tuple[str, str]]:
    """Issue 47's probes, each row as it is done; the demo is copied and embedded once, each damage done
    to a copy of its index."""
    skb = demo_copy(demo, "demo")
    rc, out, secs = run(*AUTOFOCUS, "index", "build", skb, timeout=3600)  # the variants afr searches
    yield ("setup: `index build` of the demo copy", f"exit {rc}, {secs:.0f} s")
    store = store_of(skb)
    pristine = TMP / "pristine-store"
    shutil.copytree(store, pristine)
    query = ("search", "parse a JSON document into Python objects", "--skb", skb, "-k", "5")
    top5 = run(*AUTOFOCUS, *query)[1]

    def restore() -> None:
        shutil.rmtree(store)
        shutil.copytree(pristine, store)

    # 1. a damaged store
    os.truncate(store / "embeddings.f16.npy", 800_000)
    rc, out, secs = run(*AUTOFOCUS, "index", "build", skb, "--variant", "text", timeout=3600)
    info = run(*AUTOFOCUS, "index", "info", skb)
    yield ("1. `truncate -s 800000 embeddings.f16.npy; index build --variant text`",
           f"exit {rc}, {secs:.0f} s: {first_line(out, 'embeddings.f16.npy')[:170]}; then `index info` exit "
           f"{info[0]}, {'ok' if ' ok ' in info[1] else first_line(info[1], 'error')}; top 5 of `search` "
           f"{'as before' if run(*AUTOFOCUS, *query)[1] == top5 else 'changed'}")
    restore()
    size = (store / "embeddings.f16.npy").stat().st_size
    with (store / "embeddings.f16.npy").open("r+b") as fh:  # the header kept, the rows overwritten
        fh.seek(128)
        fh.write(os.urandom(size - 128))
    rc, out, _ = run(*AUTOFOCUS, "index", "info", skb)
    yield ("1. same-size garbage over the vectors (header kept): `index info`",
           f"exit {rc}: {first_line(out, 'error')}")
    restore()
    before = run(*AUTOFOCUS, *query, "--type", "function")[1]
    faiss_file = next((store / "faiss").rglob("*function.faiss"))
    size = faiss_file.stat().st_size
    with faiss_file.open("r+b") as fh:
        fh.seek(size // 2)
        fh.write(os.urandom(size - size // 2))
    rc, out, _ = run(*AUTOFOCUS, *query, "--type", "function")
    yield ("1. same-size garbage over a `.faiss` file's codes: `search --type function`",
           f"exit {rc}: {first_line(out, 'rebuilding')[:120]}; results {'as before' if before in out else 'changed'}")
    restore()
    (store / "manifest.json").write_text("{not json")
    rc, out, _ = run(*AUTOFOCUS, "index", "info", skb)
    yield "7. index manifest.json not JSON: `index info`", f"exit {rc}: {first_line(out, 'error')[:200]}"
    (store / "manifest.json").write_text("")
    rc, out, secs = run(*AUTOFOCUS, *query, timeout=3600)
    yield "7. index manifest.json empty: `search`", f"exit {rc}, {secs:.0f} s: {first_line(out, 'manifest.json')[:200]}"
    restore()

    # 2. a question longer than the LM's context
    long_q = "Which functions of the json module parse a document? " * 755  # 40,015 characters
    rc, out, secs = run(*AUTOFOCUS, "ask", long_q, "--skb", skb, "--system", "afr:steps=1-7", "--lm",
                        "openai/unused", timeout=600)
    yield ("2. `ask` a 40,000-character question", f"exit {rc}, {secs:.0f} s: {first_line(out, 'the question')}")
    qa = TMP / "qa-long"
    qa.mkdir()
    pd.DataFrame({"id": [0], "query": [long_q], "answer_ids": ["[0]"]}).to_csv(qa / "qa_long.csv", index=False)
    ev = ("eval", "--skb", skb, "--split", "long", "--qa-dir", qa, "--out", TMP / "run-long", "--system",
          "afr:steps=1-7", "--lm", "openai/unused", "--no-progress")
    rc, out, _ = run(*AUTOFOCUS, *ev, timeout=600)
    todo = json.loads((TMP / "run-long" / "manifest.json").read_text())["sessions"]
    run(*AUTOFOCUS, *ev, timeout=600)
    again = json.loads((TMP / "run-long" / "manifest.json").read_text())["sessions"][-1]["todo"]
    yield ("2. `eval` of a split holding that question", f"exit {rc}: {first_line(out, 'afr')[:150]}; "
           f"a resume asks it again: {again == todo[-1]['todo'] == 1}")
    yield ("2. `eval`, every LM call answered HTTP 400 'exceeds the available context size' (fake server, "
                 "3 questions)", overflow_eval(skb))
    if lm is not None:
        rc, out, secs = run(*AUTOFOCUS, "ask", long_q, "--skb", skb, "--system", "afr:max_question_chars=100000",
                            "--lm", lm, "--lm-retries", "0", timeout=1800)
        yield (f"2. `ask` that question past the bound (--lm {lm})",
                     f"exit {rc}, {secs:.0f} s: {first_line(out, 'degraded')[:200]}")

    # 3. duplicate columns
    for header, data in (("id,type,name,text,name,text", "1,a,A,first,B,second"), (":ID,:LABEL,name,:ID", "1,a,A,9")):
        src = TMP / f"dup{len(header)}"
        src.mkdir()
        (src / "nodes.csv").write_text(f"{header}\n{data}\n")
        rc, out, _ = run(*AUTOFOCUS, "skb", "import", src, src / "out")
        yield (f"3. `skb import` of a header `{header}`", f"exit {rc}: {first_line(out, 'nodes.csv')}")

    # 4. nothing answered
    if gguf is not None:
        cut = TMP / "cut.gguf"
        with gguf.open("rb") as src_fh, cut.open("wb") as dst_fh:
            dst_fh.write(src_fh.read(200_000_000))
        ev = ("eval", "--skb", skb, "--split", "test", "--limit", "3", "--out", TMP / "run-cut", "--system",
              "afr:steps=1-7", "--lm", f"local:{cut}", "--no-progress")
        rc, out, _ = run(*AUTOFOCUS, *ev, timeout=1800)
        rep = run(*AUTOFOCUS, "report", TMP / "run-cut")
        yield ("4. `eval --lm local:<GGUF cut at 200 MB>` (3 questions); `report` of it",
                     f"exit {rc}: {first_line(out, 'afr')[:170]}; report exit {rep[0]}")

    # 5. a misspelt top-level setting
    config = TMP / "alhpa.json"
    config.write_text('{"alhpa": 0.5}')
    rc, out, _ = run(*AUTOFOCUS, "eval", "--skb", skb, "--split", "test", "--limit", "1", "--out", TMP / "run-cfg",
                     "--system", "vss", "--config", config, "--no-progress")
    yield ('5. `eval --config` of `{"alhpa": 0.5}`', f"exit {rc}: {first_line(out, str(config))}")

    # 7. smaller ones
    yield "7. an edit in the middle of a nodes.jsonl over 4 MiB keeping size and mtime", large_edit(demo)
    prog = TMP / "prog.json"
    python(f"""
        from autofocus import runtime
        runtime.open_program("{skb}", "afr:steps=1-7", lms=False).save("{prog}")
    """, 600)
    rc, out, _ = run(*AUTOFOCUS, "eval", "--skb", skb, "--split", "test", "--limit", "1", "--out", TMP / "run-prog",
                     "--system", "vss", "--program", prog, "--no-progress")
    yield ("7. `eval --system vss --program <a program of afr:steps=1-7>`", f"exit {rc}: {first_line(out, str(prog))}")
    doc = json.loads(prog.read_text())
    doc["state"][next(iter(doc["state"]))]["demos"] = "not a list"
    prog.write_text(json.dumps(doc))
    rc, out, _ = run(*AUTOFOCUS, "eval", "--skb", skb, "--split", "test", "--limit", "1", "--out", TMP / "run-demos",
                     "--program", prog, "--no-progress", "--lm", "openai/unused")
    yield ('7. a program file with `"demos": "not a list"`', f"exit {rc}: {first_line(out, str(prog))}")
    yield ("7. `bench build wordnet --small` from a data.noun cut at a line boundary", cut_wordnet())
    if mount:
        yield from mounted_probes(skb, store, pristine)


def overflow_eval(skb: Path) -> str:
    """An eval whose LM answers every call as llama-server answers a prompt over its context; then a resume."""
    from tests.fake_openai_server import FakeOpenAIServer

    error = {"code": 400, "type": "exceed_context_size_error",
             "message": "the request exceeds the available context size, try increasing it"}
    with FakeOpenAIServer(lambda body: {"status": 400, "json": {"error": error}}) as srv:
        ev = ("eval", "--skb", skb, "--split", "test", "--limit", "3", "--out", TMP / "run-overflow", "--system",
              "afr:steps=1-7", "--lm", "openai/fake", "--lm-retries", "0", "--no-progress")
        env = {"AUTOFOCUS_LM_API_BASE": srv.api_base}
        rc, out, _ = run(*AUTOFOCUS, *ev, env=env, timeout=600)
        asked = srv.request_count
        run(*AUTOFOCUS, *ev, env=env, timeout=600)
        again = srv.request_count - asked
    lines = [json.loads(line) for line in (TMP / "run-overflow" / "traces.jsonl").read_text().splitlines()]
    causes = sorted({d["error"][:40] for r in lines for d in r.get("degraded", [])})
    return (f"exit {rc}: {first_line(out, 'afr')[:110]}; statuses {sorted({r['status'] for r in lines})}, "
            f"causes {causes}; the resume sent {again} requests")


def large_edit(demo: Path) -> str:
    """A demo copy whose documents are padded past 4 MiB; a word of the middle node's document edited,
    size and mtime restored; which document is served then."""
    skb = demo_copy(demo, "demo-large")
    nodes = skb / "nodes.jsonl"
    rows = [json.loads(line) for line in nodes.read_text().splitlines()]
    middle = len(rows) // 2
    for row in rows:
        row["text"] = f"{row.get('text', '')} {'padding ' * 250}".strip()
    rows[middle]["text"] = "MARKER-OLD " + rows[middle]["text"]
    nodes.write_text("".join(json.dumps(row) + "\n" for row in rows))
    read = ("from autofocus.skb.io import load_skb; import sys; doc = load_skb(sys.argv[1], progress=False)"
            f".doc({middle}); print('new' if 'MARKER-NEW' in doc else 'old' if 'MARKER-OLD' in doc else '?')")
    run(sys.executable, "-c", read, skb, timeout=600)
    st = nodes.stat()
    nodes.write_text(nodes.read_text().replace("MARKER-OLD", "MARKER-NEW"))
    os.utime(nodes, ns=(st.st_atime_ns, st.st_mtime_ns))
    same = (nodes.stat().st_size, nodes.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    served = run(sys.executable, "-c", read, skb, timeout=600)[1]
    return f"{st.st_size / 2**20:.1f} MiB, size and mtime kept: {same}; the {served} document is served"


def cut_wordnet() -> str:
    from autofocus.bench.wordnet_source import locate_wordnet

    folder = TMP / "wordnet-cut"
    folder.mkdir()
    lines = (locate_wordnet() / "data.noun").read_text(encoding="utf-8").splitlines(keepends=True)
    (folder / "data.noun").write_text("".join(lines[: len(lines) // 2]), encoding="utf-8")
    rc, out, _ = run(*AUTOFOCUS, "bench", "build", "wordnet", TMP / "wn", "--small", "--wordnet-dir", folder, timeout=900)
    return f"exit {rc}: {first_line(out, 'data.noun', 'error', 'built')[:200]}"


def mounted_probes(skb: Path, store: Path, pristine: Path) -> Iterator[tuple[str, str]]:
    """Probes on tmpfs mounts (root): a disk too small for the index, a read-only index folder with a
    file missing, a full disk under eval --out."""
    mnt = TMP / "mnt"
    mnt.mkdir()

    def mounted(size: str, fill: Callable[[], None] | None = None, read_only: bool = False) -> None:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], check=True)
        if fill is not None:
            fill()
        if read_only:
            subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)

    try:
        mounted("1m")
        rc, out, secs = run(*AUTOFOCUS, "index", "build", skb, "--variant", "text", "--index-dir", mnt / "idx",
                            timeout=1800)
        yield ("7. `index build --index-dir` on a 1 MiB tmpfs", f"exit {rc}, {secs:.0f} s: {first_line(out, 'error')}")
        subprocess.run(["umount", str(mnt)], check=True)
        for missing in ("done.npy", "faiss/flat/0003-function.faiss"):
            def fill(missing: str = missing) -> None:
                target = mnt / "idx" / store.parent.name / store.name
                shutil.copytree(pristine, target)
                (target / missing).unlink()
            mounted("20m", fill, read_only=True)
            rc, out, _ = run(*AUTOFOCUS, "search", "parse json", "--skb", skb, "--index-dir", mnt / "idx")
            rc2, out2, _ = run(*AUTOFOCUS, "index", "build", skb, "--variant", "text", "--index-dir", mnt / "idx")
            yield (f"7. read-only index folder without {missing}: `search`; `index build`",
                         f"exit {rc}: {first_line(out, 'error', 'could not')[:150]}; build exit {rc2}: "
                         f"{first_line(out2, 'error')[:150]}")
            subprocess.run(["umount", str(mnt)], check=True)
        mounted("64k")
        rc, out, _ = run(*AUTOFOCUS, "eval", "--skb", skb, "--split", "test", "--out", mnt / "run", "--system", "vss",
                         "--no-progress", timeout=900)
        kept = len((mnt / "run" / "traces.jsonl").read_text().splitlines()) if (mnt / "run" / "traces.jsonl").exists() else 0
        yield ("7. `eval --out` on a 64 KiB tmpfs (87 questions)", f"exit {rc}: {first_line(out, 'cannot write')[:200]}; "
                     f"{kept} finished lines kept")
    finally:
        subprocess.run(["umount", str(mnt)], check=False, capture_output=True)


# --- issue 57: step 8's caches, trained folders, adapt ----------------------------------------------------

ADAPT = ("--templates", "40", "--epochs", "1", "--no-progress")  # the quickest adaptation that trains a model
BI_ENCODER = "vss-rerank:reranker=bi-encoder"  # step 8 by the trained bi-encoder, no LM


def home() -> Path:
    return Path(os.environ["AUTOFOCUS_HOME"])


def lock_only_exports() -> int:
    """Export folders that hold nothing but their lock (an export begun and abandoned)."""
    models = home() / "models"
    return sum(1 for d in models.iterdir() if d.is_dir() and {p.name for p in d.iterdir()} == {".lock"}) \
        if models.is_dir() else 0


def reranked(skb: Path, trained: Path, name: str, limit: int = 20) -> tuple[Any, str, dict[int, list[int]]]:
    """An eval of step 8 by ``trained``'s bi-encoder on the demo's val split: exit, output, ranked ids per question."""
    cfg = TMP / f"{name}.json"
    cfg.write_text(json.dumps({"trained": str(trained)}))
    rc, out, _ = run(*AUTOFOCUS, "eval", "--skb", skb, "--split", "val", "--limit", limit, "--system", BI_ENCODER,
                     "--config", cfg, "--out", TMP / name, "--no-progress", timeout=1800)
    traces = TMP / name / "traces.jsonl"
    lines = [json.loads(line) for line in traces.read_text().splitlines()] if traces.exists() else []
    return rc, out, {r["id"]: r["ranked"] for r in lines}


def gold_ranks(ranked: dict[int, list[int]], gold: dict[int, list[int]]) -> list[int | None]:
    return [next((i + 1 for i, n in enumerate(ids) if n in gold[q]), None) for q, ids in sorted(ranked.items())]


def adapt_probes(demo: Path) -> Iterator[tuple[str, str]]:
    """Issue 57's items 9-14, each row as it is done."""
    import sqlite3

    from autofocus.skb.qa import load_qa

    os.environ["AUTOFOCUS_RESIDENT"] = "0"  # nobody's `lm serve` answers these
    rc, out, secs = run(*AUTOFOCUS, "index", "build", demo, timeout=3600)
    yield "setup: `index build` of the demo (once per home)", f"exit {rc}, {secs:.0f} s"
    adapted = TMP / "adapt" / "adapted.json"
    rc, out, secs = run(*AUTOFOCUS, "adapt", "--skb", demo, *ADAPT, "--out", adapted, timeout=3600)
    yield f"setup: `adapt {' '.join(ADAPT)}` of the demo", f"exit {rc}, {secs:.0f} s: {first_line(out, 'Wrote', 'error')[:90]}"
    folder = adapted.with_name("adapted.trained")
    cache = home() / "embeddings" / "queries.sqlite"
    gold = {q.id: list(q.answer_ids) for q in load_qa(demo, "val")}

    # 9. cached candidate vectors replaced by same-length garbage
    rc, out, first = reranked(demo, folder, "rerank-1")
    db = sqlite3.connect(cache)
    for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
        if "vec" in [c[1] for c in db.execute(f"PRAGMA table_info({table})")]:
            db.execute(f"UPDATE {table} SET vec = randomblob(length(vec)) WHERE model LIKE 'bi-encoder-%'")
    db.commit()
    db.close()
    rc, out, second = reranked(demo, folder, "rerank-2")
    both = sorted(set(first) & set(second))
    before, after = gold_ranks({q: first[q] for q in both}, gold), gold_ranks({q: second[q] for q in both}, gold)
    yield ("9. step 8's cached candidate vectors (bi-encoder) replaced by same-length garbage: `eval --split val "
           "--limit 20` again", f"exit {rc}; gold's rank changed in {sum(a != b for a, b in zip(before, after, strict=True))} of "
           f"{len(before)} questions (first question {before[:1]} -> {after[:1]}); lines naming the damage: "
           f"{out.count('fail their digest')}: {first_line(out, 'queries.sqlite') if 'queries.sqlite' in out else ''}"[:300])

    # 10. the cache file damaged
    pristine = TMP / "queries.pristine"
    shutil.copy(cache, pristine)
    query = ("search", "parse a JSON document into Python objects", "--skb", demo, "-k", "5")
    for damage in ("truncated to half", "overwritten with garbage"):
        for side in ("-wal", "-shm"):
            Path(f"{cache}{side}").unlink(missing_ok=True)
        data = pristine.read_bytes()
        cache.write_bytes(data[: len(data) // 2] if damage.startswith("truncated") else os.urandom(len(data)))
        rc, out, _ = run(*AUTOFOCUS, *query)
        rc2, _, _ = run(*AUTOFOCUS, "eval", "--skb", demo, "--split", "val", "--limit", "3", "--system", "vss",
                           "--out", TMP / f"cache-{len(damage)}", "--no-progress")
        yield (f"10. queries.sqlite {damage}: `search`; then `eval --system vss`",
               f"exit {rc}: {first_line(out, 'queries.sqlite', 'error')[:170]}; eval exit {rc2}")
        for side in ("", ".damaged", "-wal", "-shm"):
            Path(f"{cache}{side}").unlink(missing_ok=True)
        shutil.copy(pristine, cache)

    # 11. the trained folder's weights damaged
    for damage in ("truncated", "deleted"):
        broken = TMP / f"{damage}.trained"
        shutil.copytree(folder, broken)
        weights = broken / "reranker" / "model.safetensors"
        if damage == "truncated":
            os.truncate(weights, weights.stat().st_size // 2)
        else:
            weights.unlink()
        was = lock_only_exports()
        start = time.perf_counter()
        rc, out, _ = reranked(demo, broken, f"broken-{damage}", limit=1)
        yield (f"11. the reranker's model.safetensors {damage}: `eval --limit 1` with it",
               f"exit {rc}, {time.perf_counter() - start:.0f} s: {first_line(out, 'model.safetensors', 'reranker', 'error')[:170]}"
               f"; export folders holding only a .lock: {lock_only_exports() - was}")

    # 12. adapt again to the same --out, killed while training
    manifest = folder / "manifest.json"
    kept = manifest.read_text()
    proc = subprocess.Popen([*AUTOFOCUS, "adapt", "--skb", str(demo), *ADAPT, "--seed", "1", "--out", str(adapted)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "COLUMNS": "200"})
    assert proc.stdout is not None
    for line in proc.stdout:
        if "training the" in line:
            break
    time.sleep(5)
    during = "present" if manifest.exists() else "missing"
    proc.kill()
    proc.wait()
    loads = python(f"from autofocus.program.trained import TrainedParts; TrainedParts.load('{folder}'); print('loads')", 600)[1]
    left = sorted(p.name for p in adapted.parent.iterdir() if p.name not in ("adapted.json", "adapted.summary.json",
                                                                              "adapted.trained", ".adapted.json.lock"))
    yield ("12. `adapt` again to the same --out, `kill -9` 5 s into training",
           f"old manifest while training: {during}; after the kill: "
           f"{'unchanged' if manifest.exists() and manifest.read_text() == kept else 'gone' if not manifest.exists() else 'changed'}, "
           f"the old model {loads[-120:]}; left beside it: {left}")

    # 13. --out on a read-only filesystem
    mnt = TMP / "ro"
    mnt.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(mnt)], check=True, capture_output=True)
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        yield "13. `adapt --out` on a read-only filesystem", f"not run (mount: {exc})"
    else:
        try:
            rc, out, secs = run(*AUTOFOCUS, "adapt", "--skb", demo, *ADAPT, "--out", mnt / "adapted.json", timeout=3600)
            yield ("13. `adapt --out` on a read-only tmpfs", f"exit {rc}, {secs:.0f} s, "
                   f"{'mined first' if 'mining candidate lists' in out else 'nothing mined'}: {first_line(out, 'error', 'cannot', 'Read-only')[:200]}")
        finally:
            subprocess.run(["umount", str(mnt)], check=False, capture_output=True)

    # 14. fewer than ten questions
    qa = TMP / "qa-five"
    qa.mkdir()
    five = load_qa(demo, "train")[:5]
    pd.DataFrame({"id": [q.id for q in five], "query": [q.query for q in five],
                  "answer_ids": [json.dumps(list(map(int, q.answer_ids))) for q in five]}).to_csv(qa / "qa_five.csv", index=False)
    few = TMP / "few" / "adapted.json"
    rc, out, secs = run(*AUTOFOCUS, "adapt", "--skb", demo, "--split", "five", "--qa-dir", qa, "--epochs", "1",
                        "--no-progress", "--out", few, timeout=3600)
    record = json.loads((few.with_name("adapted.trained") / "manifest.json").read_text()) if rc == 0 else {}
    weight = json.loads(few.read_text())["config"]["rerank"].get("rerank_prior_weight") if few.exists() else None
    yield ("14. `adapt` on 5 questions", f"exit {rc}, {secs:.0f} s; said: "
           f"{first_line(out, 'no held-out') if 'no held-out' in out else 'nothing'}"[:200] +
           f"; manifest: held_out {record.get('held_out', 'not recorded')}, fusion "
           f"{(record.get('reranker') or {}).get('fusion', 'not recorded')}; program's fusion weight {weight}")

# --- issue 57: `lm serve` and its worker ------------------------------------------------------------------

NOBODY = 65534
QUESTION = "Which papers did Ada Lovelace write?"


class Served:
    """``autofocus lm serve --detach`` in ``home`` of a fake llama-server (each request ``latency`` s), or of
    llama.cpp's own server where a ``model`` is given."""

    def __init__(self, home: Path, latency: float = 0.0, model: str | None = None, **env: str) -> None:
        home.mkdir(parents=True, exist_ok=True)
        script = home.parent / f"llama-server-{home.name}"
        script.write_text(f"#!/bin/sh\nexec {sys.executable} {ROOT / 'tests' / 'fake_openai_server.py'} --p_yes 0.8 "
                          f"--choices '{{}}' --latency {latency} \"$@\"\n")
        script.chmod(0o755)
        gguf = home.parent / f"tiny-{home.name}.gguf"
        gguf.write_bytes(b"GGUF" + os.urandom(16))
        self.model = model or f"local:{gguf}"
        fake = {} if model else {"AUTOFOCUS_LLAMA_SERVER": str(script)}  # a model given: llama.cpp's own server
        self.env = {**os.environ, "AUTOFOCUS_HOME": str(home), **fake,
                    "AUTOFOCUS_MODELS": os.environ.get("AUTOFOCUS_MODELS", str(Path.home() / ".cache/autofocus/models")),
                    "COLUMNS": "200", **env}
        self.home = home
        self.started = run(*AUTOFOCUS, "lm", "serve", "--model", self.model, "--detach", "--parallel", "2",
                           env=self.env, timeout=600)
        self.record = next((json.loads(p.read_text()) for p in (home / "servers").glob("*.lock")
                            if p.read_text().strip()), {}) if (home / "servers").is_dir() else {}

    def url(self, route: str) -> str:
        return f"http://127.0.0.1:{self.record['port']}/{route}"

    def ask(self, *extra: Any, timeout: float = 300, **env: str) -> subprocess.Popen[str]:
        argv = [*AUTOFOCUS, "ask", QUESTION, "--skb", SKB, "--lm", self.model, "--system", "afr:steps=1-7", "-k", "3",
                *extra]
        return subprocess.Popen([str(a) for a in argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**self.env, **env})

    def stop(self) -> None:
        run(*AUTOFOCUS, "lm", "stop", env=self.env, timeout=120)


def _status(url: str, key: str | None = None, body: dict[str, Any] | None = None) -> int:
    import urllib.error
    import urllib.request

    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None, headers=headers)
    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _finished(proc: subprocess.Popen[str], timeout: float) -> tuple[Any, str, str, float]:
    start = time.perf_counter()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return "timeout", "", "", time.perf_counter() - start
    return proc.returncode, " ".join(out.split()), " ".join(err.split()), time.perf_counter() - start


def _mode(path: Path) -> str:
    try:
        return f"{os.lstat(path).st_mode & 0o777:o}"
    except OSError:
        return "-"


def _rss_mb(pid: int) -> str:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return f"{int(fields['VmRSS'].split()[0]) / 1024:.0f} MB (peak {int(fields['VmHWM'].split()[0]) / 1024:.0f})"


def _as_nobody(fn: Callable[[], None]) -> int:
    """Run ``fn`` in a forked process of another local user (uid 65534); its pid."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            fn()
        finally:
            os._exit(0)
    return pid


def _forge(path: Path, ready: int) -> None:
    """Another user's stand-in at a worker's socket: it reads what a client sends and answers a forged answer."""
    import socket

    with contextlib.suppress(OSError):
        path.unlink()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as srv:
        srv.bind(str(path))
        path.chmod(0o777)
        srv.listen()
        os.write(ready, b"x")
        srv.settimeout(120)
        conn, _ = srv.accept()
        conn.settimeout(10)
        got = b""
        with contextlib.suppress(OSError):
            while chunk := conn.recv(1 << 16):
                got += chunk
        (path.parent / "stolen.json").write_bytes(got)
        conn.sendall(json.dumps({"stdout": "FORGED ANSWER\n", "stderr": "", "code": 0}).encode() + b"\n")
        conn.close()


def _tail(text: str, *marks: str) -> str:
    return first_line(text, *marks)[:160] if text else "-"


def lm_serve_probes(gguf: Path | None) -> Iterator[tuple[str, str]]:
    """Issue 57's probes of `lm serve` and its worker (items 1-8), one row each."""
    import socket

    from autofocus.skb.writer import write_skb_dir

    write_skb_dir(SKB, {**TINY_SCHEMA, "candidate_types": ["paper", "author"]}, TINY_NODES, TINY_EDGES, TINY_QA,
                  TINY_SPLITS)

    # 1. another user made the socket's fallback folder first (a home whose socket path is too long)
    tmpdir = Path(tempfile.mkdtemp(prefix="hostile-tmp-", dir="/tmp"))  # a temporary folder both users reach
    tmpdir.chmod(0o1777)
    folder = tmpdir / f"autofocus-{os.getuid()}"
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)
    os.chown(folder, NOBODY, NOBODY)
    served = Served(TMP / ("h" * 90) / "home1", TMPDIR=str(tmpdir), OPENAI_API_KEY="sk-the-owners-key")
    row = f"`lm serve` exit {served.started[0]}: {_tail(served.started[1], 'error', 'serving')}"
    worker = Path(served.record.get("worker") or "")
    if served.record.get("worker") and worker.parent == folder:
        read_end, write_end = os.pipe()
        pid = _as_nobody(lambda: _forge(worker, write_end))
        os.close(write_end)
        if os.read(read_end, 1) != b"x":
            raise RuntimeError("the other user's process could not listen at the socket")
        rc, out, err, _ = _finished(served.ask(), 120)
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as poke:
            poke.connect(str(worker))
        os.waitpid(pid, 0)
        stolen = (folder / "stolen.json").read_text() if (folder / "stolen.json").exists() else ""
        row += (f"; `ask` exit {rc}: {'printed FORGED ANSWER' if 'FORGED' in out else 'its own answer'}; the other "
                f"user received {len(stolen)} bytes{', with OPENAI_API_KEY=sk-the-owners-key' if 'sk-the-owners' in stolen else ''}"
                f"{' and the question' if 'Ada Lovelace' in stolen else ''}")
    served.stop()
    shutil.rmtree(tmpdir, ignore_errors=True)
    yield "1. socket folder made first by another user (uid 65534, mode 777); that user answers at the socket", row

    # 2, 3, 7, 4, 5 on one served server
    served = Served(TMP / "home2")
    key = served.record.get("api_key")
    save = {"filename": "start-" + "0" * 32 + ".bin"}
    codes = [_status(served.url("props")), _status(served.url("slots")), _status(served.url("slots/0?action=save"), body=save)]
    planted = Path(served.record.get("slot_dir") or "/nonexistent") / save["filename"]
    yield ("2. another user, without the key: GET /props, GET /slots, POST /slots/0?action=save (fake llama-server)",
           f"HTTP {', '.join(map(str, codes))}; slot file written into the owner's prompt cache: {planted.exists()}"
           f"; key in the record: {'yes' if key else 'no'}")
    first = _finished(served.ask(), 300)
    code = python(f"""
        import os, time
        os.environ.update(AUTOFOCUS_HOME="{served.home}", AUTOFOCUS_LLAMA_SERVER="{served.env['AUTOFOCUS_LLAMA_SERVER']}",
                          AUTOFOCUS_MODELS="{served.env['AUTOFOCUS_MODELS']}")
        from autofocus import resident
        start = time.perf_counter()
        code = resident.forward(["ask", "{QUESTION}", "--skb", "{SKB}", "--lm", "{served.model}", "--system",
                                 "afr:steps=1-7", "-k", "3"])
        print(f"forward gave {{code}} in {{time.perf_counter() - start:.1f}} s")
    """, 300)
    taken = " ".join(code[1].split()[-6:])
    yield ("7. a plain shell's second `ask` after the first loaded the embedder (fake LM, tiny SKB)",
           f"first exit {first[0]}, {first[3]:.1f} s; second: {taken} ({'in the worker' if 'forward gave None' not in code[1] else 'declined: runs in its own process'})"
           f"{'; said: ' + _tail(code[1], 'did not take') if 'did not take' in code[1] else ''}")
    home = served.home
    record_file = next((home / "servers").glob("*.lock"))
    cache = Path(served.record.get("slot_dir") or "/nonexistent")
    starts = sorted(cache.glob("*.bin"))
    yield ("3. modes: servers/, its record, the socket, prompt-cache/, its settings' folder, a saved prompt start",
           f"{_mode(home / 'servers')}, {_mode(record_file)}, {_mode(Path(served.record['worker']))}, "
           f"{_mode(home / 'prompt-cache')}, {_mode(cache.parent)}, {_mode(starts[0]) if starts else '-'}")
    held = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    held.connect(served.record["worker"])
    held.sendall(b'{"argv": ["ask"')  # and never an end
    rc, out, err, secs = _finished(served.ask(), 90)
    held.settimeout(15)  # past the worker's read bound (10 s), where it has one
    try:
        dropped = held.recv(4096).decode(errors="replace").strip() or "closed"
    except OSError as exc:
        dropped = f"still open ({type(exc).__name__})"
    held.close()
    yield ("4. a connection to the worker held open without end-of-file; meanwhile an `ask`",
           f"`ask` {'over 90 s (stopped)' if rc == 'timeout' else f'exit {rc} in {secs:.1f} s'}; the held connection: {dropped[:120]}")
    pid = served.record["pid"]
    before = _rss_mb(pid)
    big = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    big.connect(served.record["worker"])
    start = time.perf_counter()
    request = json.dumps({"argv": ["ask", "x" * 100_000_000, "--skb", str(SKB)], "cwd": "/", "env": {}, "tty": [False, False]})
    with contextlib.suppress(OSError):
        big.sendall(request.encode())
        big.shutdown(socket.SHUT_WR)
    del request
    big.settimeout(300)
    try:
        answer = big.makefile("rb").read().decode(errors="replace").strip()
    except OSError as exc:
        answer = type(exc).__name__
    big.close()
    yield ("5. a 100 MB request to the worker: its answer; the serving process's memory before, after",
           f"{answer[:100] or 'nothing'} ({time.perf_counter() - start:.1f} s); {before}, {_rss_mb(pid)}")
    served.stop()

    # 6. a folder that is no knowledge base
    served = Served(TMP / "home6")
    proc = subprocess.Popen([*AUTOFOCUS, "ask", QUESTION, "--skb", "/usr", "--system", "vss"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=served.env)
    rc, out, err, secs = _finished(proc, 120)
    yield ("6. `ask --skb /usr` sent to the worker (137k files under /usr)",
           f"{'over 120 s (stopped)' if rc == 'timeout' else f'exit {rc} in {secs:.1f} s'}: {_tail(err + ' ' + out, '/usr')}")
    served.stop()

    # 8. lm serve killed during an ask
    for how, env in (("forwarded to the worker", {}), ("in its own process (AUTOFOCUS_RESIDENT=0)", {"AUTOFOCUS_RESIDENT": "0"})):
        served = Served(TMP / f"home8{len(env)}", latency=1.0)
        proc = served.ask("--lm-retries", "0", **env)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError, KeyError):
                import urllib.request
                with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(served.url("fake/stats"), timeout=5) as resp:
                    if json.load(resp)["requests"] > 0:
                        break
            time.sleep(0.2)
        os.kill(served.record["pid"], 9)
        rc, out, err, secs = _finished(proc, 300)
        said = _tail(err, "URLError", "Error", "degraded", "worker") if err else "-"
        yield (f"8. `kill -9` of `lm serve` while an `ask` waits on its LM ({how})",
               f"exit {rc}, {secs:.0f} s: {'answers printed' if 'Answers to' in out else 'no answers'}; "
               f"{'a traceback; ' if 'Traceback' in err else ''}{said}")

    if gguf is not None:
        served = Served(TMP / "home-gguf", model=f"local:{gguf}")
        key = served.record.get("api_key")
        codes = [_status(served.url(r)) for r in ("health", "v1/models", "props", "slots")]
        codes.append(_status(served.url("slots/0?action=save"), body=save))
        codes.append(_status(served.url("completion"), body={"prompt": "a", "n_predict": 1}))
        with_key = _status(served.url("props"), key) if key else "-"
        yield (f"2. llama.cpp's server ({gguf.name}) without the key: /health, /v1/models, /props, /slots, "
               "slots save, /completion; /props with it",
               f"HTTP {', '.join(map(str, codes))}; with the key {with_key}")
        served.stop()


if __name__ == "__main__":
    main()
