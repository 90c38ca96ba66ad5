"""Map the node labels and relationship types an LLM wrote onto the SKB schema.

Three stages, first hit wins: **exact** (the schema's own name), **normalised** (case, ``_``,
``-``, ``/``, spaces, plural ``s``, and for relationships the endpoint types and filler words
around the verb: ``author_writes_paper``, ``writes`` and ``author___writes___paper`` all become
``write``; an edge type's ``description`` counts as another name), then **closest** (the best
``difflib`` ratio or token containment, at least ``min_similarity``). ``difflib`` is in the
standard library and its ratio is the edit-based measure the threshold is calibrated on.

Relationship types also use the endpoints' node types: among names that match about equally
well, one whose domain/range fits the endpoints wins, and an edge type that fits only the other
way round is reported as ``flipped`` (the LLM wrote ``(p:paper)-[:writes]->(a:author)``). A
relationship label that is nothing but endpoint types (``is_effect/phenotype_of_disease``)
maps to the single edge type between those endpoint types, if there is exactly one.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Literal, TypeVar

from autofocus.language import DEFAULT as DEFAULT_LANGUAGE
from autofocus.language import Language, language
from autofocus.skb.schema import Schema

K = TypeVar("K")
V = TypeVar("V")
How = Literal["exact", "normalised", "closest", "endpoints", "ambiguous", "none"]

_TOKEN = re.compile(r"[^\W_]+")
_TIE = 0.02  # scores closer than this are a tie
_NORMALISED, _CONTAINED = 0.95, 0.85
_TIER = {"exact": 2, "normalised": 1, "closest": 0}
_MAX_ALIAS_TOKENS = 6  # longer descriptions are prose, not names, and only count when equal


@dataclass(frozen=True, slots=True)
class Match:
    """The schema type a label maps to (``None``: no match) and how it was found."""

    name: str | None
    how: How
    score: float
    ties: tuple[str, ...] = ()  # other types that matched as well as ``name`` (how == "ambiguous")


@dataclass(frozen=True, slots=True)
class EdgeMatch(Match):
    flipped: bool = False  # the edge type fits the endpoints only the other way round
    fits: bool = True  # its domain/range agree with the endpoint types in some direction


_NO_MATCH = Match(None, "none", 0.0)


@dataclass(frozen=True, slots=True)
class _Key:
    name: str
    norm: str  # all tokens
    core: str  # without filler words (and, for relationships, the endpoint types around the verb)
    core_tokens: frozenset[str]
    bare: bool  # the label is nothing but node types and filler words
    alias: str  # the normalised description: another name when short, else compared for equality only
    alias_fuzzy: bool


class SchemaMapper:
    """Maps labels onto one schema's node and edge types; results are cached per label.

    Args:
        schema: the SKB schema.
        min_similarity: the lowest ``closest`` score accepted (0..1).
        lang: the language of the schema's names: its filler words and plural endings
            (``Language.name_fillers``, ``name_singular``); English by default.

    Example:
        >>> SchemaMapper(schema).node_type("Genes").name
        'gene/protein'
    """

    def __init__(self, schema: Schema, min_similarity: float = 0.75, lang: Language | None = None) -> None:
        self.schema = schema
        self.min_similarity = min_similarity
        self.lang = lang or language(DEFAULT_LANGUAGE)
        # node types as token sequences, longest first, for stripping them off relationship labels
        self._type_seqs = sorted(
            {tuple(sorted(self._content(self.tokens(t)))) for t in schema.node_types if self._content(self.tokens(t))},
            key=len,
            reverse=True,
        )
        self._nodes = [self._key(n, info.description, strip=False) for n, info in schema.node_types.items()]
        self._edges = [self._key(n, info.description, strip=True) for n, info in schema.edge_types.items()]
        self._node_cache: dict[str, Match] = {}
        self._edge_cache: dict[str, tuple[bool, list[tuple[str, How, float]]]] = {}
        self._edge_match_cache: dict[tuple[str, str | None, str | None, bool], EdgeMatch] = {}

    def _key(self, label: str, description: str = "", strip: bool = False) -> _Key:
        toks = self.tokens(label)
        content = self._content(toks)
        core, bare = content, False
        if strip:
            # "author write paper" -> "write"; "product has brand" -> "brand" (only types: keep the last)
            head = self._strip_prefix(content)
            core = self._strip_suffix(head)
            bare = not core
            core = core or head or content
        alias = self.tokens(description)
        return _Key(label, " ".join(toks), " ".join(core), frozenset(core), bare, " ".join(alias),
                    len(alias) <= _MAX_ALIAS_TOKENS)  # fmt: skip

    def tokens(self, label: str) -> tuple[str, ...]:
        """Lowercase word tokens without their plural ending: ``Genes/Proteins`` -> ``('gene', 'protein')``."""
        return tuple(self.lang.name_singular(t) for t in _TOKEN.findall(label.lower()))

    def _content(self, toks: tuple[str, ...]) -> tuple[str, ...]:
        """The tokens without the names' filler words (``has``, ``of``, ``is``)."""
        return tuple(t for t in toks if t not in self.lang.name_fillers)

    def _strip_prefix(self, toks: tuple[str, ...]) -> tuple[str, ...]:
        for seq in self._type_seqs:
            if len(toks) >= len(seq) and tuple(sorted(toks[: len(seq)])) == seq:
                return toks[len(seq) :]
        return toks

    def _strip_suffix(self, toks: tuple[str, ...]) -> tuple[str, ...]:
        for seq in self._type_seqs:
            if len(toks) >= len(seq) and tuple(sorted(toks[len(toks) - len(seq) :])) == seq:
                return toks[: len(toks) - len(seq)]
        return toks

    # -- node types --
    def node_type(self, label: str) -> Match:
        """The node type for a label; ``how == "ambiguous"`` names the best of several equal matches."""
        hit = self._node_cache.get(label)
        if hit is None:
            hit = _remember(
                self._node_cache, label, self._best(self._scores(self._key(label), self._nodes), None)
            )
        return hit

    # -- edge types --
    def edge_type(
        self, label: str, head_type: str | None, tail_type: str | None, directed: bool = True
    ) -> EdgeMatch:
        """The edge type for a relationship label between nodes of the given types (None: unknown)."""
        key = (label, head_type, tail_type, directed)
        hit = self._edge_match_cache.get(key)
        if hit is None:
            hit = _remember(
                self._edge_match_cache, key, self._edge_type(label, head_type, tail_type, directed)
            )
        return hit

    def edge_scores(self, label: str) -> dict[str, float]:
        """How well ``label`` names each edge type (1 exact, 0.95 normalised, else the closest-match
        similarity), before endpoint types are considered; query repair weighs these against labels."""
        cached = self._edge_cache.get(label)
        if cached is None:
            key = self._key(label, strip=True)
            cached = _remember(self._edge_cache, label, (key.bare, self._scores(key, self._edges)))
        return {name: score for name, _, score in cached[1]}

    def node_scores(self, label: str) -> dict[str, float]:
        """How well ``label`` names each node type (same scale as ``edge_scores``)."""
        return {name: score for name, _, score in self._scores(self._key(label), self._nodes)}

    def _edge_type(
        self, label: str, head_type: str | None, tail_type: str | None, directed: bool
    ) -> EdgeMatch:
        self.edge_scores(label)
        bare, scored = self._edge_cache[label]
        fit = {name: self._fits(name, head_type, tail_type) for name in self.schema.edge_types}
        best = self._best(scored, lambda name: any(fit[name]))
        if best.name is None and bare and (head_type or tail_type):
            fitting = self._most_specific([n for n, f in fit.items() if any(f)], head_type, tail_type)
            if len(fitting) == 1:
                best = Match(fitting[0], "endpoints", 0.0)
            elif fitting:
                best = Match(fitting[0], "ambiguous", 0.0, tuple(fitting[1:]))
        if best.name is None:
            return EdgeMatch(None, "none", 0.0)
        forward, backward = fit[best.name]
        return EdgeMatch(
            best.name,
            best.how,
            best.score,
            best.ties,
            flipped=directed and backward and not forward,
            fits=forward or backward,
        )

    def _most_specific(self, names: list[str], head: str | None, tail: str | None) -> list[str]:
        """Edge types whose declared domain/range name the endpoint types, before wildcard ones."""

        def named(n: str) -> int:
            info = self.schema.edge_types[n]
            pairs = ((head, tail), (tail, head))
            return max(
                (a is not None and info.src_type == a) + (b is not None and info.dst_type == b)
                for a, b in pairs
            )

        top = max(map(named, names), default=0)
        return [n for n in names if named(n) == top]

    def _fits(self, name: str, head: str | None, tail: str | None) -> tuple[bool, bool]:
        info = self.schema.edge_types[name]

        def ok(src: str | None, dst: str | None) -> bool:
            return (info.src_type is None or src is None or info.src_type == src) and (
                info.dst_type is None or dst is None or info.dst_type == dst
            )

        return ok(head, tail), ok(tail, head)

    # -- scoring --
    def _scores(self, key: _Key, candidates: list[_Key]) -> list[tuple[str, How, float]]:
        out = []
        for c in candidates:
            if key.name == c.name:
                out.append((c.name, "exact", 1.0))
            elif key.norm == c.norm or (key.core and key.core == c.core) or (c.alias and key.norm == c.alias):
                out.append((c.name, "normalised", _NORMALISED))
            else:
                out.append((c.name, "closest", _similarity(key, c)))
        return out

    def _best(self, scored: list[tuple[str, How, float]], fits: Callable[[str], bool] | None) -> Match:
        """The highest score at or above the threshold; ``fits`` (endpoint types) ranks before the score."""
        eligible = [s for s in scored if s[2] >= self.min_similarity]
        if not eligible:
            return _NO_MATCH

        def rank(s: tuple[str, How, float]) -> tuple[bool, int, float]:
            return (fits(s[0]) if fits else True, _TIER[s[1]], s[2])

        best = max(eligible, key=rank)
        top = rank(best)
        ties = tuple(
            s[0] for s in eligible if s is not best and rank(s)[:2] == top[:2] and s[2] >= best[2] - _TIE
        )
        if ties:
            return Match(best[0], "ambiguous", best[2], ties)
        return Match(best[0], best[1], best[2])


_CACHE_SIZE = 20_000


def _remember(cache: dict[K, V], key: K, value: V) -> V:
    """Store in a bounded cache (LLM labels are open-ended over a long run)."""
    if len(cache) >= _CACHE_SIZE:
        cache.clear()
    cache[key] = value
    return value


def _similarity(key: _Key, c: _Key) -> float:
    score = SequenceMatcher(None, key.norm, c.norm).ratio()
    if key.core and c.core:
        score = max(score, SequenceMatcher(None, key.core, c.core).ratio())
        if key.core_tokens < c.core_tokens:  # "gene" inside "gene/protein"
            score = max(score, _CONTAINED)
    if c.alias and c.alias_fuzzy:
        score = max(score, SequenceMatcher(None, key.norm, c.alias).ratio())
    return score


_MAPPERS: OrderedDict[int, SchemaMapper] = OrderedDict()
_MAX_MAPPERS = 8


def mapper_for(schema: Schema) -> SchemaMapper:
    """A cached mapper per schema object (kept alive by the cache, so its id is not reused)."""
    m = _MAPPERS.get(id(schema))
    if m is not None and m.schema is schema:
        _MAPPERS.move_to_end(id(schema))
        return m
    m = _MAPPERS[id(schema)] = SchemaMapper(schema)
    if len(_MAPPERS) > _MAX_MAPPERS:
        _MAPPERS.popitem(last=False)
    return m
