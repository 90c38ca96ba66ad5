"""The per-LM cap on calls in flight holds across question threads and their own fan-out."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import dspy
import pytest
from dspy.clients.engines.dummy_engine import AsyncDummyEngine, DummyEngine
from dspy.utils.dummies import DummyLM

from autofocus.config import AutofocusConfig
from autofocus.evaluation.runner import manifest_diff
from autofocus.program.systems.registry import apply_lms
from autofocus.usage import LM_LIMIT, limit_lm_concurrency, lm_key, map_concurrently

THREADS, FANOUT, SLEEP_S = 16, 8, 0.025


class Overlap:
    """How many calls were in flight at once, at most."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = self.max = self.calls = 0

    def enter(self) -> None:
        with self.lock:
            self.now += 1
            self.calls += 1
            self.max = max(self.max, self.now)

    def leave(self) -> None:
        with self.lock:
            self.now -= 1


class _SlowEngine(DummyEngine):
    def _complete_messages(self, messages):
        owner: SlowLM = self.owner
        owner.overlap.enter()
        try:
            time.sleep(SLEEP_S)
            if owner.fail:
                raise RuntimeError("server error")
            return super()._complete_messages(messages)
        finally:
            owner.overlap.leave()


class SlowLM(DummyLM):
    """Answers every question after ``SLEEP_S`` (or raises), recording overlapping calls in ``overlap``."""

    def __init__(self, fail: bool = False, model: str = "dummy", overlap: Overlap | None = None) -> None:
        super().__init__({"": {"answer": "ok"}})
        self.model = model
        self.fail = fail
        self.overlap = overlap or Overlap()
        self._engine_spec = _SlowEngine(self)
        self._async_engine_spec = AsyncDummyEngine(self._engine_spec)


@pytest.fixture
def limit() -> Iterator[None]:
    before = LM_LIMIT.limit
    yield
    limit_lm_concurrency(before)


def _predict(lm: SlowLM) -> dspy.Predict:
    predict = dspy.Predict("question -> answer")
    predict.set_lm(lm)
    return predict


def _eval_like(lm: SlowLM) -> None:
    """``THREADS`` question threads, each scoring ``FANOUT`` candidates concurrently (as pointwise rerank does)."""
    predict = _predict(lm)

    def question(q: int) -> list[str]:
        return map_concurrently(lambda c: predict(question=f"q{q} c{c}").answer, range(FANOUT), FANOUT)

    answers = map_concurrently(question, range(THREADS), THREADS)
    assert answers == [["ok"] * FANOUT] * THREADS


def test_cap_holds_across_question_threads_and_fanout(limit: None) -> None:
    limit_lm_concurrency(3)
    lm = SlowLM()
    _eval_like(lm)
    assert lm.overlap.calls == THREADS * FANOUT
    assert lm.overlap.max == 3


def test_without_cap_threads_and_fanout_multiply(limit: None) -> None:
    limit_lm_concurrency(None)
    lm = SlowLM()
    _eval_like(lm)
    assert lm.overlap.max > 3


def test_failing_call_releases_its_slot(limit: None) -> None:
    limit_lm_concurrency(1)
    errors: list[str] = []

    def calls() -> None:
        for _ in range(3):
            try:
                _predict(SlowLM(fail=True))(question="x")
            except Exception as exc:  # DSPy wraps the LM's error
                errors.append(str(exc))
        _predict(SlowLM())(question="y")

    worker = threading.Thread(target=calls, daemon=True)
    worker.start()
    worker.join(2.0)
    assert not worker.is_alive(), "a slot was not given back after the LM raised"
    assert len(errors) == 3 and all("server error" in e for e in errors)
    assert not LM_LIMIT._held


def test_lms_on_other_servers_have_their_own_slots(limit: None) -> None:
    limit_lm_concurrency(1)
    overlap = Overlap()
    a, b = SlowLM(model="openai/a", overlap=overlap), SlowLM(model="openai/b", overlap=overlap)
    both = threading.Barrier(2, timeout=2.0)

    def call(lm: SlowLM) -> None:
        both.wait()
        _predict(lm)(question="same")

    map_concurrently(call, [a, b], 2)
    assert overlap.max == 2
    assert lm_key(dspy.LM("openai/m", api_base="http://h1/v1")) != lm_key(dspy.LM("openai/m", api_base="http://h2/v1"))


def test_local_scoring_slot_shares_the_lm_semaphore(limit: None) -> None:
    limit_lm_concurrency(1)
    lm = SlowLM()
    done = threading.Event()
    with LM_LIMIT.slot(lm):
        threading.Thread(target=lambda: (_predict(lm)(question="w"), done.set()), daemon=True).start()
        assert not done.wait(0.2), "an LM call ran while the scoring request held the only slot"
    assert done.wait(2.0)


def test_config_sets_the_cap_where_lms_are_applied(limit: None) -> None:
    assert AutofocusConfig(concurrency=5).runtime.lm_in_flight == 5
    apply_lms(dspy.Module(), AutofocusConfig(concurrency=5))
    assert LM_LIMIT.limit == 5
    apply_lms(dspy.Module(), AutofocusConfig(concurrency=16, lm_concurrency=2))
    assert LM_LIMIT.limit == 2
    with pytest.raises(ValueError):
        AutofocusConfig(lm_concurrency=0)


def test_lm_concurrency_does_not_block_a_resume() -> None:
    old = {"system": "afr", "config": {"k": 20, "concurrency": 4}}
    new = {"system": "afr", "config": {"k": 20, "concurrency": 16, "lm_concurrency": 6}}
    assert manifest_diff(old, new) == []
