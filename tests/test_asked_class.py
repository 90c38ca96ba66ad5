"""Step 3b links the target to the class node a question asks about, on a taxonomy-shaped schema where
the asked kind of thing is a node ("composer"), not a label (``person``)."""

from __future__ import annotations

import pytest

from autofocus.config import REPAIR_RULES, AutofocusConfig
from autofocus.cypher import parse_cypher
from autofocus.language import language
from autofocus.program.steps.grounded_strand import StrandSettings, ground_strand
from autofocus.program.steps.reading import QuestionReading
from autofocus.program.steps.repairs import repair_query
from autofocus.program.steps.repairs.asked_class import find_asked_class, link_asked_class
from autofocus.trace import Trace
from tests.skb_factory import GraphOnlyKB, make_skb

TYPES = ["person", "location", "body_part"]
NAMES = ["composer", "Villa-Lobos", "Elgar", "Jobim", "Brazil", "England", "writer", "Machado", "Dickens",
         "tennis player", "Laver", "Evert", "heart", "ventricle", "atrium", "Ravel", "Bach", "Verdi", "Liszt", "Grieg",
         "Sibelius", "Holst", "Satie"]
NODE_TYPE = [0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0]
EDGES = [
    (1, "instance_of", 0), (2, "instance_of", 0), (3, "instance_of", 0),  # three composers
    (7, "instance_of", 6), (8, "instance_of", 6),  # two writers
    (10, "instance_of", 9), (11, "instance_of", 9),  # two tennis players
    (1, "born_in", 4), (3, "born_in", 4), (2, "born_in", 5), (7, "born_in", 4), (8, "born_in", 5),
    (13, "part_of", 12), (14, "part_of", 12),
    (15, "instance_of", 0), (16, "instance_of", 0), (17, "instance_of", 0), (18, "instance_of", 0),  # more composers
    (19, "instance_of", 0), (20, "instance_of", 0), (21, "instance_of", 0), (22, "instance_of", 0),
    (1, "member_of", 0), (2, "member_of", 0),  # two persons are also members of something called "composer"
]
EDGE_TYPES = {"instance_of": ("person", "person"), "born_in": ("person", "location"), "part_of": ("body_part", "body_part"),
              "member_of": ("person", "person")}


WITHOUT_CLASS = [r for r in REPAIR_RULES if r != "asked_class"]


@pytest.fixture(scope="module")
def skb():
    return make_skb(TYPES, NODE_TYPE, EDGES, EDGE_TYPES, names=NAMES)


def read(skb, question: str) -> QuestionReading:
    return QuestionReading(question, skb, language("en"))


def asked_phrases(question: str) -> list[str]:
    return read(make_skb(TYPES, NODE_TYPE, EDGES, EDGE_TYPES, names=NAMES), question).asked_phrases



def test_the_asked_phrase_gives_its_names_rightmost_and_longest_first_the_head_in_the_singular() -> None:
    assert asked_phrases("Which tennis players came from Australia?")[:5] == [
        "tennis players came", "players came", "came", "tennis players", "tennis player"]
    assert "body of water" in asked_phrases("Which bodies of water are part of the North Sea?")
    assert "lizard" in asked_phrases("Which kinds of lizard live in the tropics?")
    assert "composer" in asked_phrases("List the composers born in Brazil")  # past the determiner
    assert asked_phrases("Who wrote Hamlet?") == []  # no question word that introduces a phrase


def test_a_node_that_members_of_the_target_type_point_at_is_the_asked_class(skb) -> None:
    found = find_asked_class(read(skb, "Which composers came from Brazil?"), ("person",))
    assert found is not None
    # its membership relationship; "member_of" (2 links against 11) is no way of being a composer
    assert (found.name, found.rels, found.members_point_at_class, found.members) == ("composer", ("instance_of",), True, 11)
    # a class of two words, asked in the plural
    assert find_asked_class(read(skb, "Which tennis players were left-handed?"), ("person",)).name == "tennis player"
    # the class's members are of another type than the target: no class for it
    assert find_asked_class(read(skb, "Which composers came from Brazil?"), ("location",)) is None
    # "heart" has body parts pointing at it: a class of body parts, not of persons
    assert find_asked_class(read(skb, "Which heart chambers pump blood?"), ("body_part",)).name == "heart"


def test_no_class_where_the_question_names_a_label_or_no_node(skb) -> None:
    assert find_asked_class(read(skb, "Which persons came from Brazil?"), ("person",)) is None  # the label is asked
    assert find_asked_class(read(skb, "Which painters came from Brazil?"), ("person",)) is None  # no node "painter"
    assert find_asked_class(read(skb, "Which Elgar came from England?"), ("person",)) is None  # Elgar is no class (0 members)


def test_repair_links_the_target_to_the_class_the_query_left_out(skb) -> None:
    qg = parse_cypher('MATCH (y:person)-[:born_in]->(b:location {name: "Brazil"}) RETURN y', skb.schema)
    question = "Which composers came from Brazil?"
    result = repair_query(qg, read(skb, question), "person")
    query = result.query
    link = query.triplets[-1]
    assert (link.head, link.rel, query.symbols[link.tail].name_value()) == ("y", "instance_of", "composer")
    assert [r.kind for r in result.repairs] == ["class"]
    # a query that names the class already is left alone
    named = parse_cypher('MATCH (y:person)-[:instance_of]->(c:person {name: "composer"}) RETURN y', skb.schema)
    assert link_asked_class(named, read(skb, question)) == (named, None)
    # switched off
    off = repair_query(qg, read(skb, question), "person", WITHOUT_CLASS)
    assert off.query == qg and off.repairs == []


def test_grounding_keeps_the_class_and_drops_the_llms_condition_where_both_exclude_each_other(skb) -> None:
    cfg = AutofocusConfig(exact_name_only=True)
    # the question's class and the LM's condition agree: composers born in Brazil
    trace = Trace(question="Which composers came from Brazil?")
    qg = parse_cypher('MATCH (y:person)-[:born_in]->(b:location {name: "Brazil"}) RETURN y', skb.schema)
    strand = ground_strand(GraphOnlyKB(skb), qg, StrandSettings.of(cfg), trace, "person")
    assert strand.answers.tolist() == [1, 3] and strand.relaxed == []
    # the LM wrote a condition no member of the class satisfies: the LM's condition goes first, the class stays
    trace = Trace(question="Which composers were also writers?")
    qg = parse_cypher('MATCH (y:person)-[:instance_of]->(w:person {name: "writer"}) RETURN y', skb.schema)
    strand = ground_strand(GraphOnlyKB(skb), qg, StrandSettings.of(cfg), trace, "person")
    assert strand.answers.tolist() == [1, 2, 3, *range(15, 23)]
    assert strand.relaxed[-1].startswith("triplets: dropped (y)-[:instance_of]-(w)")
    # without the class link the LM's reading stands
    off = ground_strand(GraphOnlyKB(skb), qg, StrandSettings.of(cfg.updated({"repairs": WITHOUT_CLASS})), Trace(question="Which composers were also writers?"),
                        "person")
    assert off.answers.tolist() == [7, 8]
