"""Step 3's work caps: a question needs a handful of triplets; an answer with thousands of MATCH clauses
would make steps 3b-5 search for minutes. What lies beyond a cap is cut (the part nearest the target is
kept) and named in ``QueryGraph.capped``, so the question is recorded as degraded, never silently
narrowed."""

from __future__ import annotations

from collections import deque

from autofocus.query_graph import Symbol, Triplet

MAX_QUERY_CHARS = 20_000  # over twice the longest LM answer step 2 parses (``llm_call.MAX_ANSWER_CHARS``)
MAX_TRIPLETS = 12
MAX_SYMBOLS = 2 * MAX_TRIPLETS + 1
MAX_CONDITIONS = 12  # per symbol
MAX_DROPPED = 50  # Dropped records kept (each becomes a trace event); the rest are counted in one


def within_caps(symbols: dict[str, Symbol], triplets: list[Triplet], target: str | None,
                links: list[tuple[str, str]], capped: list[str]) -> tuple[dict[str, Symbol], list[Triplet]]:
    """The query cut to the work caps: the triplets nearest the target, their symbols (the target
    first), the first conditions of each symbol; what was cut is appended to ``capped``. ``links``:
    the ``(head, tail)`` of every triplet the query wrote, kept or not."""
    if len(triplets) > MAX_TRIPLETS:
        dist = hops_from(target, triplets)
        order = sorted(range(len(triplets)), key=lambda i: min(dist.get(triplets[i].head, len(triplets)),
                                                               dist.get(triplets[i].tail, len(triplets))))
        keep = sorted(order[:MAX_TRIPLETS])
        capped.append(f"{len(triplets):,} triplets: the {MAX_TRIPLETS} nearest the target are kept")
        triplets = [triplets[i] for i in keep]
    if len(symbols) > MAX_SYMBOLS or len(triplets) < len(links):
        used = dict.fromkeys([v for v in (target,) if v is not None]
                             + [v for t in triplets for v in (t.head, t.tail)])
        linked = {v for link in links for v in link}  # a symbol cut off with its triplets goes too
        rest = [v for v in symbols if v not in used and v not in linked][: max(0, MAX_SYMBOLS - len(used))]
        kept = {v: symbols[v] for v in symbols if v in used or v in rest}
        if len(kept) < len(symbols):
            capped.append(f"{len(symbols):,} symbols: {len(kept)} are kept")
        symbols = kept
    crowded = [v for v, s in symbols.items() if len(s.constraints) > MAX_CONDITIONS]
    for v in crowded:
        symbols[v] = symbols[v].model_copy(update={"constraints": symbols[v].constraints[:MAX_CONDITIONS]})
    if crowded:
        capped.append(f"more than {MAX_CONDITIONS} conditions on {', '.join(crowded[:5])}: "
                      f"the first {MAX_CONDITIONS} are kept")
    return symbols, triplets


def hops_from(start: str | None, triplets: list[Triplet]) -> dict[str, int]:
    """Hops from ``start`` to each symbol its triplets reach (breadth first, one pass per level)."""
    links: dict[str, list[str]] = {}
    for t in triplets:
        links.setdefault(t.head, []).append(t.tail)
        links.setdefault(t.tail, []).append(t.head)
    dist = {start: 0} if start is not None else {}
    queue = deque(dist)
    while queue:
        v = queue.popleft()
        for w in links.get(v, []):
            if w not in dist:
                dist[w] = dist[v] + 1
                queue.append(w)
    return dist
