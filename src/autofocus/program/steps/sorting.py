"""Comparison sorts for the pairwise rerankers, written against a *batched* comparator.

Items are positions ``0..n-1`` in the pre-rerank order, so "keep the current order" is simply
"the lower position wins". The comparator takes a batch of position pairs ``(a, b)`` with
``a < b`` and returns, per pair, ``1`` (a is better), ``-1`` (b is better) or ``0`` (tie / no
usable answer). One comparator call is one *round*: the rerankers run its comparisons
concurrently, so rounds count sequential LLM latencies.

The sorts are coroutines (generators that yield the pairs they need and receive the outcomes),
so independent sub-sorts are interleaved into shared rounds by ``_parallel`` without threads.

- ``binary_insertion_sort``: the paper's sort (CPython's ``sorted`` with ``cmp_to_key`` on fewer
  than 64 items is a binary insertion sort); one comparison per round, at most
  ``sum(ceil(log2(i + 1)) for i < n)`` comparisons (69 for n = 20, ~58 on average).
- ``tournament_sort``: a seeded tournament, 5-9 rounds and ~80 comparisons for n = 20 (see its
  docstring).

Both are exact for a consistent comparator (one that agrees with a weak order): they return the
stable best-first order, ties in pre-rerank order. Whatever the comparator answers, they return a
permutation of ``range(n)``.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable

Pair = tuple[int, int]
BatchCompare = Callable[[list[Pair]], list[int]]
# a sort coroutine: yields the pairs it needs for the next round, receives their outcomes
Coroutine = Generator[list[Pair], list[int], list[int]]


def _run(sort: Generator[list[Pair], list[int], list[int]], compare: BatchCompare) -> list[int]:
    try:
        pairs = next(sort)
        while True:
            results = list(compare(pairs))
            if len(results) != len(pairs):
                raise ValueError(f"comparator returned {len(results)} results for {len(pairs)} pairs")
            pairs = sort.send(results)
    except StopIteration as stop:
        return stop.value


def _parallel(
    sorts: Iterable[Generator[list[Pair], list[int], object]],
) -> Generator[list[Pair], list[int], list]:
    """Run coroutines side by side: each round carries the pairs of every coroutine still running."""
    sorts = list(sorts)
    results: list = [None] * len(sorts)
    pending: dict[int, list[Pair]] = {}
    for i, sort in enumerate(sorts):
        try:
            pending[i] = next(sort)
        except StopIteration as stop:
            results[i] = stop.value
    while pending:
        spans: list[tuple[int, int, int]] = []
        batch: list[Pair] = []
        for i, pairs in pending.items():
            spans.append((i, len(batch), len(batch) + len(pairs)))
            batch += pairs
        outcomes = yield batch
        for i, start, end in spans:
            try:
                pending[i] = sorts[i].send(outcomes[start:end])
            except StopIteration as stop:
                results[i] = stop.value
                del pending[i]
    return results


def _pair(x: int, y: int) -> Pair:
    return (x, y) if x < y else (y, x)


def _better(x: int, y: int, outcome: int) -> bool:
    """Whether x ranks above y given the outcome of ``_pair(x, y)``; a tie keeps the pre-rerank order."""
    signed = outcome if x < y else -outcome
    return signed > 0 or (signed == 0 and x < y)


def _search(x: int, ranked: list[int]) -> Generator[list[Pair], list[int], int]:
    """Binary search of x's slot in a best-first list, one comparison per round."""
    lo, hi = 0, len(ranked)
    while lo < hi:
        mid = (lo + hi) // 2
        (outcome,) = yield [_pair(x, ranked[mid])]
        if _better(x, ranked[mid], outcome):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _insertion(items: list[int]) -> Coroutine:
    ranked: list[int] = []
    for x in items:
        ranked.insert((yield from _search(x, ranked)), x)
    return ranked


def _round_robin(items: list[int]) -> Coroutine:
    """All pairs in one round; rank by points (win 1, tie 0.5 each), equal points in pre-rerank order."""
    if len(items) < 2:
        return list(items)
    pairs = [_pair(a, b) for i, a in enumerate(items) for b in items[i + 1 :]]
    outcomes = yield pairs
    points = dict.fromkeys(items, 0.0)
    for (a, b), outcome in zip(pairs, outcomes, strict=True):
        if outcome > 0:
            points[a] += 1.0
        elif outcome < 0:
            points[b] += 1.0
        else:
            points[a] += 0.5
            points[b] += 0.5
    return sorted(items, key=lambda x: (-points[x], x))


def _tournament(items: list[int], seeds: int, anchors: int, group_size: int) -> Coroutine:
    if len(items) <= group_size:
        return (yield from _round_robin(items))
    rest = range(seeds, len(items))
    chosen = set(range(seeds)) | {rest[(j + 1) * len(rest) // (anchors + 1) - 1] for j in range(anchors)}
    ranked_seeds = yield from _tournament([items[i] for i in sorted(chosen)], seeds, anchors, group_size)
    challengers = [x for i, x in enumerate(items) if i not in chosen]
    slots = yield from _parallel(_search(x, ranked_seeds) for x in challengers)
    brackets: list[list[int]] = [[] for _ in range(len(ranked_seeds) + 1)]
    for x, slot in zip(challengers, slots, strict=True):
        brackets[slot].append(x)  # challengers arrive in pre-rerank order, so brackets keep it
    played = yield from _parallel(_tournament(b, seeds, anchors, group_size) for b in brackets)
    order: list[int] = []
    for j, bracket in enumerate(played):
        order += bracket
        if j < len(ranked_seeds):
            order.append(ranked_seeds[j])
    return order


def check_tournament(seeds: int, anchors: int, group_size: int) -> None:
    """Reject settings under which the seed block could not shrink (it must fit one round robin)."""
    if seeds < 1 or anchors < 0:
        raise ValueError(
            f"tournament: need seeds >= 1 and anchors >= 0, got seeds={seeds}, anchors={anchors}"
        )
    if group_size < max(2, seeds + anchors):
        raise ValueError(
            f"tournament: group_size must be >= max(2, seeds + anchors) = {max(2, seeds + anchors)}, got {group_size}"
        )


def binary_insertion_sort(n: int, compare: BatchCompare) -> list[int]:
    """Best-first stable binary insertion sort of positions ``0..n-1``, one comparison per round."""
    return _run(_insertion(list(range(n))), compare)


def tournament_sort(
    n: int, compare: BatchCompare, *, seeds: int = 6, anchors: int = 2, group_size: int = 8
) -> list[int]:
    """Seeded tournament: few sequential rounds, and the pre-rerank favourites are hard to unseat.

    A block of at most ``group_size`` positions plays a round robin in one round (ranked by
    points, equal points in pre-rerank order). A larger block takes as seeds its first ``seeds``
    positions (the pre-rerank favourites) and ``anchors`` positions evenly spaced over the rest
    (so that the brackets below the favourites come out small), and ranks them recursively.
    Every other position challenges the ranked seeds by binary search, all challengers
    concurrently (``ceil(log2(seeds + anchors + 1))`` rounds), which drops each into a bracket
    between two adjacent seeds; the brackets are then played the same way, concurrently.

    As in binary insertion, a challenger reaches the top only by winning every comparison on its
    search path, so a correct favourite survives a noisy comparator, while round robins give the
    seeds and the brackets all-pairs robustness. For k = 20 with the defaults: 5-9 rounds
    (binary insertion: ~58) and ~80 comparisons (binary insertion: ~58);
    ``benchmarks/bench_pairwise.py`` measures both, and their ordering quality, under noisy
    comparators. ``group_size >= n`` is a single round robin: 1 round, ``n(n-1)/2`` comparisons.
    For a consistent comparator the result is exactly the stable sort: a position beaten by
    exactly ``j`` seeds lies between the ``j``-th and ``(j+1)``-th seed of the total order.
    """
    check_tournament(seeds, anchors, group_size)
    return _run(_tournament(list(range(n)), seeds, anchors, group_size), compare)
