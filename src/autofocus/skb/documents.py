"""Node documents in the paper's variants (appendix A.6.4) and node descriptions for rerankers.

- ``"text"``: a ``type: name`` line, then the node's document; an empty one is replaced by the name,
  type and attributes. The line carries the node's identity into its embedding: a document often
  describes its node without naming it or saying what kind of thing it is, and a question asks for
  a kind of thing ("which body parts ...").
- ``"text+rel"``: a ``name (type)`` line, the relation summary, then the document (or the
  attributes when it is empty).
  Relations are the 1-hop neighbours grouped by edge type, direction and neighbour type, and
  2-hop paths through every edge type (and direction) by which the node has exactly one
  neighbour, i.e. where the relation is 1-1 or n-1 seen from the node (paths back to the node
  itself are left out).

Budgets are in tokens estimated as ``ceil(characters / 4)``, the usual rule of thumb for
English with BPE/WordPiece tokenizers: cheap, deterministic and independent of the model.
When a document is over budget, the details are cut before the relation summary: relations
keep at least ``REL_SHARE`` of the budget (all of it that the document does not need), lose
their 2-hop lines and then their last 1-hop lines, and the document gets the rest.

Neighbours are gathered for a whole batch of nodes with one CSR gather per edge type and
direction (``autofocus.skb.graph``); only the formatting of the shown names is per node.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from autofocus.config import DocVariant
from autofocus.skb.graph import CSR, sorted_unique
from autofocus.skb.model import SKB

Direction = Literal["out", "in"]
RelationMode = Literal["full", "retrieved", "none"]

CHARS_PER_TOKEN = 4
REL_SHARE = 0.5
MAX_NEIGHBOURS = 20
MAX_TWO_HOP_NEIGHBOURS = 5
BATCH = 4096
SCAN_LIMIT = 100_000


def estimate_tokens(text: str) -> int:
    """A model-free token estimate: ``ceil(len(text) / 4)``."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def truncate_to_tokens(text: str, budget_tokens: int) -> str:
    """``text`` cut to the budget, ending in "…" when cut (at a word boundary when one is near)."""
    limit = max(0, budget_tokens) * CHARS_PER_TOKEN
    if len(text) <= limit:
        return text
    if limit <= 1:
        return ""
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space > limit * 0.8:
        cut = cut[:space]
    return cut.rstrip() + "…"


@dataclass(frozen=True)
class RelationGroup:
    """Neighbours of a node by one edge type and direction, of one node type.

    ``shown`` holds at most the cap of neighbour ids (sorted), ``total`` how many there are.
    A 2-hop group has ``via = (edge_type, direction, middle node id)`` of its first hop.
    """

    edge_type: str
    direction: Direction
    neighbour_type: str
    shown: list[int]
    total: int
    via: tuple[str, Direction, int] | None = None


def _window(csr: CSR, ids: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(position, neighbour)`` pairs of at most ``limit`` neighbours per row, and the degrees."""
    deg = csr.degree(ids)
    lens = np.minimum(deg, limit)
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), deg
    shift = np.repeat(np.asarray(csr.indptr[ids], dtype=np.int64) - (np.cumsum(lens) - lens), lens)
    nbrs = np.asarray(csr.indices[np.arange(total, dtype=np.int64) + shift], dtype=np.int64)
    return np.repeat(np.arange(len(ids)), lens), nbrs, deg


def _gather_groups(
    skb: SKB, ids: np.ndarray, cap: int, keep: np.ndarray | None = None
) -> list[list[RelationGroup]]:
    """1-hop groups per position of ``ids``; ``keep`` (a mask over nodes) filters neighbours before capping.

    At most ``SCAN_LIMIT`` neighbours per row and edge type are read, so a hub costs O(limit);
    a hub's count is still exact when its window holds one neighbour type (typed schemas).
    """
    out: list[list[RelationGroup]] = [[] for _ in range(len(ids))]
    scan_limit = SCAN_LIMIT
    for edge_type in skb.graph.edge_types:
        for direction in ("out", "in"):
            pos, nbrs, deg = _window(skb.graph.adjacency(edge_type, direction), ids, scan_limit)
            if keep is not None:
                kept = keep[nbrs]
                pos, nbrs = pos[kept], nbrs[kept]
            if not len(nbrs):
                continue
            ntype = np.asarray(skb.node_type[nbrs], dtype=np.int64)
            order = np.lexsort((nbrs, ntype, pos))
            nbrs, ntype, pos = nbrs[order], ntype[order], pos[order]
            new_group = np.ones(len(nbrs), dtype=bool)
            new_group[1:] = (pos[1:] != pos[:-1]) | (ntype[1:] != ntype[:-1])
            starts = np.flatnonzero(new_group)
            ends = np.append(starts[1:], len(nbrs))
            groups_per_row = np.bincount(pos[starts], minlength=len(ids))
            for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
                p = pos[s]
                total = e - s
                if keep is None and deg[p] > scan_limit and groups_per_row[p] == 1:
                    total = int(deg[p])
                shown = nbrs[s : min(e, s + cap)].tolist()
                out[p].append(
                    RelationGroup(edge_type, direction, skb.node_type_names[ntype[s]], shown, total)
                )
    return out


def _is_neighbour(skb: SKB, group: RelationGroup, row: int, node: int) -> bool:
    """Whether ``node`` is among ``row``'s neighbours of the group (CSR rows are sorted)."""
    csr = skb.graph.adjacency(group.edge_type, group.direction)
    lo, hi = int(csr.indptr[row]), int(csr.indptr[row + 1])
    at = lo + int(np.searchsorted(csr.indices[lo:hi], node))
    return at < hi and int(csr.indices[at]) == node and skb.type_of(node) == group.neighbour_type


def gather_relations(
    skb: SKB,
    ids: Sequence[int] | np.ndarray,
    *,
    two_hop: bool = True,
    keep: np.ndarray | None = None,
    max_neighbours: int = MAX_NEIGHBOURS,
    max_two_hop: int = MAX_TWO_HOP_NEIGHBOURS,
) -> list[list[RelationGroup]]:
    """1-hop groups then 2-hop groups (through edge types with exactly one neighbour), per node.

    With ``keep`` (a boolean mask over all nodes) only relations incident to a kept node remain:
    1-hop neighbours in ``keep``, and 2-hop paths whose middle or end is in ``keep``. Paths back
    to the node itself are left out. Each middle node is expanded once per call, however many
    nodes of the batch share it (hubs).
    """
    ids = np.asarray(ids, dtype=np.int64)
    groups = _gather_groups(skb, ids, max_neighbours, keep)
    if not two_hop or not len(ids):
        return groups
    origin, middles, vias = [], [], []
    for edge_type in skb.graph.edge_types:
        for direction in ("out", "in"):
            csr = skb.graph.adjacency(edge_type, direction)
            single = np.flatnonzero(csr.degree(ids) == 1)
            if len(single):
                origin.append(single)
                middles.append(np.asarray(csr.indices[csr.indptr[ids[single]]], dtype=np.int64))
                vias.extend((edge_type, direction) for _ in range(len(single)))
    if not middles:
        return groups
    origin_pos, middle = np.concatenate(origin), np.concatenate(middles)
    unique = sorted_unique(middle)
    inverse = np.searchsorted(unique, middle)
    second: list[list[RelationGroup]] = [[] for _ in range(len(unique))]
    # a kept middle keeps its whole second hop; otherwise only kept ends remain
    parts = (
        [(np.arange(len(unique)), None)]
        if keep is None
        else [(np.flatnonzero(keep[unique]), None), (np.flatnonzero(~keep[unique]), keep)]
    )
    for part, part_keep in parts:
        if len(part):
            for k, hop in zip(
                part.tolist(), _gather_groups(skb, unique[part], max_two_hop + 1, part_keep), strict=True
            ):
                second[k] = hop
    for k, (edge_type, direction) in enumerate(vias):
        node, mid = int(ids[origin_pos[k]]), int(middle[k])
        for g in second[inverse[k]]:
            shown, total = g.shown, g.total
            if node in shown:
                shown, total = [x for x in shown if x != node], total - 1
            elif (
                total > len(shown)
                and (keep is None or keep[mid] or keep[node])
                and _is_neighbour(skb, g, mid, node)
            ):
                total -= 1
            if total > 0:
                via = (edge_type, direction, mid)
                groups[origin_pos[k]].append(
                    RelationGroup(g.edge_type, g.direction, g.neighbour_type, shown[:max_two_hop], total, via)
                )
    return groups


def _label(skb: SKB, node_id: int) -> str:
    return skb.name(node_id) or f"node {node_id}"


def _arrow(edge_type: str, direction: Direction) -> str:
    return f"-[{edge_type}]->" if direction == "out" else f"<-[{edge_type}]-"


def format_group(skb: SKB, group: RelationGroup) -> str:
    """One line, e.g. ``-[cites]-> paper: A; B (+3 more)``; 2-hop lines name their middle node."""
    names = "; ".join(_label(skb, i) for i in group.shown)
    more = f" (+{group.total - len(group.shown)} more)" if group.total > len(group.shown) else ""
    head = f"{_arrow(group.edge_type, group.direction)} {group.neighbour_type}: "
    if group.via is not None:
        via_type, via_dir, middle = group.via
        head = f"{_arrow(via_type, via_dir)} {skb.type_of(middle)} {_label(skb, middle)} {head}"
    return f"{head}{names}{more}"


def format_relations(skb: SKB, groups: list[RelationGroup]) -> list[str]:
    """Relation lines, 1-hop before 2-hop (so a budget cut drops 2-hop lines first)."""
    ordered = [g for g in groups if g.via is None] + [g for g in groups if g.via is not None]
    return [f"  {format_group(skb, g)}" for g in ordered]


def _fit_lines(lines: list[str], max_chars: int) -> list[str]:
    kept: list[str] = []
    used = 0
    for line in lines:
        if used + len(line) + 1 > max_chars:
            room = max_chars - used - 1
            if not kept and room > 16:  # keep at least a cut first line, and nothing after it
                kept.append(truncate_to_tokens(line, room // CHARS_PER_TOKEN))
                break
            continue  # a shorter line further down may still fit
        kept.append(line)
        used += len(line) + 1
    return kept


def _combine(head: str, rel_lines: list[str], body: str, budget_tokens: int | None) -> str:
    """Fit relation lines and the body into the budget, relations first in priority."""
    rel_block = ["- relations:", *rel_lines] if rel_lines else []
    if budget_tokens is not None:
        avail = budget_tokens * CHARS_PER_TOKEN - len(head) - 1
        rel_quota = max(avail - len(body) - 1, int(avail * REL_SHARE))
        fitted = _fit_lines(rel_lines, rel_quota - len("- relations:") - 1)
        rel_block = ["- relations:", *fitted] if fitted else []
        used = sum(len(x) + 1 for x in rel_block)
        body = truncate_to_tokens(body, max(0, avail - used - 1) // CHARS_PER_TOKEN)
    return "\n".join(p for p in [head, "\n".join(rel_block), body] if p)


def _attribute_lines(skb: SKB, node_id: int) -> list[str]:
    return [f"- {k}: {v}" for k, v in skb.attributes(node_id).items()]


CASE_CHANGE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")  # where a camel-case label starts a new word


def readable_label(label: str) -> str:
    """A label as words (``body_part``, ``BodyPart`` -> ``body part``), as a question would write it."""
    return re.sub(r"[_\s]+", " ", CASE_CHANGE.sub(" ", label)).strip().lower()


def text_document(skb: SKB, node_id: int) -> str:
    """The ``"text"`` variant without a budget (see the module docstring)."""
    doc, name, label = skb.doc(node_id), skb.name(node_id), skb.type_of(node_id)
    if not doc.strip():
        return "\n".join([f"- name: {name}", f"- type: {label}", *_attribute_lines(skb, node_id)])
    return f"{readable_label(label)}: {name}\n{doc}" if name else f"{readable_label(label)}\n{doc}"


def render_documents(
    skb: SKB,
    ids: Sequence[int] | np.ndarray,
    variant: DocVariant = "text",
    budget_tokens: int | None = None,
) -> list[str]:
    """Documents of many nodes (for embedding), gathering relations in vectorised batches."""
    ids = np.asarray(ids, dtype=np.int64)
    if variant == "text":
        return [
            text_document(skb, i)
            if budget_tokens is None
            else truncate_to_tokens(text_document(skb, i), budget_tokens)
            for i in ids.tolist()
        ]
    if variant != "text+rel":
        raise ValueError(f"unknown document variant {variant!r}; use 'text' or 'text+rel'")
    out: list[str] = []
    for start in range(0, len(ids), BATCH):
        batch = ids[start : start + BATCH]
        for i, groups in zip(batch.tolist(), gather_relations(skb, batch), strict=True):
            head = f"{_label(skb, i)} ({skb.type_of(i)})"
            doc = skb.doc(i)
            body = doc if doc.strip() else "\n".join(_attribute_lines(skb, i))
            out.append(_combine(head, format_relations(skb, groups), body, budget_tokens))
    return out


def render_document(
    skb: SKB, node_id: int, variant: DocVariant = "text", budget_tokens: int | None = None
) -> str:
    """One node's document in a variant (``"text"`` or ``"text+rel"``) within ``budget_tokens``."""
    return render_documents(skb, [node_id], variant, budget_tokens)[0]


def describe_node(
    skb: SKB,
    node_id: int,
    relations: RelationMode = "full",
    retrieved: set[int] | Sequence[int] | np.ndarray | None = None,
    budget_tokens: int | None = None,
) -> str:
    """A node description for reranker prompts: attributes, relations, then the document.

    Args:
        relations: ``"full"`` (1-hop and the selected 2-hop relations), ``"retrieved"`` (only
            relations incident to a node in ``retrieved``: the paper's first fallback when the
            context overflows) or ``"none"`` (the second fallback).
        retrieved: ids of the retrieved non-target candidates, for ``"retrieved"``.
        budget_tokens: the document is cut before the relations to fit (module docstring).
    """
    doc = skb.doc(node_id)
    attrs = [f"  - {k}: {v}" for k, v in skb.attributes(node_id).items() if v not in doc]
    attr_block = ["- attributes:", *attrs] if attrs else []
    label = f"{_label(skb, node_id)} ({skb.type_of(node_id)})"
    # Under a budget the relations come before the attributes: a multi-hop question asks about them,
    # and a short description that spends its budget on attributes cannot show the answer's edges.
    head = "\n".join([label, *attr_block]) if budget_tokens is None else label
    rel_lines: list[str] = []
    if relations != "none":
        keep = None
        if relations == "retrieved":
            keep = np.zeros(skb.num_nodes, dtype=bool)
            keep[np.asarray(list(retrieved or ()), dtype=np.int64)] = True
        rel_lines = format_relations(skb, gather_relations(skb, [node_id], keep=keep)[0])
    body = f"- document:\n{doc}" if doc.strip() else ""
    if budget_tokens is not None:
        body = "\n".join([*attr_block, *([body] if body else [])])
    return _combine(head, rel_lines, body, budget_tokens)


def path_text(skb: SKB, path: list[tuple[str, int, str, int]], name_chars: int = 60) -> str:
    """A grounding support path (``program.steps.grounding.support_paths``) as one chain of names and
    relationship types: each hop starts where the last ended."""
    if not path:
        return ""
    parts = [skb.name(path[0][1])[:name_chars]]
    for _, _, rel, node in path:
        parts.append(f"-[{rel}]- {skb.name(node)[:name_chars]}")
    return " ".join(parts)
