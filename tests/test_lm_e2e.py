"""Opt-in end-to-end checks with the real offline model (``AUTOFOCUS_E2E=1``; needs `autofocus lm setup`)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import dspy
import pytest

from autofocus.lm import get_lm, yes_probabilities
from autofocus.local_lm.servers import server_for_api_base

# captured at collection, before conftest points AUTOFOCUS_HOME at an empty temporary folder
_USER_HOME = os.environ.get("AUTOFOCUS_HOME")

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.environ.get("AUTOFOCUS_E2E") != "1", reason="set AUTOFOCUS_E2E=1 to run with the local LM"),
]


@pytest.fixture(scope="module")
def local_lm() -> Iterator[dspy.LM]:
    mp = pytest.MonkeyPatch()
    if _USER_HOME:
        mp.setenv("AUTOFOCUS_HOME", _USER_HOME)
    else:
        mp.delenv("AUTOFOCUS_HOME", raising=False)
    lm = get_lm(os.environ.get("AUTOFOCUS_E2E_LM", "local"), cache=False, max_tokens=64)
    yield lm
    srv = server_for_api_base(lm.kwargs["api_base"])
    if srv is not None:
        srv.stop()
    mp.undo()


def test_predict_with_local_model(local_lm: dspy.LM) -> None:
    with dspy.context(lm=local_lm):
        pred = dspy.Predict("question -> answer")(question="What is the capital of France? One word.")
    assert "paris" in pred.answer.lower()


def test_generation_stops_at_max_tokens(local_lm: dspy.LM) -> None:
    """DSPy sends max_completion_tokens, which the stock llama.cpp server ignores; our server maps it."""
    short = local_lm.copy(max_tokens=5)
    short("Count from 1 to 100, separated by commas.")
    assert short.history[-1]["usage"]["completion_tokens"] <= 5


def test_yes_probability_separates_candidates(local_lm: dspy.LM) -> None:
    def conv(thing: str) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": "You judge candidates. Answer Yes or No."},
            {"role": "user", "content": f"Question: which of these is a fruit?\nCandidate: {thing}\nIs the candidate a fruit?"},
        ]

    p = yes_probabilities(local_lm, [conv(c) for c in ("banana", "hammer", "apple", "granite")])
    assert p is not None and all(x is not None for x in p)
    assert min(p[0], p[2]) > 0.5 > max(p[1], p[3])  # type: ignore[type-var]


def test_yes_probability_on_a_dspy_signature(local_lm: dspy.LM) -> None:
    """The reranker's route: render a signature with ChatAdapter, force the field header, score True/False."""

    class IsFruit(dspy.Signature):
        """Decide whether the candidate is a fruit."""

        candidate: str = dspy.InputField()
        is_fruit: bool = dspy.OutputField()

    things = ("apple", "brick", "pear")
    adapter = dspy.ChatAdapter()
    convs = [adapter.format(IsFruit, demos=[], inputs={"candidate": c}) for c in things]
    p = yes_probabilities(local_lm, convs, assistant_prefix="[[ ## is_fruit ## ]]\n", yes=("True",), no=("False",))
    assert p is not None and None not in p
    assert p[0] > 0.5 > p[1]  # type: ignore[operator]
    with dspy.context(lm=local_lm, adapter=adapter):
        greedy = [dspy.Predict(IsFruit)(candidate=c).is_fruit for c in things]
    assert greedy == [x > 0.5 for x in p]  # type: ignore[operator]  # scoring agrees with greedy decoding
