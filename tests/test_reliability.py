"""Fault-injection probes (docs/guide.md, "Reliability"): AF-Retriever through ``autofocus eval`` and ``ask``
against an OpenAI-compatible server that fails the way hosted LMs do.

Each probe checks that no question is lost, that LM outages are recorded as degraded (and make
``eval`` fail above ``--max-degraded``), that a resume finishes the run once the server is back, and
that nothing hangs or leaks the API key.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dspy
import pytest
from dspy.clients.cache import Cache
from typer.testing import CliRunner

from autofocus import runtime
from autofocus.cli import app
from autofocus.cli_app import EXIT_NOTHING, EXIT_PARTIAL
from autofocus.evaluation.traces import latest_by_id, read_traces
from autofocus.skb.skbdir import load_skb_dir
from tests.fake_openai_server import FakeOpenAIServer
from tests.test_afr_e2e import serve
from tests.test_systems_common import make_kb

KEY = "sk-probe-0123456789abcdefghijkl"
TRAIN = [0, 1, 2]  # the question ids of the tiny SKB's train split


class FaultyServer:
    """``serve`` (test_afr_e2e) behind a switch: ``mode`` is ``up`` or one fault."""

    def __init__(self) -> None:
        self.mode = "up"
        self.release = threading.Event()  # ends a "hang"
        self.failures_left = 0  # "flaky": this many requests fail with 502, then it is up

    def __call__(self, body: dict[str, Any]) -> Any:
        if self.mode == "flaky" and self.failures_left > 0:
            self.failures_left -= 1
            return {"json": {"error": {"message": "bad gateway"}}, "status": 502}
        if self.mode == "hang":
            self.release.wait(60)
        if self.mode == "5xx":
            return {"json": {"error": {"message": "upstream overloaded"}}, "status": 503}
        if self.mode == "rejected key":
            return {"json": {"error": {"message": "invalid api key"}}, "status": 401}
        if self.mode == "echo key":
            return {"json": {"error": {"message": f"bad request with key {KEY}"}}, "status": 500}
        if self.mode == "empty answer":
            return ""
        if self.mode == "garbage":
            return "ý{[" * 400_000  # 1.2 MB of nothing the adapters can parse
        return serve(body)


@pytest.fixture
def skb(two_type_skb: Path) -> Path:
    """The SKB of the probes: step 1 asks the LM (two candidate types)."""
    return two_type_skb


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch, skb: Path, tmp_path: Path) -> Iterator[FaultyServer]:
    kb = make_kb(load_skb_dir(skb, progress=False), tmp_path / "kb", source=skb)  # the real KB, a cheap embedder
    monkeypatch.setattr(runtime, "open_kb", lambda *args, **kw: kb)
    monkeypatch.setattr(dspy, "cache", Cache(False, False, "", 0, 0), raising=False)  # every call reaches the server
    script = FaultyServer()
    with FakeOpenAIServer(script) as srv:
        monkeypatch.setenv("AUTOFOCUS_LM_API_BASE", srv.api_base)
        monkeypatch.setenv("AUTOFOCUS_LM_API_KEY", KEY)
        yield script
        script.release.set()


def invoke(*args: str | Path) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "300"})


def evaluate(skb: Path, out: Path, *extra: str) -> Any:
    return invoke("eval", "--skb", skb, "--split", "train", "--out", out, "--system", "afr", "--lm", "openai/fake-model",
                  "--concurrency", "1", "--no-progress", "--lm-retries", "0", *extra)  # fmt: skip


def records(out: Path) -> list[dict[str, Any]]:
    return read_traces(out / "traces.jsonl", repair=False)[0]


@pytest.mark.parametrize("fault", ["connection refused", "hang", "5xx", "rejected key", "empty answer"])
def test_an_lm_outage_is_degraded_loudly_and_a_resume_finishes_the_run(
    fault: str, server: FaultyServer, skb: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"
    server.mode = fault
    api_base = "http://127.0.0.1:9/v1" if fault == "connection refused" else None
    with monkeypatch.context() as mp:
        if api_base:
            mp.setenv("AUTOFOCUS_LM_API_BASE", api_base)
        res = evaluate(skb, out, "--lm-timeout", "0.5")
    assert res.exit_code == EXIT_NOTHING, res.output
    assert "none of its 3 questions was answered by the method: 3 fell back" in " ".join(res.output.split())
    first = records(out)
    assert sorted(r["id"] for r in first) == TRAIN and {r["status"] for r in first} == {"degraded"}
    for r in first:  # every question still has the fallback's ranking, and says what failed
        assert r["ranked"] and r["degraded"][0]["step"] == "1_target_type"

    server.mode = "up"
    server.release.set()
    res = evaluate(skb, out)
    assert res.exit_code == 0, res.output
    latest = latest_by_id(records(out))
    assert sorted(latest) == TRAIN and {r["status"] for r in latest.values()} == {"ok"}
    assert all(r["derived"]["gold_in_grounded"] for r in latest.values())  # the method's own strand now ran


def test_a_partial_outage_is_counted_against_the_threshold(server: FaultyServer, skb: Path, tmp_path: Path) -> None:
    server.mode, server.failures_left = "flaky", 2  # the first question's target type and Cypher
    res = evaluate(skb, tmp_path / "a")
    assert res.exit_code == EXIT_PARTIAL and "1 degraded (33.3%" in res.output
    assert [r["status"] for r in records(tmp_path / "a")] == ["degraded", "ok", "ok"]
    server.failures_left = 2
    assert evaluate(skb, tmp_path / "b", "--max-degraded", "0.5").exit_code == 0


def test_garbage_answers_are_the_methods_result_and_stay_small(server: FaultyServer, skb: Path, tmp_path: Path) -> None:
    server.mode = "garbage"
    res = evaluate(skb, tmp_path / "run")
    assert res.exit_code == 0, res.output  # the LM answered: malformed output is the method's result
    lines = (tmp_path / "run" / "traces.jsonl").read_text().splitlines()
    assert len(lines) == 3 and max(map(len, lines)) < 100_000
    for line in lines:
        record = json.loads(line)
        kinds = {(e["step"], e["kind"]) for e in record["trace"]["events"]}
        assert record["status"] == "ok" and ("2_query", "answer_cut") in kinds


def test_an_echoed_api_key_reaches_no_file_and_no_terminal(server: FaultyServer, skb: Path, tmp_path: Path) -> None:
    server.mode = "echo key"
    res = evaluate(skb, tmp_path / "run", "--max-degraded", "1")
    assert res.exit_code == EXIT_NOTHING and KEY not in res.output  # every question fell back
    text = (tmp_path / "run" / "traces.jsonl").read_text()
    assert "bad request with key [REDACTED]" in text and KEY not in text
    trace_file = tmp_path / "trace.json"
    res = invoke("ask", "Which papers cite Graph Retrieval at Scale?", "--skb", skb, "--lm", "openai/fake-model",
                 "--trace", "--trace-json", trace_file, "--lm-retries", "0")  # fmt: skip
    assert res.exit_code == EXIT_NOTHING and "degraded" in res.output and "[REDACTED]" in res.output  # no LM answered
    assert KEY not in res.output and KEY not in trace_file.read_text()
