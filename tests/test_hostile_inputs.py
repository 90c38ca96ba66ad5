"""Hostile inputs, second round (issue 34): what a hostile user (or LM, or full disk) tried, and what
autofocus does now. One test per probe; each failed before its fix.

1. work bounds: a query of many MATCH clauses is cut to caps and the question degraded; step 3b's
   search and the relaxations stop at the question's deadline; the parser stays linear;
2. a full disk: an index store refuses to start (free space, ``posix_fallocate``) instead of SIGBUS;
3. import keeps values as written: ``NA`` is a value, one odd id dangles alone, bad bytes and bad
   rows are named by file and line/row;
4. one writer per run directory and per index store;
5. reports say when a run is incomplete or degraded; nothing answered exits non-zero; intervals do
   not depend on line order;
6. no secret in DSPy's cache; keys of any length redacted;
7. terminal escapes, a STaRK ``node_info.pkl`` that is no dict, a ``--program`` that is no JSON, a
   symbolic link loop, the timeout hint, tokens of calls that never reached a server.
"""

from __future__ import annotations

import errno
import json
import os
import pickle
import re
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import dspy
import numpy as np
import pandas as pd
import pytest
from dspy.clients.cache import Cache
from typer.testing import CliRunner

from autofocus import paths, runtime, usage
from autofocus.cli import app
from autofocus.cli_app import EXIT_NOTHING, EXIT_PARTIAL
from autofocus.console import safe
from autofocus.cypher import parse_cypher
from autofocus.cypher.lexer import tokenize
from autofocus.cypher.query_caps import MAX_TRIPLETS
from autofocus.evaluation import runner
from autofocus.evaluation.report import load_run, summarize
from autofocus.evaluation.runner import RunBusyError, run_eval
from autofocus.index import store as store_mod
from autofocus.index.build import build_embeddings
from autofocus.index.embedders import l2_normalise
from autofocus.language import language
from autofocus.program.steps.grounded_strand import StrandSettings, parse_step, repair_step
from autofocus.program.steps.llm_call import describe_error
from autofocus.program.steps.reading import QuestionReading
from autofocus.program.steps.repairs import repair_query
from autofocus.redact import REDACTED, redact, register_secret
from autofocus.skb.importers import import_skb
from autofocus.skb.importers.model import ImportOptions, SourceError
from autofocus.skb.skbdir import load_skb_dir
from autofocus.skb.writer import write_skb_dir
from autofocus.trace import Trace
from tests.fake_openai_server import FakeOpenAIServer, chat_adapter_reply
from tests.test_systems_common import HashEmbedder, ScriptedLM, make_kb

QUESTION = "Which papers cite Graph Retrieval at Scale?"
STARK = Path(__file__).parent / "fixtures" / "stark"


def clauses(n: int) -> str:
    return "\n".join(f"MATCH (n{i}:paper)-[:paper_cites_paper]->(m{i}:paper)" for i in range(n)) + "\nRETURN n0"


def cli(*args: Any) -> Any:
    """The command's result, its output with the terminal's line wrapping undone (``.text``)."""
    res = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "300"})
    res.text = " ".join(res.output.split())
    return res


# --- 1. work bounds ---------------------------------------------------------------------------------


def test_a_query_of_many_clauses_is_capped_degraded_and_repaired_in_bounded_time(tiny_skb: Any,
                                                                                tmp_path: Path) -> None:
    kb = make_kb(tiny_skb, tmp_path / "kb")  # steps 3 and 3b read the SKB only
    trace = Trace(question=QUESTION)
    start = time.perf_counter()
    qg = parse_step(kb, clauses(60), "paper", runtime.load_config(None).grounding, trace)
    repaired = repair_step(kb, qg, "paper", trace)
    assert time.perf_counter() - start < 10  # was minutes: 20,000 assignments x 60 triplets
    assert qg is not None and len(qg.triplets) == MAX_TRIPLETS and len(repaired.query.triplets) <= MAX_TRIPLETS
    assert [d.step for d in trace.degraded][:1] == ["3_parse"] and "60 triplets" in trace.degraded[0].error


def test_repair_stops_its_search_at_the_question_deadline(tiny_skb: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    untyped = "\n".join(f"MATCH (a{i})-[:linked]->(b{i})" for i in range(MAX_TRIPLETS)) + "\nRETURN a0"
    qg = parse_cypher(untyped, tiny_skb.schema, target_type="paper")
    assert not qg.capped  # within the caps: only the deadline can stop it (4^24 readings, 20,000 scored)
    now = [0.0]
    monkeypatch.setattr(usage, "clock", lambda: now[0])
    calls = {"n": 0}
    real = usage.deadline_passed

    def passed() -> bool:  # time moves on as the search looks at the clock
        calls["n"] += 1
        now[0] += 1.0
        return real()

    monkeypatch.setattr("autofocus.program.steps.repairs.solver.deadline_passed", passed)
    with usage.question_deadline(2.5):
        result = repair_query(qg, QuestionReading(QUESTION, tiny_skb, language("en")), "paper")
    assert calls["n"] == 3 and result.cut and re.search(r"deadline passed after 768 of [\d,]+ label", result.cut[0])
    assert result.query.target == "a0"  # the best reading found before the deadline


def test_grounding_and_relaxation_stop_at_the_deadline(tiny_skb: Any, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from autofocus.program.steps.grounded_strand import ground_strand

    kb = make_kb(tiny_skb, tmp_path / "kb")
    cfg = runtime.load_config(None)
    query = "MATCH (p:paper)-[:paper_cites_paper]->(q:paper {title: 'Nothing At All'})-[:paper_extends_paper]->(r:paper) RETURN p"
    free = Trace(question="Which papers cite Nothing At All?")
    ground_strand(kb, parse_step(kb, query, "paper", cfg.grounding, free), StrandSettings.of(cfg), free, "paper")
    assert len(free.data["grounding_rounds"]) + len(free.data["relaxed"]) > 1 and not free.degraded
    trace = Trace(question="Which papers cite Nothing At All?")
    qg = parse_step(kb, query, "paper", cfg.grounding, trace)
    monkeypatch.setattr(usage, "clock", lambda: 100.0)
    with usage.question_deadline(1.0):
        monkeypatch.setattr(usage, "clock", lambda: 200.0)  # the deadline passed before grounding
        ground_strand(kb, qg, StrandSettings.of(cfg), trace, "paper")
    assert len(trace.data["grounding_rounds"]) == 1 and trace.data["relaxed"] == []
    assert {d.step for d in trace.degraded} & {"5_grounding", "5_relax"}


def test_the_parser_stays_linear_on_ten_thousand_clauses() -> None:
    from autofocus.cypher.parser import parse_statement

    def seconds(n: int) -> float:
        text = clauses(n)
        start = time.perf_counter()
        parse_statement(text, tokenize(text))
        return time.perf_counter() - start

    small, large = seconds(1000), seconds(10_000)
    assert large < 60 and large < 40 * max(small, 0.01)  # 10x the clauses, not 100x the time (5 s when idle)
    start = time.perf_counter()
    qg = parse_cypher(clauses(10_000))  # the whole step 3: cut to MAX_QUERY_CHARS first
    assert time.perf_counter() - start < 5 and len(qg.triplets) == MAX_TRIPLETS and qg.capped


def uncached_hash_kb(skb_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Programs opened on ``skb_dir`` get the hashing embedder's knowledge base, and DSPy caches no answer
    (each run asks the fake LM server again)."""
    kb = make_kb(load_skb_dir(skb_dir), tmp_path / "kb", source=skb_dir)
    monkeypatch.setattr(runtime, "open_kb", lambda *args, **kw: kb)
    monkeypatch.setattr(dspy, "cache", Cache(False, False, "", 0, 0), raising=False)


def test_eval_with_an_lm_writing_ten_thousand_clauses_ends_each_question_in_time_and_degraded(
    two_type_skb: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uncached_hash_kb(two_type_skb, tmp_path, monkeypatch)
    hostile = clauses(10_000)

    def answer(body: dict[str, Any]) -> str:
        outputs = body["messages"][0]["content"].split("Your output fields are:")[1]
        return chat_adapter_reply(target_type="paper") if "`target_type`" in outputs else chat_adapter_reply(cypher=hostile)

    deadline = 20.0
    with FakeOpenAIServer(answer) as srv:
        monkeypatch.setenv("AUTOFOCUS_LM_API_BASE", srv.api_base)
        res = cli("eval", "--skb", two_type_skb, "--split", "train", "--out", tmp_path / "run", "--system",
                  "afr:steps=1-7", "--lm", "openai/fake", "--no-progress", "--deadline", deadline, "--concurrency", 1)
    assert res.exit_code == EXIT_NOTHING, res.output  # every question degraded: none answered by the method
    records = [json.loads(line) for line in (tmp_path / "run" / "traces.jsonl").read_text().splitlines()]
    assert len(records) == 3
    for r in records:
        assert r["seconds"] < deadline and r["status"] == "degraded" and r["ranked"]
        assert {d["step"] for d in r["degraded"]} == {"3_parse"}


# --- 2. a full disk ---------------------------------------------------------------------------------


def test_an_index_store_the_disk_cannot_hold_fails_before_writing(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    usage_ = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(store_mod.shutil, "disk_usage", lambda p: usage_._replace(free=10 << 20))
    with pytest.raises(store_mod.DiskFullError, match=r"needs .* MiB free"):
        store_mod.EmbeddingStore.create(tmp_path / "a", model="m", dim=384, variant="text", doc_budget_tokens=128,
                                        skb_fingerprint="f", num_nodes=100_000)
    assert not (tmp_path / "a" / store_mod.VECTORS).exists()
    monkeypatch.undo()

    def full(fd: int, offset: int, length: int) -> None:  # what a filesystem without the blocks says
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store_mod.os, "posix_fallocate", full)
    with pytest.raises(store_mod.DiskFullError, match="no space for the embeddings"):
        store_mod.EmbeddingStore.create(tmp_path / "b", model="m", dim=8, variant="text", doc_budget_tokens=128,
                                        skb_fingerprint="f", num_nodes=10)
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == []  # nothing sparse left behind


def test_index_build_on_a_full_disk_is_one_line_not_a_bus_error(tiny_skb_dir: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_mod.os, "posix_fallocate",
                        lambda fd, off, n: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left on device")))
    monkeypatch.setattr("autofocus.kb.get_embedder", lambda spec: HashEmbedder(), raising=False)
    res = cli("index", "build", tiny_skb_dir, "--variant", "text", "--embedder", "hash", "--index-dir", tmp_path / "i")
    assert res.exit_code == 1 and "no space for the embeddings" in res.text and "Traceback" not in res.text


# --- 3. import keeps every value as written ---------------------------------------------------------


def test_import_keeps_na_and_matches_ids_one_by_one(tmp_path: Path) -> None:
    src = tmp_path / "t"
    src.mkdir()
    (src / "nodes.csv").write_text("id,type,name,code\n1,country,Namibia,NA\nNA,element,Sodium,Na\n"
                                   "3,country,Chad,TD\n007,country,Bond,\n")
    (src / "edges.csv").write_text("src,type,dst\n1,borders,3\n3,borders,1\nx9,borders,1\nNA,found_in,1\n007,borders,3\n")
    result = import_skb(src, tmp_path / "skb", ImportOptions(drop_dangling=True))
    skb = load_skb_dir(tmp_path / "skb")
    ids = pd.read_csv(tmp_path / "skb" / "source_ids.csv", dtype=str, keep_default_na=False)["source_id"].tolist()
    assert ids == ["1", "NA", "3", "007"]  # 'NA' is a node, '007' is not 7
    assert skb.attributes(0) == {"code": "NA"} and "code" not in skb.attributes(3)  # an empty cell is missing
    assert result.nodes == 4 and sum(result.edge_types.values()) == 4  # only x9 dangles


def test_bad_bytes_and_bad_rows_are_named_by_file_and_line(tmp_path: Path) -> None:
    src = tmp_path / "t"
    src.mkdir()
    (src / "nodes.csv").write_bytes(b"id,type,name\n1,person,Bob\n2,person,Al\xffice\n")
    with pytest.raises(SourceError, match=r"^nodes\.csv: line 3: bytes that are not UTF-8"):
        import_skb(src, tmp_path / "a")
    (src / "nodes.csv").write_text("id,type,name\n1,person,Bob\n2,person,Alice,extra\n")
    with pytest.raises(SourceError, match=r"^nodes\.csv: row 2: Expected 3 columns, got 4"):
        import_skb(src, tmp_path / "b")
    (src / "nodes.csv").unlink()
    table = pd.DataFrame({"id": ["1", "2"], "type": ["person"] * 2, "name": [b"Bob", b"Al\xffice"]})
    table.to_parquet(src / "nodes.parquet")
    with pytest.raises(SourceError, match=r"^nodes\.parquet: row 2: column 'name' holds bytes that are not UTF-8"):
        import_skb(src, tmp_path / "c")
    table.assign(name=[b"Bob", b"Alice"]).to_parquet(src / "nodes.parquet")
    import_skb(src, tmp_path / "d")
    assert "b'" not in (tmp_path / "d" / "nodes.jsonl").read_text()


# --- 4. one writer ------------------------------------------------------------------------------------


class Item:
    def __init__(self, i: int) -> None:
        self.id, self.query, self.answer_ids = i, f"question {i}", [i]


def answer(question: str) -> dspy.Prediction:
    return dspy.Prediction(ranked_ids=[int(question.split()[-1])], trace=Trace(question=question))


def test_a_second_writer_of_a_run_directory_is_refused_and_moves_nothing(
    tmp_path: Path, tiny_skb_dir: Path, tiny_skb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime, "open_kb", lambda *args, **kw: make_kb(tiny_skb, tmp_path / "kb", tiny_skb_dir))
    out = tmp_path / "run"
    run_eval(lambda: answer, [Item(1)], out)
    before = sorted(p.name for p in out.iterdir())
    with paths.locked(out / runner.LOCK_FILE):  # another eval holds it
        with pytest.raises(RunBusyError, match="being written by process"):
            run_eval(lambda: answer, [Item(1), Item(2)], out)
        with pytest.raises(RunBusyError):
            run_eval(lambda: answer, [Item(1)], out, resume=False)  # --force-new
        res = cli("eval", "--skb", tiny_skb_dir, "--split", "train", "--out", out, "--system", "vss", "--no-progress")
    assert res.exit_code == 2 and "being written by process" in res.text
    assert sorted(p.name for p in out.iterdir()) == before  # nothing moved, nothing run twice
    assert len((out / "traces.jsonl").read_text().splitlines()) == 1


def test_a_manifest_is_written_through_a_temporary_file_of_its_own(tmp_path: Path) -> None:
    other = tmp_path / "manifest.json.tmp"  # the temporary file another writer is filling
    other.write_text("another writer's half")
    runner._write_json(tmp_path / "manifest.json", {"a": 1})
    store_mod._write_json_atomic(tmp_path / "store.json", {"b": 2})
    assert other.read_text() == "another writer's half" and json.loads((tmp_path / "manifest.json").read_text()) == {"a": 1}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_write_that_fails_leaves_the_file_as_it_was_and_no_temporary_file(tmp_path: Path) -> None:
    """``paths.replaced_atomically``, which binary caches (a FAISS index, an assembled model) are written
    through: the target is whole or as before, never half-written, and a failed writer's file is gone."""
    target = tmp_path / "index.faiss"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="the writer failed"), paths.replaced_atomically(target) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("the writer failed")
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["index.faiss"]
    with paths.replaced_atomically(target) as tmp:
        tmp.write_bytes(b"new")
    assert target.read_bytes() == b"new" and [p.name for p in tmp_path.iterdir()] == ["index.faiss"]
    assert target.stat().st_mode & 0o777 == 0o644  # readable by the people who read the cache, as before


class SlowEmbedder(HashEmbedder):
    def embed(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        time.sleep(0.05)
        return l2_normalise(super().embed(texts, batch_size=batch_size))


def test_two_index_builds_of_one_store_take_turns(tiny_skb: Any, tmp_path: Path) -> None:
    results: list[Any] = []

    def build() -> None:
        try:
            results.append(build_embeddings(tiny_skb, SlowEmbedder(), "text", tmp_path / "s", chunk_size=2,
                                            progress=False))
        except Exception as exc:
            results.append(exc)

    threads = [threading.Thread(target=build) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [type(r).__name__ for r in results] == ["EmbeddingStore"] * 2, results  # not "manifest.json exists"
    assert all(r.complete and r.consistent for r in results)
    store_mod.EmbeddingStore.open(tmp_path / "s").verify()


# --- 5. reports that say what they are ------------------------------------------------------------


def record(i: int, status: str = "ok", mrr: float = 1.0) -> dict[str, Any]:
    return {"v": 1, "id": i, "query": f"q{i}", "gold": [i], "status": status, "ranked": [i], "n_ranked": 1,
            "metrics": {"hit@1": float(mrr == 1.0), "mrr": mrr}, "derived": {}, "trace": None, "seconds": 0.1}


def write_run(out: Path, records: list[dict[str, Any]], questions: int) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / "traces.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (out / "manifest.json").write_text(json.dumps({"system": "afr", "sessions": [
        {"started": "x", "questions": questions, "todo": questions, "skipped": 0}]}))
    return out


def test_report_says_a_run_is_incomplete_and_counts_degraded_apart(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", [record(1), record(2, "degraded")], questions=4)
    res = cli("report", run)
    assert res.exit_code == 0 and "2 of 4 questions; run incomplete" in res.text
    s = json.loads((run / "summary.json").read_text())
    assert (s["n"], s["expected"], s["complete"], s["n_ok"], s["n_degraded"]) == (2, 4, False, 1, 1)


def test_intervals_do_not_depend_on_line_order(tmp_path: Path) -> None:
    recs = [record(i, mrr=m) for i, m in enumerate([1.0, 0.5, 0.25, 0.2, 1.0, 0.0, 0.33, 0.5], start=1)]
    a = summarize(load_run(write_run(tmp_path / "a", recs, 8)).records)
    b = summarize(load_run(write_run(tmp_path / "b", recs[::-1], 8)).records)
    assert a["metrics"]["mrr"] == b["metrics"]["mrr"] and a["metrics"]["mrr"]["ci"] == "bootstrap"
    assert summarize(recs)["metrics"] == summarize(recs[::-1])["metrics"]


def test_eval_of_an_empty_split_fails(tiny_skb_data: dict[str, Any], tiny_skb: Any, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    d = tiny_skb_data
    write_skb_dir(tmp_path / "skb", d["schema"], d["nodes"], d["edges"], d["qa"], {**d["splits"], "empty": []})
    monkeypatch.setattr(runtime, "open_kb", lambda *args, **kw: make_kb(tiny_skb, tmp_path / "kb", tmp_path / "skb"))
    res = cli("eval", "--skb", tmp_path / "skb", "--split", "empty", "--out", tmp_path / "run", "--system", "vss",
              "--no-progress")
    assert res.exit_code == 1 and "has no questions" in res.text


def test_ask_exits_non_zero_when_no_lm_call_answered(two_type_skb: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    kb = make_kb(load_skb_dir(two_type_skb), tmp_path / "kb", source=two_type_skb)
    monkeypatch.setattr(runtime, "open_kb", lambda *args, **kw: kb)
    monkeypatch.setenv("AUTOFOCUS_LM_API_BASE", "http://127.0.0.1:9/v1")  # nothing listens there
    res = cli("ask", QUESTION, "--skb", two_type_skb, "--lm", "openai/fake", "--lm-retries", "0")
    assert res.exit_code == EXIT_NOTHING and "degraded" in res.text and "Answers to" in res.text


# --- 6. credentials ----------------------------------------------------------------------------------


def test_a_key_echoed_in_a_successful_answer_is_not_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from autofocus.lm import get_lm

    key = "sk-cache-0123456789abcdefghij"
    monkeypatch.setattr(dspy, "cache", Cache(True, True, str(tmp_path / "cache")), raising=False)

    def echo(body: dict[str, Any]) -> str:
        text = body["messages"][-1]["content"]
        return f"your key is {key}" if "echo" in text else "a plain answer"

    with FakeOpenAIServer(echo) as srv:
        lm = get_lm("openai/fake", api_base=srv.api_base, api_key=key, num_retries=0)
        assert lm("please echo")[0].endswith(key) and lm("please answer")[0] == "a plain answer"
        assert lm("please answer")[0] == "a plain answer" and len(srv.requests) == 2  # the plain one was cached
        assert lm("please echo")[0].endswith(key) and len(srv.requests) == 3  # the echo never was
    dspy.cache.disk_cache.close()
    stored = b"".join(p.read_bytes() for p in (tmp_path / "cache").rglob("*") if p.is_file())
    assert b"a plain answer" in stored and key.encode() not in stored


def test_keys_of_any_length_are_redacted_without_garbling_words(tmp_path: Path) -> None:
    register_secret("k3y9z")
    assert redact("sent key=k3y9z to the server") == f"sent key={REDACTED} to the server"
    assert redact("k3y9zebra") == "k3y9zebra"  # inside a longer word: left alone

    def leaky(question: str) -> dspy.Prediction:
        trace = Trace(question=question)
        trace.degrade("2_query", "401: the key k3y9z was rejected")
        return dspy.Prediction(ranked_ids=[1], trace=trace)

    run_eval(lambda: leaky, [Item(1)], tmp_path / "run")
    assert "k3y9z" not in (tmp_path / "run" / "traces.jsonl").read_text()


# --- 7. smaller ---------------------------------------------------------------------------------------


def test_terminal_escape_sequences_from_an_lm_never_reach_the_terminal() -> None:
    hostile = "MATCH (p:paper) \x1b[2J\x1b]0;owned\x07\x1b[31mRETURN\x1b[0m p\x08\x9b1m"
    shown = safe(hostile)
    assert "\x1b" not in shown and "\x07" not in shown and "\x08" not in shown and "\x9b" not in shown
    assert shown == "MATCH (p:paper) RETURN p1m"


def test_a_stark_node_info_that_is_no_dict_is_named(tmp_path: Path) -> None:
    root = tmp_path / "mag_like"
    shutil.copytree(STARK / "mag_like", root)
    with (root / "processed" / "node_info.pkl").open("wb") as fh:
        pickle.dump(42, fh)
    res = cli("skb", "info", root)
    assert res.exit_code == 1 and "node_info.pkl" in res.text and "expected a dict" in res.text


def test_a_program_file_that_is_no_json_is_one_line(tiny_skb_dir: Path, tmp_path: Path) -> None:
    bad = tmp_path / "prog.json"
    bad.write_text("not json at all")
    for command in (("ask", QUESTION, "--skb", tiny_skb_dir), ("eval", "--skb", tiny_skb_dir, "--out", tmp_path / "r")):
        res = cli(*command, "--program", bad)
        assert res.exit_code == 1 and "not a program file" in res.text, res.output


def test_a_symlink_loop_is_reported_as_one(tmp_path: Path) -> None:
    loop = tmp_path / "loop"
    os.symlink(loop, loop)
    res = cli("skb", "info", loop)
    assert res.exit_code == 1 and "symbolic link loop" in res.text
    dangling = tmp_path / "dangling"
    os.symlink(tmp_path / "gone", dangling)
    assert "which does not exist" in cli("skb", "info", dangling).text


def test_the_timeout_hint_names_the_option_a_user_has() -> None:
    exc = TimeoutError("no bytes for 5s; this is lm15's read timeout, not a server failure — raise it with "
                       "Timeouts(read=...) if the model needs longer")
    assert "--lm-timeout" in describe_error(exc) and "Timeouts(" not in describe_error(exc)


def test_a_call_that_never_reached_a_server_counts_no_tokens() -> None:
    usage.install_usage_callback()
    lm = dspy.LM("openai/fake", api_base="http://127.0.0.1:9/v1", api_key="x", num_retries=0, cache=False)
    with usage.usage_scope() as used, pytest.raises(Exception):  # noqa: B017 (connection refused, as DSPy types it)
        lm("a long prompt " * 800)
    assert used.calls == 1 and used.input_tokens == 0 and used.output_tokens == 0


# === third round (issue 47) ===========================================================================
# --- 1. a damaged index store fails on open, and index build embeds it again -------------------------


def built_store(skb: Any, directory: Path) -> store_mod.EmbeddingStore:
    return build_embeddings(skb, HashEmbedder(), "text", directory, chunk_size=4, progress=False)


def test_a_truncated_store_is_refused_unpadded_and_index_build_embeds_it_again(tiny_skb: Any, tmp_path: Path,
                                                                             caplog: pytest.LogCaptureFixture) -> None:
    directory = tmp_path / "store"
    vectors = np.array(built_store(tiny_skb, directory).vectors)
    path = directory / store_mod.VECTORS
    half = path.stat().st_size // 2
    os.truncate(path, half)
    for writable in (False, True):
        with pytest.raises(store_mod.IndexCorruptError, match=r"embeddings\.f16\.npy: [\d,]+ bytes, cut short"):
            store_mod.EmbeddingStore.open(directory, writable=writable)
    assert path.stat().st_size == half  # a writable open padded nothing with zeros
    with caplog.at_level("WARNING"):
        store = built_store(tiny_skb, directory)
    assert re.search(r"embeddings\.f16\.npy: [\d,]+ bytes, cut short .*; building the store again from nothing",
                     caplog.text)
    assert store.complete and np.array_equal(np.asarray(store.vectors), vectors)  # every row again, none zero


def test_same_size_garbage_in_the_vectors_or_a_faiss_file_is_not_served(tiny_skb: Any, tmp_path: Path,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    from autofocus.index.search import NodeIndex

    directory = tmp_path / "store"
    store = built_store(tiny_skb, directory)
    index = NodeIndex(store, tiny_skb.node_type, tiny_skb.node_type_names)
    query = HashEmbedder().embed(["graph retrieval"])[0]
    expected = index.search(query, node_type="paper", k=3)
    faiss_file = next((directory / "faiss").rglob("*paper*.faiss"))
    size = faiss_file.stat().st_size
    with faiss_file.open("r+b") as fh:  # the header kept, the codes overwritten
        fh.seek(size // 2)
        fh.write(np.random.default_rng(0).bytes(size - size // 2))
    with caplog.at_level("WARNING"):
        again = NodeIndex(store_mod.EmbeddingStore.open(directory), tiny_skb.node_type, tiny_skb.node_type_names)
        found = again.search(query, node_type="paper", k=3)
    assert "its bytes changed since it was written" in caplog.text
    assert np.array_equal(found[0], expected[0]) and faiss_file.stat().st_size == size
    path = directory / store_mod.VECTORS
    with path.open("r+b") as fh:
        fh.seek(path.stat().st_size - 64)
        fh.write(b"\x7f" * 64)
    with pytest.raises(store_mod.IndexCorruptError, match="content changed since it was written"):
        store_mod.EmbeddingStore.open(directory)


def test_a_done_mask_that_disagrees_with_the_manifest_is_damage(tiny_skb: Any, tmp_path: Path) -> None:
    directory = tmp_path / "store"
    built_store(tiny_skb, directory)
    done = np.load(directory / store_mod.DONE, mmap_mode="r+")
    done[:3] = False
    done.flush()
    with pytest.raises(store_mod.IndexCorruptError, match=r"done\.npy: marks 9 rows done, the manifest 12"):
        store_mod.EmbeddingStore.open(directory)


def test_an_empty_or_corrupt_manifest_is_one_line_naming_it(tiny_skb: Any, tiny_skb_dir: Path, tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    from autofocus.kb import manifests

    root = tmp_path / "idx"
    directory = store_mod.store_dir(root, HashEmbedder.name, "text", 128)
    built_store(tiny_skb, directory)
    for text in ("", '{"model": "m"}', "not json"):
        (directory / store_mod.MANIFEST).write_text(text)
        with pytest.raises(store_mod.IndexCorruptError, match=r"manifest\.json: unreadable manifest"):
            store_mod.EmbeddingStore.open(directory)
        with caplog.at_level("WARNING"):
            assert manifests(root) == []  # every command that lists the stores goes on
        assert "unreadable manifest" in caplog.text
        res = cli("index", "info", tiny_skb_dir, "--index-dir", root)
        assert res.exit_code == 1 and "manifest.json: unreadable manifest" in res.text and "Traceback" not in res.text


def test_index_build_checks_the_disk_before_embedding_anything(tiny_skb: Any, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    usage_ = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(store_mod.shutil, "disk_usage", lambda p: usage_._replace(free=1 << 20))
    embedded: list[int] = []

    class Counting(HashEmbedder):
        def embed(self, texts: Any, batch_size: int = 64, progress: bool = False) -> Any:
            embedded.append(len(texts))
            return super().embed(texts, batch_size)

    with pytest.raises(store_mod.DiskFullError, match="the index needs"):
        build_embeddings(tiny_skb, Counting(), "text", tmp_path / "s", progress=False)
    assert embedded == []  # refused before the first chunk, not after it


def test_an_index_folder_that_cannot_be_written_is_one_line(tiny_skb: Any, tiny_skb_dir: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    import faiss

    from autofocus.index.search import NodeIndex

    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setattr("autofocus.kb.get_embedder", lambda spec: HashEmbedder(), raising=False)
    res = cli("index", "build", tiny_skb_dir, "--variant", "text", "--embedder", "hash", "--index-dir", blocked / "idx")
    assert res.exit_code == 1 and "a-file/idx" in res.text and "Traceback" not in res.text
    store = built_store(tiny_skb, tmp_path / "store")

    def read_only(index: Any, path: str) -> None:  # what FAISS's writer says in a read-only folder
        raise RuntimeError(f"Error in faiss::FileIOWriter: could not open {path} for writing: Read-only file system")

    monkeypatch.setattr(faiss, "write_index", read_only)
    with caplog.at_level("WARNING"):
        ids, _ = NodeIndex(store, tiny_skb.node_type, tiny_skb.node_type_names).search(
            HashEmbedder().embed(["graph"])[0], k=3)
    assert len(ids) == 3 and "keeping it in memory" in caplog.text
    kb = make_kb(tiny_skb, tmp_path / "kb")  # a damaged store in a folder where it cannot be built again
    kb.index("text")
    (kb.store_dir("text") / store_mod.DONE).unlink()
    kb = make_kb(tiny_skb, tmp_path / "kb")
    monkeypatch.setattr("autofocus.kb.build_embeddings", lambda *a, **k: (_ for _ in ()).throw(
        OSError(errno.EROFS, "Read-only file system", str(kb.store_dir("text") / store_mod.LOCK))))
    with pytest.raises(store_mod.IndexCorruptError, match=r"done\.npy is missing; building it again failed: .*\.lock: "
                                                          r"Read-only file system"):
        kb.index("text")


# --- 2. a question too long for the LM ---------------------------------------------------------------


def overflowing(body: dict[str, Any]) -> dict[str, Any]:
    """What llama-server answers to a prompt over its context window."""
    return {"status": 400, "json": {"error": {"code": 400, "type": "exceed_context_size_error", "message":
            "the request exceeds the available context size, try increasing it"}}}


def test_a_prompt_over_the_context_window_degrades_the_question_and_a_resume_asks_it_again(
    two_type_skb: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uncached_hash_kb(two_type_skb, tmp_path, monkeypatch)
    args = ("eval", "--skb", two_type_skb, "--split", "train", "--out", tmp_path / "run", "--system", "afr:steps=1-7",
            "--lm", "openai/fake", "--no-progress", "--lm-retries", 0)
    with FakeOpenAIServer(overflowing) as srv:
        monkeypatch.setenv("AUTOFOCUS_LM_API_BASE", srv.api_base)
        res = cli(*args)
        assert res.exit_code == EXIT_NOTHING, res.output
        assert "none of its 3 questions was answered by the method" in res.text
        records = [json.loads(line) for line in (tmp_path / "run" / "traces.jsonl").read_text().splitlines()]
        assert {r["status"] for r in records} == {"degraded"}
        for r in records:
            steps = {d["step"]: d["error"] for d in r["degraded"]}
            assert set(steps) == {"1_target_type", "2_query"}
            assert all(e.startswith("context window: the prompt does not fit") for e in steps.values())
        asked = srv.request_count
        assert cli(*args).exit_code == EXIT_NOTHING and srv.request_count > asked  # the resume asked them again


def test_a_question_over_the_length_bound_is_refused_before_any_lm_call(
    two_type_skb: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autofocus.evaluation.runner import evaluate_one

    kb = make_kb(load_skb_dir(two_type_skb), tmp_path / "kb", source=two_type_skb)
    monkeypatch.setattr(runtime, "open_kb", lambda *args, **kw: kb)
    lm = ScriptedLM({"target_type": lambda user: {"target_type": "paper"}})
    long = "Which papers cite " + "Graph Retrieval at Scale " * 200
    program = runtime.open_program(two_type_skb, "afr:steps=1-7", lms=lm)
    with pytest.raises(usage.QuestionTooLongError, match=r"has 5,018 characters, more than runtime\.max_question_chars \(4,000\)"):
        program(question=long)
    assert lm.calls == []
    record = evaluate_one(program, type("Q", (), {"id": 1, "query": long, "answer_ids": [0]})())
    assert record["status"] == "error" and record["error"].startswith("QuestionTooLongError")  # retried on resume
    vss = runtime.open_program(two_type_skb, "vss")  # no LM step: no bound
    assert len(vss(question=long).ranked_ids)
    res = cli("ask", long, "--skb", two_type_skb, "--system", "afr:steps=1-7", "--lm", "openai/fake")
    assert res.exit_code == 1 and "max_question_chars" in res.text and "Traceback" not in res.text
    assert len(runtime.open_program(two_type_skb, "afr:steps=1-7,max_question_chars=6000", lms=lm)(
        question=long).ranked_ids)


# --- 3. a column named twice ---------------------------------------------------------------------------


def test_a_column_named_twice_is_an_error_naming_it(tmp_path: Path) -> None:
    tables = {"id,type,name,text,name,text\n1,a,A,first,B,second\n": r"'name' is columns 3, 5; 'text' is columns 4, 6",
              ":ID,:LABEL,name,:ID\n1,a,A,9\n2,a,B,8\n": r"':ID' is columns 1, 4"}
    for i, (table, named) in enumerate(tables.items()):
        src = tmp_path / f"t{i}"
        src.mkdir()
        (src / "nodes.csv").write_text(table)
        with pytest.raises(SourceError, match=rf"^nodes\.csv: line 1 \(the header\): a column name given more than "
                                              rf"once \({named}\)"):
            import_skb(src, tmp_path / f"out{i}")
        assert not (tmp_path / f"out{i}" / "nodes.jsonl").exists()


# --- 4. exit codes that say what happened ---------------------------------------------------------------


class Raising(dspy.Module):
    system, program_file = "raising", None

    def __init__(self, kb: Any, config: Any) -> None:
        super().__init__()
        self.kb, self.config = kb, config

    def forward(self, question: str) -> dspy.Prediction:
        raise RuntimeError("the model file is cut short")


def test_eval_and_report_exit_4_when_every_question_raised(tiny_skb_dir: Path, tiny_skb: Any, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from autofocus.program.systems import registry

    monkeypatch.setattr(runtime, "open_kb", lambda *args, **kw: make_kb(tiny_skb, tmp_path / "kb", tiny_skb_dir))
    monkeypatch.setitem(registry._SYSTEMS, "raising", (lambda kb, cfg, spec: Raising(kb, cfg), {}))
    res = cli("eval", "--skb", tiny_skb_dir, "--split", "train", "--out", tmp_path / "run", "--system", "raising",
              "--no-progress")
    assert res.exit_code == EXIT_NOTHING, res.output
    assert "none of its 3 questions was answered by the method: 3 raised (RuntimeError 3)" in res.text
    report = cli("report", tmp_path / "run")
    assert report.exit_code == EXIT_NOTHING and "none of its 3 questions" in report.text
    ok = write_run(tmp_path / "ok", [record(1), record(2, "error")], questions=2)
    assert cli("report", ok).exit_code == 0  # something was answered: the tables say the rest


def test_eval_exits_3_when_some_questions_raised(tiny_skb_dir: Path, tiny_skb: Any, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from autofocus.program.systems import registry
    from autofocus.program.systems.baselines import VSSRetriever

    class SometimesRaising(VSSRetriever):
        def forward(self, question: str) -> dspy.Prediction:
            if "Ada" in question:
                raise RuntimeError("no luck")
            return super().forward(question)

    monkeypatch.setattr(runtime, "open_kb", lambda *args, **kw: make_kb(tiny_skb, tmp_path / "kb", tiny_skb_dir))
    monkeypatch.setitem(registry._SYSTEMS, "some", (lambda kb, cfg, spec: SometimesRaising(kb, cfg, spec), {}))
    res = cli("eval", "--skb", tiny_skb_dir, "--split", "train", "--out", tmp_path / "run", "--system", "some",
              "--no-progress", "--max-degraded", "1")
    raised = sum('"status": "error"' in line for line in (tmp_path / "run" / "traces.jsonl").read_text().splitlines())
    assert 0 < raised < 3 and res.exit_code == EXIT_PARTIAL, res.output
    assert f"{raised} of 3 questions were not answered by the method" in res.text


# --- 5. a misspelt setting at the top of a config ---------------------------------------------------------


def test_a_misspelt_top_level_setting_is_refused_in_one_line(tiny_skb_dir: Path, tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text('{"alhpa": 0.5}')
    with pytest.raises(ValueError, match=r"unknown setting 'alhpa' \(did you mean 'alpha'\?\)"):
        runtime.load_config(config)
    res = cli("eval", "--skb", tiny_skb_dir, "--out", tmp_path / "r", "--config", config)
    assert res.exit_code == 1 and "config.json: unknown setting 'alhpa' (did you mean 'alpha'?)" in res.text
    config.write_text('{"merge": {"alhpa": 0.5}}')
    res = cli("eval", "--skb", tiny_skb_dir, "--out", tmp_path / "r", "--config", config)
    assert res.exit_code == 1 and "unknown setting merge.alhpa (did you mean 'alpha'?)" in res.text
    assert len(res.output.strip().splitlines()) == 1


# --- 7. smaller ones --------------------------------------------------------------------------------------


def test_an_edit_of_a_large_nodes_file_that_keeps_size_and_mtime_is_seen(tiny_skb_dir: Path, tmp_path: Path) -> None:
    from autofocus.skb.io import load_skb

    skb_dir = tmp_path / "skb"
    shutil.copytree(tiny_skb_dir, skb_dir)
    nodes = skb_dir / "nodes.jsonl"
    lines = nodes.read_text().splitlines()
    first = json.loads(lines[0])
    padding = [json.dumps({**first, "id": len(lines) + i, "title": f"Filler {i:05d}", "text": "x" * 900})
               for i in range(5000)]  # 4.7 MiB: beyond the first and last MiB an older check read
    nodes.write_text("\n".join(lines[:6] + padding[:2500] + lines[6:7] + padding[2500:] + lines[7:]) + "\n")
    assert nodes.stat().st_size > 4 << 20
    assert "Filler 02600" in list(load_skb(skb_dir, progress=False).names)
    st = nodes.stat()
    text = nodes.read_text()
    at = text.index("Filler 02600")  # 2.3 MiB into the file
    nodes.write_text(text[:at] + "Fillex" + text[at + 6:])
    os.utime(nodes, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (nodes.stat().st_size, nodes.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    names = list(load_skb(skb_dir, progress=False).names)
    assert "Fillex 02600" in names and "Filler 02600" not in names


def test_a_full_disk_under_eval_out_is_one_line_and_keeps_what_finished(tiny_skb_dir: Path, tiny_skb: Any,
                                                                         tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from autofocus.evaluation import traces

    monkeypatch.setattr(runtime, "open_kb", lambda *args, **kw: make_kb(tiny_skb, tmp_path / "kb", tiny_skb_dir))
    real, written = traces.TraceWriter.append, []

    def append(self: Any, record: dict[str, Any]) -> None:
        if written:
            raise OSError(errno.ENOSPC, "No space left on device", str(self.path))
        written.append(record["id"])
        real(self, record)

    monkeypatch.setattr(traces.TraceWriter, "append", append)
    out = tmp_path / "run"
    res = cli("eval", "--skb", tiny_skb_dir, "--split", "train", "--out", out, "--system", "vss", "--no-progress",
              "--concurrency", 1)
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert "cannot write the run: " in res.text and "No space left on device" in res.text
    assert len((out / "traces.jsonl").read_text().splitlines()) == 1  # what finished is kept
    monkeypatch.undo()
    monkeypatch.setattr(runtime, "open_kb", lambda *args, **kw: make_kb(tiny_skb, tmp_path / "kb", tiny_skb_dir))
    res = cli("eval", "--skb", tiny_skb_dir, "--split", "train", "--out", out, "--system", "vss", "--no-progress")
    assert res.exit_code == 0 and len((out / "traces.jsonl").read_text().splitlines()) == 3


def test_a_program_file_of_another_system_or_with_bad_demos_is_refused(tiny_skb: Any, tiny_skb_dir: Path,
                                                                       tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from autofocus.program.saved import ProgramFileError

    monkeypatch.setattr(runtime, "open_kb", lambda *args, **kw: make_kb(tiny_skb, tmp_path / "kb", tiny_skb_dir))
    path = tmp_path / "prog.json"
    runtime.open_program(tiny_skb_dir, "afr:steps=1-7", lms=False).save(path)
    assert runtime.resolve_system(None, None, path)[0] == "afr:steps=1-7"
    with pytest.raises(ProgramFileError, match=r"saved from system 'afr:steps=1-7', but the system 'vss' was asked"):
        runtime.resolve_system("vss", None, path)
    res = cli("eval", "--skb", tiny_skb_dir, "--out", tmp_path / "r", "--system", "vss", "--program", path)
    assert res.exit_code == 1 and "saved from system 'afr:steps=1-7'" in res.text
    doc = json.loads(path.read_text())
    doc["state"]["cypher"]["demos"] = "not a list"
    path.write_text(json.dumps(doc))
    with pytest.raises(ProgramFileError, match=r"state\.cypher\.demos: expected a list of examples, found str"):
        runtime.open_program(tiny_skb_dir, None, program_file=path, lms=False)


def test_a_wordnet_data_file_cut_at_a_line_end_is_refused(tmp_path: Path) -> None:
    from autofocus.bench.wordnet_source import WordNetError, read_synsets

    fixture = Path(__file__).parent / "fixtures" / "wordnet" / "data.noun"
    lines = fixture.read_text(encoding="utf-8").splitlines(keepends=True)
    assert len(read_synsets(fixture)) > 40  # the whole file is closed under its pointers
    cut = tmp_path / "data.noun"
    cut.write_text("".join(lines[: len(lines) // 2]), encoding="utf-8")
    with pytest.raises(WordNetError, match=r"data\.noun: [\d,]+ pointers name synsets the file does not have"):
        read_synsets(cut)
