"""The likelihood fit of step 8's prior weight recovers a known weight and reads traces as step 8 writes them."""

from __future__ import annotations

import numpy as np
import pytest

from autofocus.evaluation.fusion_fit import case, case_from_trace, fit_prior_weight
from autofocus.program.steps.rerank import prior_fuse


def simulated(n: int, a: float, b: float, m: int = 10, seed: int = 0) -> list:
    """Questions whose answer is drawn from softmax(a * logit - b * ln(1 + rank)): the model the fit assumes."""
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(n):
        logits = rng.normal(0.0, 2.0, m)
        z = a * logits - b * np.log1p(np.arange(m))
        p = np.exp(z - z.max())
        answer = rng.choice(m, p=p / p.sum())
        scores = 1 / (1 + np.exp(-logits))
        cases.append(case(scores.tolist(), list(range(100, 100 + m)), [100 + answer]))
    return cases


@pytest.mark.parametrize(("a", "b"), [(2.0, 1.0), (1.0, 0.2), (0.5, 2.0)])
def test_the_fit_recovers_the_weight_that_generated_the_answers(a: float, b: float) -> None:
    fit = fit_prior_weight(simulated(600, a, b), bootstrap=100)
    assert fit.low < fit.weight < fit.high and fit.n == 600 and fit.skipped == 0
    assert fit.weight == pytest.approx(b / a, rel=0.2)
    assert fit.high - fit.low < 0.5 * b / a + 0.2  # six hundred questions pin the weight down


def test_a_judge_that_knows_the_answers_is_never_overruled_and_one_that_guesses_gets_a_heavy_prior() -> None:
    sure = [case([0.99 if i == g else 0.01 for i in range(8)], list(range(8)), [g]) for g in (0, 3, 5, 7) * 5]
    weight = fit_prior_weight(sure, bootstrap=20).weight  # separable: any weight that keeps the judge's choice
    scores = [0.99 if i == 7 else 0.01 for i in range(8)]
    assert prior_fuse(list(np.argsort(scores)[::-1]), scores, weight)[0] == 7
    rng = np.random.default_rng(1)  # scores unrelated to the answers, which sit at rank 0 or 1
    noise = [case(rng.uniform(0.05, 0.95, 8).tolist(), list(range(8)), [int(rng.integers(0, 2))]) for _ in range(60)]
    assert fit_prior_weight(noise, bootstrap=20).weight > 3.0


def test_cases_come_from_step_8s_trace_and_skip_what_carries_no_information() -> None:
    data = {"rerank": {"method": "pointwise", "input": [7, 4, 9, 2], "scores": [0.2, 0.7, 0.5]}}  # depth 3
    c = case_from_trace(data, [9, 2])  # 2 lies below the judged head
    assert c is not None and c.gold.tolist() == [False, False, True]
    assert c.logits == pytest.approx(np.log([0.25, 0.7 / 0.3, 1.0]))
    assert case_from_trace(data, [2]) is None  # no answer among the judged
    assert case_from_trace({"rerank": {**data["rerank"], "method": "listwise"}}, [9]) is None  # no scores
    assert case_from_trace({}, [9]) is None  # step 8 did not run
    assert case([1.0, 0.0], [1, 2], [2]).logits == pytest.approx([13.8155, -13.8155], abs=1e-3)  # clipped
    fit = fit_prior_weight([c, None, case([0.9, 0.1], [1, 2], [1])], bootstrap=10)
    assert (fit.n, fit.skipped) == (2, 1) and "2 questions with an answer" in fit.line()
    with pytest.raises(ValueError, match="nothing to fit"):
        fit_prior_weight([None, None])


def test_the_fitted_weight_ranks_as_prior_fuse_does() -> None:
    """The fit's model orders candidates by a * logit - b * ln(1 + i), which is prior_fuse at w = b / a."""
    fit = fit_prior_weight(simulated(200, 2.0, 1.0, seed=3), bootstrap=0)
    scores = [0.3, 0.6, 0.55, 0.9, 0.1]
    logits = np.log(scores) - np.log1p(-np.asarray(scores))
    by_model = np.argsort(-(fit.a * logits - fit.b * np.log1p(np.arange(5))), kind="stable")
    judge_order = list(np.argsort(-np.asarray(scores), kind="stable"))
    assert prior_fuse(judge_order, scores, fit.weight) == by_model.tolist()
