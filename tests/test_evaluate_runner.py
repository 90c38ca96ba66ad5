"""The resumable evaluation runner, driven by scripted programs (no LM, no index)."""

from __future__ import annotations

import _thread
import contextvars
import io
import json
import signal
import threading
from pathlib import Path
from typing import Any

import dspy
import numpy as np
import pytest
from dspy.utils.dummies import DummyLM
from rich.console import Console

from autofocus.console import RichReporter
from autofocus.evaluation.runner import RunMismatchError, build_manifest, evaluate_one, run_eval
from autofocus.evaluation.traces import latest_by_id, read_traces, to_jsonable
from autofocus.metrics import Candidates
from autofocus.skb.model import SKB
from autofocus.skb.qa import QAItem
from autofocus.trace import Trace
from tests.conftest import TINY_QA

ITEMS = [QAItem(q["id"], q["query"], q["answer_ids"]) for q in TINY_QA]
# best-first answers per question id; papers are 0-3 and 11 (the candidates), 4-10 are not
RANKED = {0: [11, 4, 0], 1: [3, 2], 2: [0, 5, 1], 3: [3], 4: [1, 0], 5: [7, 3, 1]}
GROUNDED = {0: [0, 11, 2], 1: [], 2: [11], 3: [3], 4: [1, 0, 2], 5: [1]}
TARGET = {0: "paper", 1: "paper", 2: "author", 3: "paper", 4: "paper", 5: "venue"}
QID = {q["query"]: q["id"] for q in TINY_QA}


class Scripted(dspy.Module):
    """Answers from the tables above; logs its calls; can fail or be interrupted on cue."""

    def __init__(
        self, calls: list[int], fail: frozenset[int] = frozenset(), interrupt_on_call: int | None = None,
        degrade: frozenset[int] = frozenset(),
    ) -> None:
        super().__init__()
        self.calls, self.fail, self.interrupt_on_call, self.degrade = calls, fail, interrupt_on_call, degrade

    def forward(self, question: str) -> dspy.Prediction:
        qid = QID[question]
        with LOCK:
            self.calls.append(qid)
            n = len(self.calls)
        if n == self.interrupt_on_call:
            raise KeyboardInterrupt
        if qid in self.fail:
            raise RuntimeError(f"boom on {qid}")
        trace = Trace(system="scripted", question=question)
        with trace.step("1_target_type"):
            trace.data["target_type"] = TARGET[qid]
        with trace.step("5_grounding"):
            trace.data["grounded_ids"] = np.array(GROUNDED[qid], dtype=np.int64)
        trace.flags.update(valid_cypher=True, has_triplet=qid != 3, has_constant=True)
        trace.flags["grounded_nonempty"] = bool(GROUNDED[qid])
        if qid == 2:
            trace.event("2_query", "malformed", "no cypher block")
        if qid in self.degrade:
            trace.degrade("1_target_type", "LMTransportError: connection refused")
        return dspy.Prediction(ranked_ids=np.array(RANKED[qid]), trace=trace)


LOCK = threading.Lock()


def factory(calls: list[int], **kw: Any) -> Any:
    return lambda: Scripted(calls, **kw)


def manifest(**config: Any) -> dict[str, Any]:
    return build_manifest(system="scripted", config={"alpha": 0.5, "concurrency": 1, **config}, split="all")


def lines(out: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (out / "traces.jsonl").read_text().splitlines()]


def test_writes_one_trace_line_per_question_and_a_manifest(tmp_path: Path, tiny_skb: SKB) -> None:
    calls: list[int] = []
    res = run_eval(factory(calls), ITEMS, tmp_path, manifest=manifest(), concurrency=3, skb=tiny_skb)
    assert (res.total, res.skipped, res.finished, res.errors, res.interrupted) == (6, 0, 6, 0, False)
    assert res.complete and sorted(calls) == [0, 1, 2, 3, 4, 5]
    recs = {r["id"]: r for r in lines(tmp_path)}
    assert sorted(recs) == [0, 1, 2, 3, 4, 5] and all(r["status"] == "ok" for r in recs.values())
    r0 = recs[0]  # gold {0, 11}; ranked 11, 4, 0: 4 is not a candidate, so 0 is STaRK's rank 2
    assert r0["ranked"] == [11, 4, 0] and r0["gold"] == [0, 11]
    assert r0["metrics"]["hit@1"] == 1.0 and r0["metrics"]["recall@1"] == 0.5 and r0["metrics"]["recall@5"] == 1.0
    assert r0["metrics"]["mrr"] == 1.0
    assert recs[5]["metrics"]["mrr"] == 1.0  # gold {1, 3}; ranked 7 (a venue: ignored), 3
    assert r0["derived"] == {
        "grounded_size": 3, "gold_in_grounded": True, "grounded_recall": 1.0,
        "grounded_precision": pytest.approx(2 / 3), "gold_types": ["paper"], "target_type_correct": True,
        "step7_type_correct": True,  # no step7_types traced: step 7 searched step 1's type
    }
    assert recs[2]["derived"]["target_type_correct"] is False and recs[2]["derived"]["step7_type_correct"] is False
    assert recs[1]["derived"]["gold_in_grounded"] is False and recs[1]["derived"]["grounded_recall"] == 0.0
    assert set(r0["trace"]["steps"]) == {"1_target_type", "5_grounding"}
    assert r0["trace"]["data"]["grounded_ids"] == [0, 11, 2]
    assert recs[2]["trace"]["events"][0]["kind"] == "malformed"
    m = json.loads((tmp_path / "manifest.json").read_text())
    assert m["system"] == "scripted" and m["config"]["alpha"] == 0.5 and m["split"] == "all"
    assert {"autofocus", "dspy", "python"} <= set(m["versions"])
    assert m["sessions"][0]["finished"] == 6 and m["sessions"][0]["interrupted"] is False


def test_interrupt_then_resume_does_not_redo_finished_questions(tmp_path: Path) -> None:
    first: list[int] = []
    res = run_eval(factory(first, interrupt_on_call=3), ITEMS, tmp_path, manifest=manifest())
    assert res.interrupted and res.finished == 2 and len(first) == 3
    assert [r["id"] for r in lines(tmp_path)] == first[:2]
    assert json.loads((tmp_path / "manifest.json").read_text())["sessions"][0]["interrupted"] is True

    second: list[int] = []
    res = run_eval(factory(second), ITEMS, tmp_path, manifest=manifest())
    assert (res.skipped, res.finished, res.interrupted) == (2, 4, False)
    assert len(second) == 4 and not set(second) & set(first[:2])
    ids = [r["id"] for r in lines(tmp_path)]
    assert sorted(ids) == [0, 1, 2, 3, 4, 5]  # each question exactly once
    assert len(json.loads((tmp_path / "manifest.json").read_text())["sessions"]) == 2


def test_interrupt_with_threads_keeps_each_question_once(tmp_path: Path) -> None:
    first: list[int] = []
    res = run_eval(factory(first, interrupt_on_call=4), ITEMS, tmp_path, manifest=manifest(), concurrency=3)
    assert res.interrupted
    done = [r["id"] for r in lines(tmp_path)]
    assert len(done) == res.finished == len(set(done)) and len(done) < len(first)
    second: list[int] = []
    run_eval(factory(second), ITEMS, tmp_path, manifest=manifest(), concurrency=3)
    assert sorted(second) == sorted(set(range(6)) - set(done))
    assert sorted(r["id"] for r in lines(tmp_path)) == [0, 1, 2, 3, 4, 5]


def test_truncated_last_line_is_repaired_and_its_question_rerun(tmp_path: Path) -> None:
    run_eval(factory([]), ITEMS, tmp_path, manifest=manifest())
    path = tmp_path / "traces.jsonl"
    raw = path.read_bytes()
    last_id = json.loads(raw.splitlines()[-1])["id"]
    path.write_bytes(raw[:-25])  # a crash in the middle of the last write
    calls: list[int] = []
    res = run_eval(factory(calls), ITEMS, tmp_path, manifest=manifest())
    assert calls == [last_id] and res.skipped == 5
    text = path.read_text()
    assert text.endswith("\n") and len(text.splitlines()) == 6
    assert sorted(r["id"] for r in lines(tmp_path)) == [0, 1, 2, 3, 4, 5]


def test_read_traces_repairs_a_garbled_last_line_and_rejects_one_in_the_middle(tmp_path: Path) -> None:
    path = tmp_path / "traces.jsonl"
    good = json.dumps({"id": 1, "status": "ok"})
    path.write_text(f"{good}\n{{not json}}\n")
    recs, dropped = read_traces(path)
    assert [r["id"] for r in recs] == [1] and dropped == len("{not json}\n")
    assert path.read_text() == good + "\n"
    path.write_text(f"{good}\n{{not json}}\n{good}\n")
    with pytest.raises(ValueError, match=r"traces.jsonl:2: not a valid JSON trace line"):
        read_traces(path)
    path.write_text('{"status": "ok"}\n')
    with pytest.raises(ValueError, match=r":1: a trace line needs"):
        read_traces(path)


def test_a_different_config_or_system_is_refused_unless_starting_new(tmp_path: Path) -> None:
    run_eval(factory([]), ITEMS[:2], tmp_path, manifest=manifest())
    with pytest.raises(RunMismatchError, match=r"config\.alpha: 0\.5 -> 0\.7") as err:
        run_eval(factory([]), ITEMS, tmp_path, manifest=manifest(alpha=0.7))
    assert "--force-new" in str(err.value)
    other = build_manifest(system="other", config={"alpha": 0.5, "concurrency": 1}, split="all")
    with pytest.raises(RunMismatchError, match=r"system: 'scripted' -> 'other'"):
        run_eval(factory([]), ITEMS, tmp_path, manifest=other)
    # concurrency only changes speed: resuming with more threads is fine
    calls: list[int] = []
    run_eval(factory(calls), ITEMS[:3], tmp_path, manifest=manifest(concurrency=4), concurrency=2)
    assert calls == [2]
    # a new run moves the old one aside and starts from scratch
    calls = []
    run_eval(factory(calls), ITEMS, tmp_path, manifest=manifest(alpha=0.7), resume=False)
    assert sorted(calls) == [0, 1, 2, 3, 4, 5]
    (archived,) = tmp_path.glob("previous-*")
    assert len((archived / "traces.jsonl").read_text().splitlines()) == 3
    assert json.loads((tmp_path / "manifest.json").read_text())["config"]["alpha"] == 0.7


def test_traces_without_manifest_are_not_resumed_blindly(tmp_path: Path) -> None:
    (tmp_path / "traces.jsonl").write_text(json.dumps({"id": 0, "status": "ok"}) + "\n")
    with pytest.raises(RunMismatchError, match=r"without manifest\.json"):
        run_eval(factory([]), ITEMS, tmp_path, manifest=manifest())


def test_a_raising_question_is_an_error_line_and_is_retried_on_resume(tmp_path: Path) -> None:
    calls: list[int] = []
    res = run_eval(factory(calls, fail=frozenset({4})), ITEMS, tmp_path, manifest=manifest(), concurrency=2)
    assert (res.finished, res.errors, res.complete) == (5, 1, False)
    err = next(r for r in lines(tmp_path) if r["status"] == "error")
    assert err["id"] == 4 and err["error"] == "RuntimeError: boom on 4" and "raise RuntimeError" in err["traceback"]
    calls = []
    res = run_eval(factory(calls), ITEMS, tmp_path, manifest=manifest())
    assert calls == [4] and res.complete
    latest = latest_by_id(lines(tmp_path))
    assert latest[4]["status"] == "ok" and len(latest) == 6


def test_a_degraded_question_keeps_its_ranking_and_is_retried_on_resume(tmp_path: Path) -> None:
    calls: list[int] = []
    res = run_eval(factory(calls, degrade=frozenset({1, 3})), ITEMS, tmp_path, manifest=manifest())
    assert (res.finished, res.degraded, res.errors, res.complete) == (6, 2, 0, False)
    by_id = {r["id"]: r for r in lines(tmp_path)}
    assert [i for i, r in by_id.items() if r["status"] == "degraded"] == [1, 3]
    assert by_id[1]["degraded"] == [{"step": "1_target_type", "error": "LMTransportError: connection refused"}]
    assert by_id[3]["ranked"] == RANKED[3] and by_id[3]["metrics"]["hit@1"] == 1.0  # the fallback's result
    calls = []
    res = run_eval(factory(calls), ITEMS, tmp_path, manifest=manifest())
    assert sorted(calls) == [1, 3] and res.complete and res.skipped == 4
    assert {r["status"] for r in latest_by_id(lines(tmp_path)).values()} == {"ok"}


def test_the_question_deadline_reaches_the_programs_lm_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from autofocus import usage
    from autofocus.program.steps import llm_call

    clock = iter(range(0, 10_000, 100))  # every reading of the clock is 100 s later
    monkeypatch.setattr(usage, "clock", lambda: next(clock))

    class TwoCalls(dspy.Module):
        def forward(self, question: str) -> dspy.Prediction:
            trace = Trace(question=question)
            for step in ("1_target_type", "2_query"):
                llm_call.safe_predict(dspy.Predict("question -> answer"), trace, step, question=question)
            return dspy.Prediction(ranked_ids=[0], trace=trace)

    with dspy.context(lm=DummyLM([{"answer": "a"}] * 4)):
        run_eval(TwoCalls, ITEMS[:1], tmp_path, manifest=manifest(), deadline_s=150)
    record = lines(tmp_path)[0]
    assert record["status"] == "degraded" and [d["step"] for d in record["degraded"]] == ["2_query"]


def test_a_damaged_line_in_the_middle_or_manifest_refuses_the_resume_with_its_place(tmp_path: Path) -> None:
    run_eval(factory([]), ITEMS, tmp_path, manifest=manifest())
    text = (tmp_path / "traces.jsonl").read_text().splitlines(keepends=True)
    (tmp_path / "traces.jsonl").write_text("".join([text[0], "{broken\n", *text[1:]]))
    with pytest.raises(RunMismatchError, match=r"traces.jsonl:2: not a valid JSON trace line.*--force-new"):
        run_eval(factory([]), ITEMS, tmp_path, manifest=manifest())
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(RunMismatchError, match=r"manifest.json cannot be read"):
        run_eval(factory([]), ITEMS, tmp_path, manifest=manifest())


def test_limit_and_extending_it(tmp_path: Path) -> None:
    calls: list[int] = []
    res = run_eval(factory(calls), ITEMS, tmp_path, manifest=manifest(), limit=2)
    assert res.total == 2 and calls == [0, 1]
    calls = []
    res = run_eval(factory(calls), ITEMS, tmp_path, manifest=manifest(), limit=4)
    assert calls == [2, 3] and res.skipped == 2


def test_program_without_ranked_ids_is_an_error_line(tmp_path: Path) -> None:
    class Broken(dspy.Module):
        def forward(self, question: str) -> dspy.Prediction:
            return dspy.Prediction(answer="no ids")

    res = run_eval(Broken, ITEMS[:1], tmp_path, manifest=manifest())
    assert res.errors == 1 and "without `ranked_ids`" in lines(tmp_path)[0]["error"]


def test_factory_failure_stops_the_run(tmp_path: Path) -> None:
    def bad_factory() -> Any:
        raise ValueError("cannot build the program")

    with pytest.raises(ValueError, match="cannot build"):
        run_eval(bad_factory, ITEMS, tmp_path, manifest=manifest(), concurrency=2)


def test_duplicate_question_ids_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"unique; repeated: \[0\]"):
        run_eval(factory([]), [ITEMS[0], ITEMS[0]], tmp_path, manifest=manifest())


MARK: contextvars.ContextVar[str] = contextvars.ContextVar("mark", default="unset")


def test_workers_see_the_callers_context_and_lm_usage_is_traced(tmp_path: Path) -> None:
    class Asks(dspy.Module):
        def __init__(self) -> None:
            super().__init__()
            self.predict = dspy.Predict("question -> answer")

        def forward(self, question: str) -> dspy.Prediction:
            trace = Trace(question=question)
            with trace.step("2_query"):
                trace.data["answer"] = self.predict(question=question).answer
            trace.data["mark"] = MARK.get()
            return dspy.Prediction(ranked_ids=[0], trace=trace)

    lm = dspy.utils.DummyLM([{"answer": "forty-two"}] * 6)
    token = MARK.set("from the caller")
    try:
        with dspy.context(lm=lm):
            run_eval(Asks, ITEMS, tmp_path, manifest=manifest(), concurrency=3)
    finally:
        MARK.reset(token)
    for rec in lines(tmp_path):
        assert rec["trace"]["data"]["mark"] == "from the caller"
        assert rec["trace"]["data"]["answer"] == "forty-two"
        step = rec["trace"]["steps"]["2_query"]
        assert step["lm_calls"] == 1 and step["input_tokens"] > 0 and step["output_tokens"] > 0


def test_to_jsonable_handles_numpy_models_sets_and_long_lists() -> None:
    out = to_jsonable({
        "a": np.arange(3), "b": np.float32(0.5), "c": {3, 1}, "d": float("nan"),
        "e": list(range(2000)), "f": np.arange(5000), "g": Trace(question="q"), 7: object,
    })
    assert out["a"] == [0, 1, 2] and out["b"] == 0.5 and out["c"] == [1, 3] and out["d"] is None
    assert out["e"]["n"] == 2000 and len(out["e"]["head"]) == 1000
    assert out["f"]["n"] == 5000 and out["f"]["head"][:2] == [0, 1]
    assert out["g"]["question"] == "q" and out["7"].startswith("<class")
    json.dumps(out, allow_nan=False)


def test_long_strings_in_a_trace_are_cut_and_say_so() -> None:
    out = to_jsonable({"cypher": "M" * 1_000_000, "short": "MATCH (n) RETURN n"})
    assert out["short"] == "MATCH (n) RETURN n"
    assert len(out["cypher"]) < 10_100 and out["cypher"].endswith(" …[cut: 990,000 more characters]")


def test_ctrl_c_in_the_main_thread_keeps_finished_lines(tmp_path: Path) -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("interrupt_main() reaches the process's main thread, which is not running this test")

    returned = threading.Event()

    class PressesCtrlC(Scripted):
        def forward(self, question: str) -> dspy.Prediction:
            if len(self.calls) == 2:
                _thread.interrupt_main()  # what a terminal's SIGINT does to the waiting main thread
                returned.wait(30)  # this question is still running when the run gives up
            return super().forward(question)

    first: list[int] = []
    # interrupt_main() does nothing unless Python's own SIGINT handler is installed; a library loaded by an
    # earlier test in this worker may have replaced it
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        res = run_eval(lambda: PressesCtrlC(first), ITEMS, tmp_path, manifest=manifest())
    finally:
        returned.set()
        signal.signal(signal.SIGINT, previous)
    assert res.interrupted and res.finished == 2
    second: list[int] = []
    run_eval(factory(second), ITEMS, tmp_path, manifest=manifest())
    assert sorted(second) == [2, 3, 4, 5]
    assert sorted(r["id"] for r in lines(tmp_path)) == [0, 1, 2, 3, 4, 5]


class Recorder:
    """A ``progress.Reporter`` that keeps what it is told."""

    def __init__(self) -> None:
        self.notes: list[tuple[str, str]] = []
        self.ticks: list[tuple[str, int, int | None, str]] = []

    def note(self, text: str, level: str = "info") -> None:
        self.notes.append((level, text))

    def advance(self, task: str, done: int, total: int | None, stats: str = "") -> None:
        self.ticks.append((task, done, total, stats))


def test_progress_reports_the_running_hit_at_1_and_warnings(tmp_path: Path) -> None:
    seen = Recorder()
    run_eval(factory([], degrade=frozenset({1})), ITEMS, tmp_path / "run", manifest=manifest(), reporter=seen)
    assert seen.ticks[0][1:3] == (0, 6) and seen.ticks[-1][:3] == ("run", 6, 6) and "hit@1" in seen.ticks[-1][3]
    assert [lvl for lvl, text in seen.notes if "degraded" in text] == ["warning"]
    again = Recorder()
    run_eval(factory([]), ITEMS, tmp_path / "run", manifest=manifest(), resume=False, reporter=again)
    assert any(lvl == "warning" and "previous files" in text for lvl, text in again.notes)


def test_the_terminal_reporter_draws_bars_and_notes_as_text() -> None:
    out, bars = io.StringIO(), io.StringIO()
    with RichReporter(Console(file=out, width=120), Console(file=bars, width=120, force_terminal=False)) as rep:
        rep.note("[red]not markup[/]", "warning")
        rep.advance("run", 6, 6, "hit@1 0.500")
    assert "[red]not markup[/]" in out.getvalue() and "6/6" in bars.getvalue() and "hit@1 0.500" in bars.getvalue()


def test_a_partly_listed_grounded_set_is_flagged(tiny_skb: SKB) -> None:
    class Partial(dspy.Module):
        def forward(self, question: str) -> dspy.Prediction:
            trace = Trace(question=question)
            trace.data.update(grounded_ids=[0, 1], num_grounded=4000)
            return dspy.Prediction(ranked_ids=[0], trace=trace)

    rec = evaluate_one(Partial(), QAItem(7, "q", [0, 2]), Candidates(tiny_skb.candidate_ids), tiny_skb)
    assert rec["derived"]["grounded_size"] == 4000 and rec["derived"]["grounded_ids_partial"] is True
    assert rec["derived"]["grounded_recall"] == 0.5 and rec["derived"]["grounded_precision"] == 1 / 4000


def test_queued_concurrent_work_is_cancelled_after_an_interrupt() -> None:
    from autofocus.usage import Cancelled, cancel_pending, map_concurrently

    started: list[int] = []
    cancelled = threading.Event()

    def slow(i: int) -> int:
        started.append(i)
        if i == 0:
            cancel_pending()  # what an interrupted run does while this question's calls are queued
            cancelled.set()
        cancelled.wait(30)  # a call in flight finishes; the queued ones must not start
        return i

    try:
        with pytest.raises(Cancelled):
            map_concurrently(slow, range(8), max_workers=2)
        assert 0 in started and set(started) <= {0, 1}  # only the calls already in flight ran
    finally:
        cancel_pending(False)
    assert map_concurrently(slow, [1, 2, 3], max_workers=2) == [1, 2, 3]
