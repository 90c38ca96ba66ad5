"""The WordNet benchmark's graph: which noun synsets become nodes, their labels, documents and edges.

Selection rule (stated in the schema and in docs/benchmarks.md): the *core* is every noun synset of
the lexicographer files listed in ``Variant.core_files`` plus, for ``named_people``, every
``noun.person`` synset that is an instance (a named person, ``@i``); the graph is the core and
every noun synset a core synset points to with a kept pointer (one hop). Edges are the kept
pointers between any two selected synsets, each stored once in the direction its name reads.
Node ids follow (label order, synset offset), so a build is the same on every machine.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from autofocus.bench.wordnet_source import Synset

# lexicographer file -> node label; the other noun files are abstract concepts, and noun.Tops (the top
# synsets of every file) takes the label most of its direct hyponyms have.
LABELS: dict[str, str] = {
    "noun.animal": "animal",
    "noun.plant": "plant",
    "noun.food": "food",
    "noun.body": "body_part",
    "noun.object": "natural_object",
    "noun.substance": "substance",
    "noun.location": "location",
    "noun.person": "person",
    "noun.group": "group",
    "noun.artifact": "artifact",
    "noun.state": "condition",
}
OTHER_LABEL = "abstract_concept"
LABEL_ORDER = (*dict.fromkeys(LABELS.values()), OTHER_LABEL)

LABEL_DESCRIPTIONS = {
    "animal": "an animal, or a group of animals in the biological classification (a genus, family, order, ...)",
    "plant": "a plant, fungus or alga, or a genus or family of them",
    "food": "a food, dish, drink or nutrient",
    "body_part": "a part of a human or animal body (organs, bones, tissues, body regions)",
    "natural_object": "a natural object that is not alive: a celestial body, a landform, a body of water, a stone",
    "substance": "a substance or material: chemical elements and compounds, minerals, fluids, fabrics' fibres",
    "location": "a place: a country, city, region, geographic area or a point in space",
    "person": "a person: a named, real person (with life dates) or a kind of person (an occupation, a role)",
    "group": "a group of people or things: an organisation, a people, a taxonomic group of persons",
    "artifact": "a man-made object",
    "condition": "a state or condition: a disease, a physical or social state",
    OTHER_LABEL: "an abstract notion: an act, attribute, field of study, event, feeling, quantity, time, ...",
}


@dataclass(frozen=True)
class Relation:
    """A kept pointer: its edge type, and whether the edge runs from the pointing synset (``forward``)."""

    edge_type: str
    forward: bool
    symmetric: bool = False


# wndb(5) pointer symbols of nouns. Each relation is stored once: its inverse pointer is read as the
# same edge walked backwards, so a relation stated on one side only is kept too.
POINTERS: dict[str, Relation] = {
    "@": Relation("is_a", True),
    "~": Relation("is_a", False),
    "@i": Relation("instance_of", True),
    "~i": Relation("instance_of", False),
    "#m": Relation("member_of", True),
    "%m": Relation("member_of", False),
    "#p": Relation("part_of", True),
    "%p": Relation("part_of", False),
    "%s": Relation("made_of", True),
    "#s": Relation("made_of", False),
    ";c": Relation("has_topic", True),
    "-c": Relation("has_topic", False),
    ";r": Relation("in_region", True),
    "-r": Relation("in_region", False),
    "+": Relation("related_form", True, symmetric=True),
    "!": Relation("antonym_of", True, symmetric=True),
}

EDGE_DESCRIPTIONS = {
    "is_a": "(x)-[:is_a]->(y): x is a kind of y (WordNet hypernymy), e.g. dog is_a canine",
    "instance_of": "(x)-[:instance_of]->(y): x is a named individual of the class y, e.g. Paris instance_of "
    "national capital, Einstein instance_of physicist",
    "member_of": "(x)-[:member_of]->(y): x is a member of the group y, e.g. a species of a genus, a country of an "
    "alliance",
    "part_of": "(x)-[:part_of]->(y): x is a part of y, e.g. a city part_of its country, a bone part_of a limb",
    "made_of": "(x)-[:made_of]->(y): y is a substance x is made of, e.g. ice made_of water",
    "has_topic": "(x)-[:has_topic]->(y): x belongs to the field or topic y, e.g. quarterback has_topic football",
    "in_region": "(x)-[:in_region]->(y): x is particular to the region y, e.g. sushi in_region Japan",
    "related_form": "(x)-[:related_form]-(y): the words of x and y derive from one another (biologist, "
    "biology); stored once, read in both directions",
    "antonym_of": "(x)-[:antonym_of]-(y): x and y are opposites; stored once, read in both directions",
}


@dataclass(frozen=True)
class Variant:
    """Which synsets make the core: whole lexicographer files, and named people if ``named_people``."""

    name: str
    core_files: tuple[str, ...]
    named_people: bool


FULL = Variant(
    "full",
    ("noun.animal", "noun.body", "noun.food", "noun.object", "noun.substance", "noun.location"),
    named_people=True,
)
SMALL = Variant("small", ("noun.body", "noun.object"), named_people=False)


@dataclass
class WordNetGraph:
    """Nodes (SKB rows, id = position), edges ``(src, type, dst)`` and node ids by synset key."""

    nodes: list[dict[str, Any]]
    edges: list[tuple[int, str, int]]
    ids: dict[str, int]
    core: int = 0  # how many nodes are core synsets (the rest are their one-hop neighbours)


def select(synsets: Sequence[Synset], variant: Variant) -> list[Synset]:
    """The core synsets of ``variant`` and the noun synsets they point to with a kept pointer."""
    by_key = {s.key: s for s in synsets}
    core = [s for s in synsets if is_core(s, variant)]
    chosen = {s.key for s in core}
    for s in core:
        chosen.update(p.target for p in s.pointers if p.symbol in POINTERS and p.target in by_key)
    return [by_key[k] for k in chosen]


def is_core(synset: Synset, variant: Variant) -> bool:
    if synset.lexname in variant.core_files:
        return True
    return variant.named_people and synset.lexname == "noun.person" and any(p.symbol == "@i" for p in synset.pointers)


def label_of(synset: Synset, by_key: dict[str, Synset]) -> str:
    """The node label from the lexicographer file (noun.Tops: the label most of its hyponyms have)."""
    if synset.lexname != "noun.Tops":
        return LABELS.get(synset.lexname, OTHER_LABEL)
    below = Counter(
        LABELS.get(by_key[p.target].lexname, OTHER_LABEL)
        for p in synset.pointers
        if p.symbol in ("~", "~i") and p.target in by_key and by_key[p.target].lexname != "noun.Tops"
    )
    return min(below.items(), key=lambda kv: (-kv[1], LABEL_ORDER.index(kv[0])))[0] if below else OTHER_LABEL


def display(lemma: str) -> str:
    return lemma.replace("_", " ")


def document(synset: Synset) -> str:
    """The node's text: definition, other names, example sentences (the name itself is the node's name)."""
    parts = [synset.definition.rstrip(".") + "."] if synset.definition else []
    if len(synset.lemmas) > 1:
        parts.append("Also called: " + ", ".join(display(w) for w in synset.lemmas[1:]) + ".")
    if synset.examples:
        parts.append("Examples: " + "; ".join(f'"{e}"' for e in synset.examples) + ".")
    return " ".join(parts)


def build_graph(all_synsets: Iterable[Synset], variant: Variant) -> WordNetGraph:
    """The benchmark graph of ``variant`` from WordNet's noun synsets."""
    nouns = [s for s in all_synsets if s.key.endswith("-n")]
    by_key = {s.key: s for s in nouns}
    chosen = select(nouns, variant)
    labelled = sorted(((label_of(s, by_key), s) for s in chosen),
                      key=lambda ls: (LABEL_ORDER.index(ls[0]), ls[1].key))  # fmt: skip
    ids = {s.key: i for i, (_, s) in enumerate(labelled)}
    nodes = [
        {
            "id": i,
            "type": label,
            "name": display(s.lemmas[0]),
            "synonyms": [display(w) for w in s.lemmas[1:]],
            "wordnet_id": s.key,
            "lexical_file": s.lexname,
            "text": document(s),
        }
        for i, (label, s) in enumerate(labelled)
    ]
    edges: set[tuple[int, str, int]] = set()
    for _, s in labelled:
        for p in s.pointers:
            rel = POINTERS.get(p.symbol)
            if rel is None or p.target not in ids:
                continue
            a, b = (ids[s.key], ids[p.target]) if rel.forward else (ids[p.target], ids[s.key])
            if a == b:
                continue
            if rel.symmetric:
                a, b = min(a, b), max(a, b)
            edges.add((a, rel.edge_type, b))
    core = sum(is_core(s, variant) for _, s in labelled)
    edge_order = list(EDGE_DESCRIPTIONS)
    return WordNetGraph(nodes, sorted(edges, key=lambda e: (edge_order.index(e[1]), e[0], e[2])), ids, core)
