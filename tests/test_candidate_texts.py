"""The candidate text a trained reranker reads (``skb.candidate_texts``): the document kept, informative
relationships and attributes chosen from what the knowledge base itself shows."""

from __future__ import annotations

import numpy as np
import pytest

from autofocus.skb.candidate_texts import CANDIDATE_TOKENS, DOC_TOKENS, candidate_text, candidate_texts
from autofocus.skb.documents import CHARS_PER_TOKEN
from autofocus.skb.model import Column
from autofocus.skb.text import TextArray
from tests.skb_factory import make_skb

WORDS = ["binds", "membrane", "transport", "channel", "kinase", "signalling", "nucleus", "repair", "enzyme", "cell", "growth", "protein", "receptor", "immune", "response", "folding"]
GENES, TERMS, CODED = 60, 40, 10  # terms 0..CODED-1 are named by codes, the others by words


@pytest.fixture(scope="module")
def rich_skb():
    """Genes with many annotations each (gene 0: all 40 terms), long documents, and columns of every sort
    (``status``: most nodes hold one value)."""
    rng = np.random.default_rng(0)
    n = GENES + TERMS
    names = [f"GENE{i}" for i in range(GENES)]
    names += [f"GO:{1000 + t:07d}" if t < CODED else f"{WORDS[t % len(WORDS)]} {WORDS[(3 * t) % len(WORDS)]} {t}"
              for t in range(TERMS)]  # fmt: skip
    docs = [" ".join(rng.choice(WORDS, size=120 if i == 0 else 30)) for i in range(GENES)]
    docs += [f"a term about {names[GENES + t]}" for t in range(TERMS)]
    edges = [(0, "annotated_with", GENES + t) for t in range(TERMS)]
    edges += [(g, "annotated_with", GENES + int(t)) for g in range(1, GENES) for t in rng.choice(TERMS, 3, replace=False)]
    edges += [(g, "annotated_with", GENES + TERMS - 1) for g in range(1, GENES)]  # the last term: a hub
    skb = make_skb(["gene", "term"], [0] * GENES + [1] * TERMS, edges, {"annotated_with": ("gene", "term")},
                   names=names, docs=docs, candidate_types=["gene"],
                   numbers={"is_reviewed": [float(i % 2) for i in range(n)],  # a flag
                            "length": [float(10 ** (1 + i % 5) + i) for i in range(n)],  # a size
                            "year": [float(1990 + i % 20) for i in range(n)]})  # fmt: skip  # a point on a scale
    texts = {"accession": [f"ENSG{i:011d}" for i in range(n)],  # an identifier
             "location": [("nucleolus", "plastid", "vacuole")[i % 3] for i in range(n)],  # a category
             "tissue": [("kinase", "enzyme", "receptor", "channel")[i % 4] for i in range(n)],  # one, in words
             "status": ["protein coding" if i % 10 else ("pseudo gene", "rna gene")[i % 20 // 10] for i in range(n)]}
    for key, values in texts.items():
        skb.columns[key] = Column("string", TextArray.from_strings(values), np.ones(n, dtype=bool))
    return skb


def test_the_document_keeps_its_share_on_a_node_with_many_relations(rich_skb):
    text = candidate_text(rich_skb, 0)
    assert len(text) <= CANDIDATE_TOKENS * CHARS_PER_TOKEN
    doc = rich_skb.doc(0)
    kept = text.split("\n")[1].rstrip("…")
    assert doc.startswith(kept) and len(kept) >= 40 * CHARS_PER_TOKEN  # >= 40 of the 100 tokens
    assert text.startswith("GENE0 (gene)\n")


def test_relationships_show_wordy_specific_neighbours_and_count_the_others(rich_skb):
    line = next(x for x in candidate_text(rich_skb, 0).split("\n") if x.startswith("annotated with: "))
    shown = line.removeprefix("annotated with: ").split(" (+")[0].split("; ")
    assert line.endswith(f"(+{TERMS - len(shown)})") and len(shown) == 2
    assert not any(s.startswith("GO:") for s in shown)  # codes say nothing
    assert rich_skb.name(GENES + TERMS - 1) not in shown  # the hub is the least specific
    # a gene whose terms are all named by codes still shows its relationship
    coded = [(0, "annotated_with", GENES + t) for t in range(CODED)]
    skb = make_skb(["gene", "term"], [0] + [1] * CODED, [(0, e, t - GENES + 1) for _, e, t in coded],
                   {"annotated_with": ("gene", "term")}, names=["G", *(f"GO:{t:07d}" for t in range(CODED))])
    assert "annotated with: GO:0000000; GO:0000001 (+8)" in candidate_text(skb, 0)


def test_attributes_are_the_ones_that_say_something(rich_skb):
    text = candidate_text(rich_skb, 4, budget_tokens=400)  # room for every line
    assert "location: plastid" in text and "year: 1994" in text
    for left_out in ("accession", "ENSG", "is reviewed", "length", "status"):
        assert left_out not in text
    assert "status: rna gene" in candidate_text(rich_skb, 10, budget_tokens=400)  # a rare value says something


def test_a_value_already_in_the_name_or_document_is_not_repeated(rich_skb):
    told = [(rich_skb.columns["tissue"].display(i) in rich_skb.doc(i).split(),
             f"tissue: {rich_skb.columns['tissue'].display(i)}" in candidate_text(rich_skb, i, budget_tokens=400))
            for i in range(GENES)]  # fmt: skip
    assert {in_doc for in_doc, _ in told} == {True, False}  # both cases met
    assert all(in_doc != shown for in_doc, shown in told)


def test_a_batch_renders_each_node_as_alone(rich_skb):
    ids = [5, 0, GENES + 2, 5]
    assert candidate_texts(rich_skb, ids) == [candidate_text(rich_skb, i) for i in ids]
    assert candidate_texts(rich_skb, []) == []


def test_a_short_document_leaves_its_room_to_relationships(rich_skb):
    text = candidate_text(rich_skb, GENES + TERMS - 1)  # the hub term: a short document, many genes
    lines = text.split("\n")
    assert lines[1] == rich_skb.doc(GENES + TERMS - 1)
    assert any(x.startswith("<- annotated with: ") for x in lines)
    assert len(rich_skb.doc(GENES + TERMS - 1)) < DOC_TOKENS * CHARS_PER_TOKEN
