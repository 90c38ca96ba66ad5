"""Step 4: symbol candidates.

Constants (symbols with a name/title) get their top ``l_max`` nodes by vector similarity of their
search string, ranked *inside* the hard-filter mask of their other attributes and their type
(strict mode) — the reference code intersected the filter with the top-3 hits instead and lost
the constant. Variables with attributes get every node that passes their filters. Attributes
that match no column (or a value that does not parse) are appended to a constant's search string,
as the paper says, and dropped (with an event) on a variable.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from autofocus.query_graph import Constraint, QueryGraph, Symbol
from autofocus.skb.model import SKB, Column
from autofocus.skb.names import named_ids

if TYPE_CHECKING:
    from autofocus.kb import KnowledgeBaseLike

NAME_KEYS = ("name", "title", "displayname")
_NUM = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$")


def _norm(key: str) -> str:
    return re.sub(r"[^a-z0-9]", "", key.lower())


@dataclass
class SymbolCandidates:
    constants: dict[str, np.ndarray] = field(default_factory=dict)  # var -> ranked ids (<= l_max)
    variables: dict[str, np.ndarray | None] = field(default_factory=dict)  # var -> filtered ids or None
    type_masks: dict[str, np.ndarray | None] = field(default_factory=dict)
    search_strings: dict[str, str] = field(default_factory=dict)
    applied_filters: dict[str, list[str]] = field(default_factory=dict)
    events: list[tuple[str, str]] = field(default_factory=list)  # (kind, detail)


def find_column(skb: SKB, key: str) -> tuple[str, Column] | None:
    """Map a query attribute name onto an SKB column: exact, normalised, then closest match."""
    if key in skb.columns:
        return key, skb.columns[key]
    by_norm = {_norm(k): k for k in skb.columns}
    nk = _norm(key)
    if nk in by_norm:
        return by_norm[nk], skb.columns[by_norm[nk]]
    close = difflib.get_close_matches(nk, list(by_norm), n=1, cutoff=0.85)
    if close:
        return by_norm[close[0]], skb.columns[by_norm[close[0]]]
    return None


def _parse_number(value: object) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        text = value.strip().replace(",", "").lstrip("$€£")
        if _NUM.match(text):
            return float(text)
    return None


_DATE = re.compile(r"^(\d{4})(?:-(\d{2})(?:-(\d{2}))?)?(?:[T ][\d:.]+(?:Z|[+-]\d{2}:?\d{2})?)?$")


def _parse_date(value: object) -> tuple[float, float] | None:
    """The days (since 1970-01-01) a date value covers, as ``[start, end)``: a whole year (``"2019"``,
    and the number ``2019`` alike), a month (``"2019-05"``) or a day (the time of day is ignored)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not (float(value).is_integer() and 1000 <= value <= 3000):
            return None
        value = f"{int(value):04d}"
    if not isinstance(value, str):
        return None
    m = _DATE.match(value.strip())
    if m is None:
        return None
    text, unit = m.group(1), "Y"
    if m.group(2):
        text, unit = f"{text}-{m.group(2)}", "M"
    if m.group(3):
        text, unit = f"{text}-{m.group(3)}", "D"
    try:
        start = np.datetime64(text, unit)
    except ValueError:  # "2019-13", "2019-02-30"
        return None
    days = np.array([start, start + 1]).astype("datetime64[D]").astype(np.int64)
    return float(days[0]), float(days[1])


def _number_mask(values: np.ndarray, op: str, value: object) -> np.ndarray | None:
    if op == "IN":
        parsed = [_parse_number(v) for v in value] if isinstance(value, list) else [None]
        return None if any(p is None for p in parsed) else np.isin(values, np.array(parsed, dtype=np.float64))
    num = _parse_number(value)
    compare = {"=": np.equal, "<>": np.not_equal, "<": np.less, "<=": np.less_equal, ">": np.greater,
               ">=": np.greater_equal}.get(op)  # fmt: skip
    if num is None or compare is None:
        return None  # text operators on numbers have no agreed meaning: the filter is not applied
    with np.errstate(invalid="ignore"):
        return compare(values, num)


def _date_mask(values: np.ndarray, present: np.ndarray, op: str, value: object) -> np.ndarray | None:
    """Comparisons against the whole period a value names: ``= 2019`` is the year, ``< "2019-05"``
    before May; text operators work on the ISO form (``STARTS WITH "2019-0"``)."""
    if op in ("CONTAINS", "STARTS WITH", "ENDS WITH"):
        days = np.where(present, values, 0).astype(np.int64).astype("datetime64[D]")
        iso = np.array(np.datetime_as_string(days), dtype=np.dtypes.StringDType())
        return _text_mask(iso, op, value)
    with np.errstate(invalid="ignore"):
        if op == "IN":
            parsed = [_parse_date(v) for v in value] if isinstance(value, list) else [None]
            spans = [span for span in parsed if span is not None]
            if len(spans) < len(parsed):
                return None
            mask = np.zeros(len(values), dtype=bool)
            for lo, hi in spans:
                mask |= (values >= lo) & (values < hi)
            return mask
        span = _parse_date(value)
        if span is None:
            return None
        lo, hi = span
        masks = {"=": (values >= lo) & (values < hi), "<>": (values < lo) | (values >= hi), "<": values < lo,
                 "<=": values < hi, ">": values >= hi, ">=": values >= lo}  # fmt: skip
    return masks.get(op)


def _text_mask(text: np.ndarray, op: str, value: object) -> np.ndarray | None:
    """Case-insensitive string operators, comparisons in lexicographic order."""
    if op == "IN":
        if not isinstance(value, list):
            return None
        return np.isin(text, np.array([str(v).lower() for v in value], dtype=np.dtypes.StringDType()))
    if isinstance(value, list):
        return None
    needle = str(value).lower()
    masks = {
        "=": np.equal, "<>": np.not_equal, "<": np.less, "<=": np.less_equal, ">": np.greater,
        ">=": np.greater_equal, "STARTS WITH": np.strings.startswith, "ENDS WITH": np.strings.endswith,
        "CONTAINS": lambda t, n: np.strings.find(t, n) >= 0,
    }  # fmt: skip
    return masks[op](text, needle) if op in masks else None


def _string_values(skb: SKB, key: str, col: Column) -> np.ndarray:
    """Lower-cased column text as a numpy StringDType array, built once per column."""
    cache = skb.__dict__.setdefault("_lower_text_cache", {})
    if key not in cache:
        cache[key] = np.strings.lower(np.array(col.text.strings(), dtype=np.dtypes.StringDType()))
    return cache[key]


def constraint_mask(skb: SKB, constraint: Constraint) -> np.ndarray | None:
    """Boolean mask of nodes satisfying one constraint, or None if it cannot be applied.

    A node without the attribute never satisfies it (as in Cypher, where ``NULL <> x`` is not true).
    """
    found = find_column(skb, constraint.key)
    if found is None:
        return None
    key, col = found
    op, value = constraint.op, constraint.value
    if col.kind == "number":
        mask = _number_mask(np.asarray(col.values), op, value)
    elif col.kind == "date":
        mask = _date_mask(np.asarray(col.values), col.present, op, value)
    else:
        mask = _text_mask(_string_values(skb, key, col), op, value)
    return None if mask is None else mask & col.present


def _type_mask(skb: SKB, sym: Symbol, strict: bool) -> np.ndarray | None:
    if not strict or sym.type is None or sym.type not in skb.node_type_names:
        return None
    codes = [skb.type_code(t) for t in sym.types if t in skb.node_type_names]
    return skb.node_type == codes[0] if len(codes) == 1 else np.isin(skb.node_type, codes)


@dataclass
class _ConstantSearch:
    var: str
    name: str
    search: str
    mask: np.ndarray | None  # hard filters (with the type); None: only ``node_type`` restricts
    node_type: str | None
    type_mask: np.ndarray | None


def retrieve_symbol_candidates(
    kb: KnowledgeBaseLike,
    qg: QueryGraph,
    l_max: int,
    variant: str = "text",
    strict: bool = True,
    exact_name_first: bool = True,
    exact_name_only: bool = False,
    widened: frozenset[str] = frozenset(),
) -> SymbolCandidates:
    """Candidates for every symbol of the query graph (see module docstring).

    The constants' search strings are embedded in one batch (one model call, or one request to a
    hosted embedder, instead of one per constant).
    """
    skb: SKB = kb.skb
    out = SymbolCandidates()
    searches: list[_ConstantSearch] = []
    for var, sym in qg.symbols.items():
        if sym.extent:  # fixed by the program: these nodes, whatever their type
            out.type_masks[var] = None
            out.variables[var] = np.unique(np.asarray(sym.extent, dtype=np.int64))
            continue
        tmask = _type_mask(skb, sym, strict)
        out.type_masks[var] = tmask
        mask = None if tmask is None else tmask.copy()
        name = sym.name_value(NAME_KEYS)
        extra: list[str] = []
        applied: list[str] = []
        for c in sym.constraints:
            if name is not None and c.key.lower() in NAME_KEYS and c.value == name:
                continue
            cm = constraint_mask(skb, c)
            label = f"{c.key} {c.op} {c.value}"
            if cm is None:
                if name is not None:
                    extra.append(f"{c.key}: {c.value}")
                else:
                    out.events.append(("filter_unusable", f"{var}: {label}"))
                continue
            applied.append(label)
            mask = cm if mask is None else mask & cm
        out.applied_filters[var] = applied
        if name is None:
            out.variables[var] = None if not applied or mask is None else np.flatnonzero(mask)
            continue
        search = "; ".join([name, *extra])
        out.search_strings[var] = search
        # without attribute filters the type alone restricts: the type's own index, no id selector
        node_type = sym.type if tmask is not None and not applied else None
        searches.append(_ConstantSearch(var, name, search, None if node_type else mask, node_type, tmask))
    todo = [c for c in searches if c.mask is None or c.mask.any()]  # an empty filter needs no search
    named = {c.var: _named(skb, c) if exact_name_first else np.zeros(0, np.int64) for c in todo}
    # a constant its exact name settles needs no embedding and no scan (the common case at scale)
    settled = {c.var: named[c.var] for c in todo
               if exact_name_only and c.var not in widened and 0 < len(named[c.var]) <= l_max}
    vectors = _embed_all(kb, [c.search for c in todo if c.var not in settled])
    for c in searches:
        ranked = np.zeros(0, np.int64)
        if c.var in settled:
            ranked = settled[c.var]
        elif c.search in vectors:
            ranked = _rank_constant(kb, vectors[c.search], c, l_max, variant, named[c.var])
        if len(ranked) == 0:
            out.events.append(("constant_without_candidates", f"{c.var}: {c.search}"))
            out.variables[c.var] = None
        else:
            out.constants[c.var] = ranked
    return out


def _embed_all(kb: KnowledgeBaseLike, texts: list[str]) -> dict[str, np.ndarray]:
    """Search string -> query vector, in one batch when the knowledge base can embed several."""
    if not texts:
        return {}
    batch = getattr(kb, "embed_queries", None)
    vecs = batch(texts) if batch is not None else [kb.embed_query(t) for t in texts]
    return dict(zip(texts, vecs, strict=True))


def _named(skb: SKB, c: _ConstantSearch) -> np.ndarray:
    """The nodes ``c``'s name identifies (``skb.names.named_ids``) inside its mask or type."""
    named, _ = named_ids(skb, c.name)
    allowed = c.mask if c.mask is not None else c.type_mask
    return named[allowed[named]] if allowed is not None and len(named) else named


def _rank_constant(
    kb: KnowledgeBaseLike, qvec: np.ndarray, c: _ConstantSearch, l_max: int, variant: str, named: np.ndarray,
) -> np.ndarray:
    """Top ``l_max`` nodes for ``c`` inside its mask (or of its type), the ``named`` ones first."""
    index = kb.index(variant)
    ids, _ = index.search(qvec, node_type=c.node_type, candidates=c.mask, k=l_max)
    ids = np.asarray(ids, dtype=np.int64)
    if len(named) == 0:
        return ids
    return np.concatenate([named, ids[~np.isin(ids, named)]])[:l_max]
