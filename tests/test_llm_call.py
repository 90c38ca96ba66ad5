"""The shared LM call: which failures count as an over-long prompt (retried with fewer demonstrations),
which as an outage (the trace is degraded), bounded answers, the question's deadline."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import dspy
import pytest
from dspy.utils.dummies import DummyLM
from dspy.utils.exceptions import AdapterParseError

from autofocus import usage
from autofocus.lm import get_lm
from autofocus.program.steps.llm_call import (
    ANSWER_START,
    MAX_ANSWER_CHARS,
    MAX_JSON_DEPTH,
    BoundedJSONAdapter,
    ServerChatAdapter,
    call_adapter,
    is_context_overflow,
    prefills,
    safe_predict,
)
from autofocus.trace import Trace
from autofocus.usage import question_deadline
from tests.fake_openai_server import FakeOpenAIServer, chat_adapter_reply


class Ask(dspy.Signature):
    question: str = dspy.InputField()
    answer: str = dspy.OutputField()


@pytest.mark.parametrize(("exc", "expected"), [
    (dspy.ContextWindowExceededError(model="m"), True),
    (RuntimeError("This model's maximum context length is 4096 tokens. However, you requested 5120 tokens"), True),
    (ValueError("Requested tokens (5000) exceed context window of 4096"), True),
    (RuntimeError("Connection refused"), False),
    (AdapterParseError("ChatAdapter", Ask, "my context window is full", "no [[ ## answer ## ]]"), False),
])
def test_only_context_window_errors_count_as_overflow(exc: Exception, expected: bool) -> None:
    assert is_context_overflow(exc) is expected


# --- outages against a real HTTP server -------------------------------------------------------------

KEY = "sk-test-0123456789abcdefghij"


class Stall:
    """A server handler that never answers until the test ends (released then)."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def __call__(self, body: dict[str, Any]) -> str:
        self.release.wait(30)
        return chat_adapter_reply(answer="too late")


def _ask(script: Any, *, timeout: float = 5.0) -> tuple[dspy.Prediction | None, str | None, Trace]:
    trace = Trace()
    with FakeOpenAIServer(script) as srv:
        lm = get_lm(f"openai/fake-{uuid.uuid4().hex[:8]}", api_base=srv.api_base, api_key=KEY, cache=False,
                    timeout=timeout, num_retries=0)
        with dspy.context(lm=lm):
            pred, raw = safe_predict(dspy.Predict(Ask), trace, "2_query", question="q")
        if isinstance(script, Stall):
            script.release.set()
    return pred, raw, trace


@pytest.mark.parametrize(("error", "script"), [
    ("LMServerError", lambda body: {"json": {"error": {"message": "overloaded"}}, "status": 503}),
    ("AdapterParseError", lambda body: ""),  # an empty answer
    ("LMAuthError", lambda body: {"json": {"error": {"message": "bad key"}}, "status": 401}),
])
def test_an_lm_outage_degrades_the_trace_with_its_step_and_error(error: str, script: Any) -> None:
    pred, _, trace = _ask(script)
    assert pred is None
    assert [(d.step, d.error.split(":")[0]) for d in trace.degraded] == [("2_query", error)]


def test_a_server_that_never_answers_times_out_and_degrades() -> None:
    pred, _, trace = _ask(Stall(), timeout=0.3)
    assert pred is None and trace.degraded[0].error.startswith("LMTransportError")


def test_a_refused_connection_degrades() -> None:
    trace = Trace()
    lm = get_lm("openai/fake", api_base="http://127.0.0.1:9/v1", api_key=KEY, cache=False, num_retries=0)
    with dspy.context(lm=lm):
        assert safe_predict(dspy.Predict(Ask), trace, "1_target_type", question="q") == (None, None)
    assert trace.degraded[0].step == "1_target_type" and "Connection refused" in trace.degraded[0].error


def test_a_malformed_answer_is_the_methods_result_not_an_outage() -> None:
    pred, raw, trace = _ask(lambda body: "no fields here at all")
    assert pred is None and raw == "no fields here at all"
    assert trace.degraded == [] and [e.kind for e in trace.events] == ["llm_error"]


def test_an_echoed_api_key_is_redacted_from_the_trace() -> None:
    _, _, trace = _ask(lambda body: {"json": {"error": {"message": f"invalid key {KEY}"}}, "status": 500})
    text = trace.model_dump_json()
    assert "invalid key [REDACTED]" in text and KEY not in text


def test_a_huge_answer_is_cut_before_parsing_and_the_cut_is_recorded() -> None:
    garbage = "x{[" * 400_000  # 1.2 MB
    pred, raw, trace = _ask(lambda body: garbage)
    assert pred is None and raw is not None and len(raw) <= MAX_ANSWER_CHARS
    assert "answer_cut" in [e.kind for e in trace.events]
    assert "1,200,000 characters cut" in next(e.detail for e in trace.events if e.kind == "answer_cut")


def test_json_nested_deeper_than_any_answer_is_refused_before_repair() -> None:
    with pytest.raises(AdapterParseError, match="nests brackets more than"):
        BoundedJSONAdapter().parse(Ask, "{" * (MAX_JSON_DEPTH + 1) + "}" * (MAX_JSON_DEPTH + 1))
    assert BoundedJSONAdapter().parse(Ask, '{"answer": [[1]]}') == {"answer": "[[1]]"}


def test_a_passed_deadline_stops_lm_calls_and_degrades(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(usage, "clock", lambda: clock[0])
    lm = DummyLM([{"answer": "fine"}] * 2)
    trace = Trace()
    with dspy.context(lm=lm), question_deadline(60):
        assert safe_predict(dspy.Predict(Ask), trace, "1_target_type", question="q")[0] is not None
        clock[0] += 60
        assert safe_predict(dspy.Predict(Ask), trace, "2_query", question="q") == (None, None)
    assert [(d.step, d.error.split(":")[0]) for d in trace.degraded] == [("2_query", "DeadlineExceeded")]
    assert len(lm.history) == 1  # no call after the deadline


class Step(dspy.Signature):
    """Answer from the schema."""

    rules: str = dspy.InputField()
    question: str = dspy.InputField()
    answer: str = dspy.OutputField()
    note: str = dspy.OutputField()


def test_the_server_adapter_puts_what_questions_share_first_and_gives_the_answer_header() -> None:
    messages = ServerChatAdapter().format(Step, [], {"rules": "S", "question": "Q?"})
    user, answer = messages[-2]["content"], messages[-1]
    plain = dspy.ChatAdapter().format(Step, [], {"rules": "S", "question": "Q?"})[-1]["content"]
    reminder = plain[plain.index("Respond with"):]
    assert user.startswith(reminder) and user.endswith("[[ ## question ## ]]\nQ?")  # the same text, reordered
    assert sorted(user.split("\n\n")) == sorted(plain.split("\n\n"))
    assert answer == {"role": "assistant", "content": "[[ ## answer ## ]]\n"}
    whole = "[[ ## answer ## ]]\nA\n\n[[ ## note ## ]]\nN"
    assert ServerChatAdapter().parse(Step, whole) == ServerChatAdapter().parse(Step, whole.split("\n", 1)[1]) \
        == {"answer": "A", "note": "N"}  # a server that returns the continuation only


def test_only_llama_server_lms_get_the_server_adapter() -> None:
    hosted = dspy.LM("openai/gpt-4o-mini", api_key="k")
    assert not prefills(hosted) and type(call_adapter(hosted)).__name__ == "BoundedChatAdapter"
    with dspy.context(adapter=dspy.JSONAdapter()):
        assert isinstance(call_adapter(hosted), BoundedJSONAdapter)


def test_a_calls_answer_start_is_given_after_the_header_and_not_sent_as_an_option() -> None:
    seen: list[dict[str, Any]] = []

    def continuation_only(body: dict[str, Any]) -> str:  # a server that answers what follows the given start
        seen.append(body)
        return 'X {name: "json"})'

    with FakeOpenAIServer(continuation_only) as srv:
        lm = dspy.LM("openai/fake", api_base=srv.api_base, api_key="k", cache=False, num_retries=0)
        with dspy.context(lm=lm, adapter=ServerChatAdapter()):
            pred = dspy.Predict(Ask)(question="q", config={ANSWER_START: "MATCH (y:", "temperature": 0.0})
    assert seen[0]["messages"][-1] == {"role": "assistant", "content": "[[ ## answer ## ]]\nMATCH (y:"}
    assert ANSWER_START not in seen[0] and pred.answer == 'MATCH (y:X {name: "json"})'
