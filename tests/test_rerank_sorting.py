"""The comparison sorts behind the pairwise rerankers: exactness, call and round counts, robustness."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autofocus.program.steps.sorting import binary_insertion_sort, tournament_sort


class Comparator:
    """A batched comparator over positions from hidden keys (higher is better), counting rounds/calls."""

    def __init__(self, keys: list[float], error: float = 0.0, seed: int = 0) -> None:
        self.keys, self.error, self.rng = keys, error, random.Random(seed)
        self.rounds = self.calls = 0
        self.round_sizes: list[int] = []

    def __call__(self, pairs: list[tuple[int, int]]) -> list[int]:
        self.rounds += 1
        self.calls += len(pairs)
        self.round_sizes.append(len(pairs))
        out = []
        for a, b in pairs:
            assert a < b, "pairs are presented in pre-rerank order"
            diff = self.keys[a] - self.keys[b]
            result = (diff > 0) - (diff < 0)
            if self.error and self.rng.random() < self.error:
                result = -result if result else self.rng.choice([-1, 1])
            out.append(result)
        return out


def stable_best_first(keys: list[float]) -> list[int]:
    return sorted(range(len(keys)), key=lambda i: (-keys[i], i))


SORTS = [binary_insertion_sort, tournament_sort]


@pytest.mark.parametrize("sort", SORTS)
@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 20, 33])
def test_exact_for_a_consistent_comparator_with_ties(sort, n: int) -> None:
    rng = random.Random(n)
    for _ in range(5):
        keys = [float(rng.randint(0, max(1, n // 3))) for _ in range(n)]  # many ties
        assert sort(n, Comparator(keys)) == stable_best_first(keys)


def test_binary_insertion_counts_match_the_paper() -> None:
    n = 20
    bound = sum(math.ceil(math.log2(i + 1)) for i in range(1, n))
    calls = []
    for seed in range(30):
        cmp = Comparator([float(k) for k in random.Random(seed).sample(range(n), n)])
        binary_insertion_sort(n, cmp)
        assert cmp.rounds == cmp.calls <= bound  # strictly sequential
        calls.append(cmp.calls)
    assert 50 <= sum(calls) / len(calls) <= bound  # ~k log2 k, as in Table 1 (CPython's sort: ~59)


def test_tournament_has_few_rounds_and_concurrent_batches() -> None:
    n = 20
    for seed in range(30):
        keys = [float(k) for k in random.Random(seed).sample(range(n), n)]
        cmp = Comparator(keys)
        assert tournament_sort(n, cmp) == stable_best_first(keys)
        assert cmp.rounds <= 10
        assert cmp.calls <= 120
        assert max(cmp.round_sizes) > 1


def test_tournament_rounds_on_an_informative_prior() -> None:
    """Pre-rerank order close to the truth (as after steps 6-7): seeds split the rest evenly."""
    n, rounds, calls = 20, [], []
    for seed in range(50):
        rng = random.Random(seed)
        keys = [-(i + rng.gauss(0, 4)) for i in range(n)]
        cmp = Comparator(keys)
        tournament_sort(n, cmp)
        rounds.append(cmp.rounds)
        calls.append(cmp.calls)
    assert sum(rounds) / len(rounds) <= 6.5
    assert sum(calls) / len(calls) <= 90


def test_a_tournament_of_one_group_is_one_round_of_all_pairs() -> None:
    keys = [float(i % 5) for i in range(12)]
    cmp = Comparator(keys)
    assert tournament_sort(12, cmp, group_size=12) == stable_best_first(keys)
    assert (cmp.rounds, cmp.calls) == (1, 66)


@pytest.mark.parametrize(("seeds", "anchors", "group_size"), [(0, 2, 8), (6, -1, 8), (6, 2, 7), (1, 0, 1)])
def test_tournament_parameters_are_validated(seeds: int, anchors: int, group_size: int) -> None:
    with pytest.raises(ValueError, match="tournament"):
        tournament_sort(5, Comparator([0.0] * 5), seeds=seeds, anchors=anchors, group_size=group_size)


@pytest.mark.parametrize(("seeds", "anchors", "group_size"), [(1, 0, 2), (2, 1, 3), (6, 2, 8), (3, 3, 10)])
def test_tournament_settings_stay_exact(seeds: int, anchors: int, group_size: int) -> None:
    for n in (9, 20, 31):
        keys = [float(k % 7) for k in random.Random(n).sample(range(n), n)]
        assert tournament_sort(n, Comparator(keys), seeds=seeds, anchors=anchors, group_size=group_size) == (
            stable_best_first(keys)
        )


def test_comparator_must_answer_every_pair() -> None:
    with pytest.raises(ValueError, match="results for"):
        tournament_sort(4, lambda pairs: [1])


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 30),
    seed=st.integers(0, 2**16),
    seeds=st.integers(1, 6),
    anchors=st.integers(0, 3),
    extra=st.integers(0, 4),
)
def test_any_comparator_gives_a_permutation(n: int, seed: int, seeds: int, anchors: int, extra: int) -> None:
    rng = random.Random(seed)

    def chaos(pairs: list[tuple[int, int]]) -> list[int]:
        return [rng.choice([-1, 0, 1]) for _ in pairs]

    assert sorted(binary_insertion_sort(n, chaos)) == list(range(n))
    order = tournament_sort(
        n, chaos, seeds=seeds, anchors=anchors, group_size=max(2, seeds + anchors) + extra
    )
    assert sorted(order) == list(range(n))


def test_noisy_comparator_keeps_the_favourite_on_top_as_often_as_insertion() -> None:
    """With 15 % wrong answers and an informative prior, the tournament finds the best about as
    often as binary insertion (benchmarks/bench_pairwise.py measures this in detail)."""
    n, trials = 20, 300
    hits = {"insertion": 0, "tournament": 0}
    for seed in range(trials):
        rng = random.Random(seed)
        keys = [-(i + rng.gauss(0, 4)) for i in range(n)]
        best = max(range(n), key=lambda i: keys[i])
        hits["insertion"] += binary_insertion_sort(n, Comparator(keys, 0.15, seed))[0] == best
        hits["tournament"] += tournament_sort(n, Comparator(keys, 0.15, seed))[0] == best
    assert hits["tournament"] >= hits["insertion"] - 0.08 * trials
    assert hits["tournament"] > 0.5 * trials
