"""hit@k, recall@k and MRR with STaRK's semantics, checked against values worked out by hand."""

from __future__ import annotations

import dspy
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autofocus.metrics import Candidates, compute_metrics, dspy_metric


def test_hand_computed_single_question() -> None:
    # ranked 5, 2, 9, 7; gold {2, 7}: first gold at rank 2, second at rank 4
    m = compute_metrics([5, 2, 9, 7], [2, 7], ks=(1, 2, 3, 4, 5))
    assert m == {
        "hit@1": 0.0, "recall@1": 0.0,
        "hit@2": 1.0, "recall@2": 0.5,
        "hit@3": 1.0, "recall@3": 0.5,
        "hit@4": 1.0, "recall@4": 1.0,
        "hit@5": 1.0, "recall@5": 1.0,
        "mrr": 0.5,
    }


def test_no_gold_retrieved_scores_zero() -> None:
    assert compute_metrics([1, 2, 3], [9], ks=(1, 20)) == {
        "hit@1": 0.0, "recall@1": 0.0, "hit@20": 0.0, "recall@20": 0.0, "mrr": 0.0,
    }
    assert compute_metrics([], [9], ks=(1,))["mrr"] == 0.0


def test_stark_drops_gold_answers_that_are_not_candidates() -> None:
    # as the authors' evaluation computes it: candidates {0,2,4,6,8}, gold {1,2}, 2 retrieved -> recall = 1.0
    m = compute_metrics([2, 4], [1, 2], candidates=[0, 2, 4, 6, 8], ks=(1, 2))
    assert m["recall@1"] == 1.0 and m["recall@2"] == 1.0 and m["hit@1"] == 1.0 and m["mrr"] == 1.0
    # without the candidate set, gold 1 counts and is never found
    assert compute_metrics([2, 4], [1, 2], ks=(2,))["recall@2"] == 0.5


def test_stark_question_whose_gold_are_all_non_candidates_scores_zero() -> None:
    m = compute_metrics([1, 0], [1], candidates=[0, 2, 4], ks=(1, 2))
    assert set(m.values()) == {0.0}


def test_stark_ignores_predicted_non_candidates() -> None:
    # 1 and 3 are not candidates, so 4 is STaRK's first prediction: rank 1, not 3
    with_cands = compute_metrics([1, 3, 4], [4], candidates=[0, 2, 4, 6, 8], ks=(1,))
    assert with_cands["hit@1"] == 1.0 and with_cands["mrr"] == 1.0
    assert compute_metrics([1, 3, 4], [4], ks=(1,))["mrr"] == pytest.approx(1 / 3)


def test_recall_is_recall_not_afs_recall_20() -> None:
    # AF's recall_20 = hit_20 / min(20, |gold|) would give 1/3 here and 1/20 below
    assert compute_metrics([10, 1, 11, 2], [1, 2, 3], ks=(20,))["recall@20"] == pytest.approx(2 / 3)
    gold = list(range(100, 125))
    m = compute_metrics(gold, gold, ks=(20, 25))
    assert m["recall@20"] == pytest.approx(20 / 25)  # denominator |gold|, no cap at 20
    assert m["recall@25"] == 1.0


def test_repeated_ids_count_at_their_first_position() -> None:
    m = compute_metrics([3, 3, 3, 5], [5], ks=(2,))
    assert m["mrr"] == 0.5 and m["hit@2"] == 1.0


def test_numpy_inputs_and_unsorted_candidates() -> None:
    cands = Candidates(np.array([8, 0, 4, 2, 6, 4]))
    assert cands.ids.tolist() == [0, 2, 4, 6, 8] and len(cands) == 5
    assert cands.contains(np.array([-1, 0, 5, 8, 9])).tolist() == [False, True, False, True, False]
    assert not Candidates([]).contains(np.array([1])).any()
    m = compute_metrics(np.array([7, 6], dtype=np.int32), np.array([6]), candidates=cands, ks=(1,))
    assert m["hit@1"] == 1.0


def test_bad_cutoff_is_rejected() -> None:
    with pytest.raises(ValueError, match="cut-offs"):
        compute_metrics([1], [1], ks=(0,))


def _stark_reference(ranked: list[int], gold: list[int], cands: set[int], k: int) -> tuple[float, float, float]:
    """STaRK's evaluator semantics written the slow, obvious way."""
    seen: list[int] = []
    for r in ranked:
        if r in cands and r not in seen:
            seen.append(r)
    relevant = {g for g in gold if g in cands}
    if not relevant:
        return 0.0, 0.0, 0.0
    top = seen[:k]
    hit = float(any(r in relevant for r in top))
    recall = sum(r in relevant for r in top) / len(relevant)
    mrr = next((1 / (i + 1) for i, r in enumerate(seen) if r in relevant), 0.0)
    return hit, recall, mrr


@settings(max_examples=200, deadline=None)
@given(
    ranked=st.lists(st.integers(0, 30), max_size=25),
    gold=st.lists(st.integers(0, 30), min_size=1, max_size=6),
    cands=st.sets(st.integers(0, 30), max_size=31),
    k=st.integers(1, 25),
)
def test_matches_a_direct_reading_of_starks_semantics(
    ranked: list[int], gold: list[int], cands: set[int], k: int
) -> None:
    m = compute_metrics(ranked, gold, candidates=sorted(cands), ks=(k,))
    hit, recall, mrr = _stark_reference(ranked, gold, cands, k)
    assert m[f"hit@{k}"] == hit
    assert m[f"recall@{k}"] == pytest.approx(recall)
    assert m["mrr"] == pytest.approx(mrr)


def test_dspy_metrics_read_answer_ids_and_ranked_ids() -> None:
    ex = dspy.Example(question="q", answer_ids=[4, 9]).with_inputs("question")
    pred = dspy.Prediction(ranked_ids=[1, 4, 2, 9])
    assert dspy_metric("hit@1")(ex, pred) == 0.0
    assert dspy_metric("mrr")(ex, pred) == dspy_metric("MRR")(ex, pred) == 0.5
    assert dspy_metric("hit@20")(ex, pred) == 1.0
    assert dspy_metric("recall@2")(ex, pred) == 0.5
    # GEPA calls metrics with five arguments
    assert dspy_metric("recall@20")(ex, pred, None, "reranker", None) == 1.0
    # with candidates, gold 9 is not a candidate: recall over {4} only
    assert dspy_metric("recall@2", candidates=[1, 2, 4])(ex, pred) == 1.0


def test_dspy_metric_errors_are_clear() -> None:
    with pytest.raises(ValueError, match="unknown metric 'precision@5'"):
        dspy_metric("precision@5")
    with pytest.raises(ValueError, match="k must be >= 1"):
        dspy_metric("hit@0")
    with pytest.raises(AttributeError, match="ranked_ids"):
        dspy_metric("mrr")(dspy.Example(answer_ids=[1]), dspy.Prediction(answer="x"))


def test_dspy_metric_works_in_dspy_evaluate() -> None:
    class Fixed(dspy.Module):
        def forward(self, question: str) -> dspy.Prediction:
            return dspy.Prediction(ranked_ids=[int(question), 0])

    gold = {"1": [1], "2": [0], "3": [7]}  # hit at rank 1, at rank 2, never
    data = [dspy.Example(question=q, answer_ids=g).with_inputs("question") for q, g in gold.items()]
    res = dspy.Evaluate(devset=data, metric=dspy_metric("hit@1"), num_threads=1, display_progress=False)(Fixed())
    assert res.score == pytest.approx(100 / 3, abs=0.01)
    res = dspy.Evaluate(devset=data, metric=dspy_metric("mrr"), display_progress=False)(Fixed())
    assert res.score == pytest.approx(50.0)
