"""Which LM failures count as an over-long prompt (retried with fewer demonstrations) and which do not."""

from __future__ import annotations

import dspy
import pytest
from dspy.utils.exceptions import AdapterParseError

from autofocus.program.steps.llm_call import is_context_overflow


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
