"""Node documents (text, text+rel), the 2-hop rule, token budgets and reranker descriptions."""

from __future__ import annotations

import numpy as np
import pytest

from autofocus.skb import documents
from autofocus.skb.documents import (
    describe_node,
    estimate_tokens,
    gather_relations,
    render_document,
    render_documents,
    truncate_to_tokens,
)
from autofocus.skb.graph import TypedGraph
from autofocus.skb.model import SKB
from autofocus.skb.schema import EdgeTypeInfo, NodeTypeInfo, Schema
from autofocus.skb.text import TextArray


def test_text_variant(tiny_skb):
    assert render_document(tiny_skb, 0) == (  # the node's type and name first, then its document
        "paper: Graph Retrieval at Scale\nWe study retrieval over large knowledge graphs with typed edges."
    )
    assert render_document(tiny_skb, 3) == (  # empty document: name, type and attributes
        "- name: Knowledge Base Question Answering Survey\n- type: paper\n- year: 2018\n- published: 2018-01-20"
    )
    assert (
        render_document(tiny_skb, 4, "text")
        == "- name: Ada Lovelace\n- type: author\n- h_index: 42\n- born: 1815-12-10"
    )


def test_a_label_reads_as_words_in_the_text_variant():
    assert [documents.readable_label(x) for x in ["body_part", "BodyPart", "gene/protein", "paper"]] == [
        "body part", "body part", "gene/protein", "paper"]


def test_text_rel_one_hop_and_two_hop_rule(tiny_skb):
    doc = render_document(tiny_skb, 0, "text+rel")
    lines = doc.splitlines()
    assert lines[0] == "Graph Retrieval at Scale (paper)"
    assert lines[1] == "- relations:"
    assert "  <-[author_writes_paper]- author: Ada Lovelace" in lines
    assert (
        "  <-[paper_cites_paper]- paper: Cypher Queries from Text; Dense Passage Ranking; Multi-hop Reasoning over Graphs"
        in lines
    )
    assert "  -[paper_published_in_venue]-> venue: NeurIPS" in lines
    # exactly one author -> 2-hop through her (the node itself is not listed again)
    assert (
        "  <-[author_writes_paper]- author Ada Lovelace -[author_writes_paper]-> paper: "
        "Cypher Queries from Text; Multi-hop Reasoning over Graphs"
    ) in lines
    # three citing papers -> no 2-hop through paper_cites_paper (in)
    assert not any(line.startswith("  <-[paper_cites_paper]- paper ") for line in lines)
    assert lines[-1] == "We study retrieval over large knowledge graphs with typed edges."

    doc1 = render_document(tiny_skb, 1, "text+rel")
    assert "  <-[author_writes_paper]- author: Ada Lovelace; Alan Turing" in doc1
    assert "<-[author_writes_paper]- author Ada" not in doc1  # two authors: not n-1, no 2-hop


def test_parallel_edges_in_relations(tiny_skb):
    doc = render_document(tiny_skb, 11, "text+rel")
    assert "  -[paper_cites_paper]-> paper: Graph Retrieval at Scale; Cypher Queries from Text" in doc
    assert "  -[paper_extends_paper]-> paper: Cypher Queries from Text" in doc


def test_neighbour_cap():
    groups = gather_relations(_star(30), [0], max_neighbours=4)[0]
    (group,) = [g for g in groups if g.via is None]
    assert group.total == 30 and group.shown == [1, 2, 3, 4]
    doc = render_document(_star(30), 0, "text+rel")
    assert f"(+{30 - documents.MAX_NEIGHBOURS} more)" in doc


def test_hubs_are_read_through_a_window(monkeypatch):
    monkeypatch.setattr(documents, "SCAN_LIMIT", 3)
    star = _star(30)
    hub_line = render_document(star, 0, "text+rel").splitlines()[2]
    assert hub_line == "  -[r]-> leaf: leaf1; leaf2; leaf3 (+27 more)"  # exact count from the degree
    doc = render_document(star, 10, "text+rel")  # leaf 10 -> exactly one hub -> 2-hop through it
    assert "  <-[r]- hub hub -[r]-> leaf: leaf1; leaf2; leaf3 (+26 more)" in doc.splitlines()
    doc = render_document(star, 2, "text+rel")  # the node itself is never listed
    assert "  <-[r]- hub hub -[r]-> leaf: leaf1; leaf3 (+27 more)" in doc.splitlines()


@pytest.mark.parametrize("budget", [20, 40, 60, 100, 400])
def test_budget_is_respected_and_relations_come_first(tiny_skb, budget):
    for node in range(tiny_skb.num_nodes):
        for variant in ("text", "text+rel"):
            doc = render_document(tiny_skb, node, variant, budget)
            assert estimate_tokens(doc) <= budget, (node, variant, budget)
    full = render_document(tiny_skb, 11, "text+rel")
    cut = render_document(tiny_skb, 11, "text+rel", 100)
    assert len(cut) < len(full)
    assert "  <-[author_writes_paper]- author: Ada Lovelace; Grace Hopper" in cut  # 1-hop kept
    assert "-[paper_extends_paper]-> paper Cypher" not in cut  # 2-hop lines go first


def test_truncate_to_tokens():
    assert truncate_to_tokens("short", 10) == "short"
    cut = truncate_to_tokens("word " * 100, 10)
    assert cut.endswith("…") and len(cut) <= 40
    assert estimate_tokens("abcd" * 10) == 10 and estimate_tokens("abcde") == 2


def test_batch_rendering_matches_single(tiny_skb, monkeypatch):
    monkeypatch.setattr(documents, "BATCH", 5)
    ids = np.arange(tiny_skb.num_nodes)
    batch = render_documents(tiny_skb, ids, "text+rel", 200)
    assert batch == [render_document(tiny_skb, int(i), "text+rel", 200) for i in ids]
    with pytest.raises(ValueError, match="unknown document variant"):
        render_documents(tiny_skb, ids, "html")  # type: ignore[arg-type]


def test_describe_node_modes(tiny_skb):
    full = describe_node(tiny_skb, 11)
    assert full.startswith(
        "Multi-hop Reasoning over Graphs (paper)\n- attributes:\n  - year: 2022\n  - published: 2022-07-01"
    )
    assert (
        "-[paper_extends_paper]-> paper Cypher Queries from Text <-[author_writes_paper]- author: Ada Lovelace; Alan Turing"
        in full
    )
    assert full.endswith("- document:\nAnswering questions that need several hops over a knowledge graph.")

    retrieved = describe_node(tiny_skb, 11, "retrieved", {4, 9})
    rel = retrieved[retrieved.index("- relations:") : retrieved.index("- document:")].splitlines()
    assert rel == [
        "- relations:",
        "  <-[author_writes_paper]- author: Ada Lovelace",
        "  -[paper_has_topic_field]-> field: Information Retrieval",
        "  -[paper_extends_paper]-> paper Cypher Queries from Text <-[author_writes_paper]- author: Ada Lovelace",
    ]
    # a retrieved middle node keeps its whole second hop
    via_middle = describe_node(tiny_skb, 11, "retrieved", {1})
    assert (
        "-[paper_extends_paper]-> paper Cypher Queries from Text -[paper_published_in_venue]-> venue: ACL"
        in via_middle
    )

    none = describe_node(tiny_skb, 11, "none")
    assert "- relations:" not in none and "- attributes:" in none and "- document:" in none
    assert estimate_tokens(describe_node(tiny_skb, 11, "full", budget_tokens=80)) <= 80


def test_describe_node_under_a_budget_puts_relations_before_attributes(tiny_skb):
    # the step 8 yes/no description: a short budget must still show the edges a question asks about
    cut = describe_node(tiny_skb, 11, "full", budget_tokens=48)
    lines = cut.splitlines()
    assert lines[0] == "Multi-hop Reasoning over Graphs (paper)" and lines[1] == "- relations:"
    assert "  <-[author_writes_paper]- author: Ada Lovelace; Grace Hopper" in lines
    assert cut.index("- relations:") < cut.index("- attributes:")
    assert estimate_tokens(cut) <= 48
    # without a budget the order is unchanged: attributes right after the name
    assert describe_node(tiny_skb, 11).splitlines()[1] == "- attributes:"


def test_describe_node_skips_attributes_already_in_document(tiny_skb):
    # paper 3 has no document; its attributes are shown once
    desc = describe_node(tiny_skb, 3, "none")
    assert (
        desc
        == "Knowledge Base Question Answering Survey (paper)\n- attributes:\n  - year: 2018\n  - published: 2018-01-20"
    )


def _random_skb(seed: int) -> SKB:
    rng = np.random.default_rng(seed)
    n, m = 30, 90
    node_type = rng.integers(0, 2, n).astype(np.int16)
    src, dst, et = rng.integers(0, n, m), rng.integers(0, n, m), rng.integers(0, 2, m)
    schema = Schema(name="r", node_types={"u": NodeTypeInfo(), "v": NodeTypeInfo()},
                    edge_types={"p": EdgeTypeInfo(), "q": EdgeTypeInfo()})  # fmt: skip
    return SKB(schema, ["u", "v"], node_type, TextArray.from_strings([f"n{i}" for i in range(n)]),
               TextArray.from_strings([""] * n), {}, TypedGraph.from_edges(n, src, dst, et, ["p", "q"]))  # fmt: skip


def _star(k: int) -> SKB:
    n = k + 1
    schema = Schema(
        name="s", node_types={"hub": NodeTypeInfo(), "leaf": NodeTypeInfo()}, edge_types={"r": EdgeTypeInfo()}
    )
    return SKB(schema, ["hub", "leaf"], np.array([0] + [1] * k, dtype=np.int16),
               TextArray.from_strings(["hub"] + [f"leaf{i}" for i in range(1, n)]), TextArray.from_strings([""] * n),
               {}, TypedGraph.from_edges(n, np.zeros(k, np.int64), np.arange(1, n), np.zeros(k, np.int64), ["r"]))  # fmt: skip


def _naive_pairs(skb: SKB, node: int) -> set[tuple]:
    """Every (edge type, direction, neighbour) and 2-hop (via..., edge type, direction, end), from edge lists."""
    edges = []
    for e in skb.graph.edge_types:
        csr = skb.graph.forward[e]
        for s in range(skb.num_nodes):
            edges += [(s, e, int(d)) for d in csr.indices[csr.indptr[s] : csr.indptr[s + 1]]]

    def hop(x):
        return [(e, "out", d) for s, e, d in edges if s == x] + [(e, "in", s) for s, e, d in edges if d == x]

    out = {(e, d, nb) for e, d, nb in hop(node)}
    for e in skb.graph.edge_types:
        for d in ("out", "in"):
            mids = [nb for ee, dd, nb in hop(node) if (ee, dd) == (e, d)]
            if len(mids) == 1:
                out |= {(e, d, mids[0], e2, d2, end) for e2, d2, end in hop(mids[0]) if end != node}
    return out


@pytest.mark.parametrize("seed", range(5))
def test_gather_relations_matches_naive(seed):
    skb = _random_skb(seed)
    ids = np.arange(skb.num_nodes)
    for node, groups in zip(
        ids.tolist(), gather_relations(skb, ids, max_neighbours=10**6, max_two_hop=10**6), strict=True
    ):
        got = set()
        for g in groups:
            assert g.total == len(g.shown) and g.shown == sorted(g.shown)
            assert all(skb.type_of(x) == g.neighbour_type for x in g.shown)
            for x in g.shown:
                got.add(
                    (g.edge_type, g.direction, x) if g.via is None else (*g.via, g.edge_type, g.direction, x)
                )
        assert got == _naive_pairs(skb, node), node
