"""Readings of a small LM's query on a taxonomy-shaped schema (multi-word labels and names, one type on
both ends of most relationships): the asked class with its subclasses, a same-type link turned round
when it grounds nothing, a link to a named node that lacks the relationship read as any, and a name the
query forgot taken from the question."""

from __future__ import annotations

import pytest

from autofocus.config import REPAIR_RULES, AutofocusConfig
from autofocus.cypher import parse_cypher
from autofocus.cypher.mapping import mapper_for
from autofocus.cypher.render import to_cypher
from autofocus.language import language
from autofocus.program.steps.grounded_strand import StrandSettings, ground_strand
from autofocus.program.steps.reading import QuestionReading
from autofocus.program.steps.repairs import Context, repair_query
from autofocus.program.steps.repairs.asked_class import find_asked_class
from autofocus.program.steps.repairs.name_from_question import NameFromQuestion
from autofocus.program.steps.repairs.turn_round import reversed_reading
from autofocus.skb.schema_graph import schema_graph
from autofocus.trace import Trace
from tests.skb_factory import GraphOnlyKB, make_skb

TYPES = ["animal", "body_part", "natural_object", "location", "food", "plant"]
NAMES = [
    "family", "fish family", "cat family", "Centrarchidae", "Felidae", "sunfish", "bass", "lion",  # 0-7
    "forearm", "ulnar vein", "radial vein", "hand", "nerve cell", "axon", "dendrite", "part",  # 8-15
    "body of water", "strait", "inlet", "Kattegatt", "Skagerrak", "Zuider Zee", "North Sea", "sea",  # 16-23
    "bay",  # 24
    "Mexico", "Tepic", "country", "absinth", "wormwood", "anise", "pastis",  # 25-31
    "Wadden coast",  # 32
]
NODE_TYPE = [0] * 8 + [1] * 7 + [2] + [2] * 9 + [3, 3, 3, 4, 5, 5, 4, 3]
EDGES = [
    (1, "is_a", 0), (2, "is_a", 0), (3, "is_a", 1), (4, "is_a", 2),  # families: kinds of "family"
    (5, "member_of", 3), (6, "member_of", 3), (7, "member_of", 4),  # species of families
    (9, "part_of", 8), (10, "part_of", 8), (8, "part_of", 11),  # veins of the forearm
    (13, "part_of", 12), (14, "part_of", 12), (13, "is_a", 15), (14, "is_a", 15),  # a cell's parts; "part"
    (17, "is_a", 16), (18, "is_a", 16), (23, "is_a", 16), (24, "is_a", 18),  # kinds of body of water
    (19, "instance_of", 17), (20, "instance_of", 17), (21, "instance_of", 18), (22, "instance_of", 23),
    (19, "part_of", 22), (20, "part_of", 22), (21, "part_of", 22),
    (26, "part_of", 25), (25, "is_a", 27),  # Tepic is in Mexico; it is a kind of nothing
    (28, "made_of", 29), (31, "made_of", 30), (30, "made_of", 31),  # made_of links foods and plants both ways
    (29, "part_of", 25),  # part_of links plants to locations one way
    (32, "part_of", 22),  # the North Sea has parts of two labels
]
EDGE_TYPES = {"is_a": (None, None), "member_of": ("animal", "animal"), "part_of": (None, None),
              "instance_of": ("natural_object", "natural_object"), "made_of": (None, None)}


@pytest.fixture(scope="module")
def skb():
    return make_skb(TYPES, NODE_TYPE, EDGES, EDGE_TYPES, names=NAMES)



def read(skb, question: str) -> QuestionReading:
    return QuestionReading(question, skb, language("en"))


def context(skb, *types: str) -> Context:
    return Context(skb, schema_graph(skb), mapper_for(skb.schema), types)


def without(*rules: str) -> list[str]:
    """The default rules but ``rules``."""
    return [r for r in REPAIR_RULES if r not in rules]


def asked_phrases(question: str) -> list[str]:
    return read(make_skb(TYPES, NODE_TYPE, EDGES, EDGE_TYPES, names=NAMES), question).asked_phrases


def name_from_question(qg, skb, question: str):
    return NameFromQuestion().rewrite(qg, read(skb, question), context(skb))


def _strand(skb, question: str, cypher: str, target_type: str, **cfg):
    qg = parse_cypher(cypher, skb.schema)
    return ground_strand(GraphOnlyKB(skb), qg, StrandSettings.of(AutofocusConfig(exact_name_only=True, **cfg)), Trace(question=question), target_type)


def test_the_asked_class_reaches_its_subclasses_through_the_relationship_that_chains_there(skb) -> None:
    found = find_asked_class(read(skb, "What family is the sunfish in?"), ("animal",))
    assert found is not None and found.rels == ("is_a",)
    assert set(found.extent) == {0, 1, 2, 3, 4}  # "family", its kinds and their kinds
    # the sunfish's family is a kind of a kind of "family": the LM's member_of link and the class agree
    strand = _strand(skb, "What family is the sunfish in?",
                     'MATCH (s:animal {name: "sunfish"})-[:member_of]->(y:animal) RETURN y', "animal")
    assert strand.answers.tolist() == [3] and strand.relaxed == []
    # the query as Cypher says the class stands for its kinds (``autofocus skb export``'s database runs it)
    assert "(y)-[:is_a]->()-[:is_a*0..16]->(_class1:animal)" in to_cypher(strand.query_graph)


def test_members_of_subclasses_may_link_another_way_than_the_subclasses(skb) -> None:
    found = find_asked_class(read(skb, "Which bodies of water are part of the North Sea?"), ("natural_object",))
    assert found is not None and set(found.rels) == {"is_a", "instance_of"}  # "Kattegatt" instance_of "strait"
    strand = _strand(skb, "Which bodies of water are part of the North Sea?",
                     'MATCH (y:natural_object)-[:part_of]->(b:natural_object {name: "North Sea"}) RETURN y',
                     "natural_object")
    assert strand.answers.tolist() == [19, 20, 21] and strand.relaxed == []


def test_a_same_type_link_that_grounds_nothing_is_read_the_other_way_round(skb) -> None:
    cypher = 'MATCH (y:body_part)-[:part_of]->(b:body_part {name: "ulnar vein"}) RETURN y'
    strand = _strand(skb, "Where in the body is the ulnar vein?", cypher, "body_part")
    assert strand.answers.tolist() == [8]
    assert strand.relaxed == ["reading: turned round: (b)-[:part_of]->(y)"]
    # switched off, relaxation loosens the query instead and does not find the forearm
    off = _strand(skb, "Where in the body is the ulnar vein?", cypher, "body_part", repairs=without("turn_round"),
                  relax=["triplets", "edges"])
    assert 8 not in off.answers.tolist() and not any(r.startswith("reading") for r in off.relaxed)


def _second_readings(skb, question: str, cypher: str, target_type: str) -> str:
    """Every repair of the second readings that step 3b offers, as one text."""
    qg = parse_cypher(cypher, skb.schema)
    repaired = repair_query(qg, read(skb, question), target_type)
    return " | ".join(r.detail for _, reps in repaired.alternatives for r in reps)


def test_no_turn_where_the_question_words_the_relationship(skb) -> None:
    readings = _second_readings(skb, "Which veins are part of the hand?",
                                'MATCH (y:body_part)-[:part_of]->(b:body_part {name: "hand"}) RETURN y', "body_part")
    assert "turned round" not in readings


def test_a_link_between_two_labels_that_the_graph_links_both_ways_is_turned_round(skb) -> None:
    cypher = 'MATCH (y:plant)-[:made_of]->(b:food {name: "absinth"}) RETURN y'
    strand = _strand(skb, "Which plant is absinth made from?", cypher, "plant")
    assert strand.answers.tolist() == [29] and strand.relaxed == ["reading: turned round: (b)-[:made_of]->(y)"]
    # the graph never links the labels the other way: nothing to turn
    qg = parse_cypher('MATCH (y:plant)-[:part_of]->(b:location {name: "Mexico"}) RETURN y', skb.schema)
    assert reversed_reading(qg, read(skb, "Which plants grow in Mexico?"), context(skb)) is None
    # the question words the direction written: kept
    assert "turned round" not in _second_readings(skb, "Which plants are made of pastis?",
                                                  'MATCH (y:plant)-[:made_of]->(b:food {name: "pastis"}) RETURN y', "plant")


def test_a_relationship_the_named_node_lacks_is_read_as_any_relationship(skb) -> None:
    # "is" is the question's verb, not the wording of is_a: the link is read both ways, then as any link
    cypher = 'MATCH (y:location)-[:is_a]->(b:location {name: "Tepic"}) RETURN y'
    strand = _strand(skb, "Where is Tepic?", cypher, "location")
    assert strand.answers.tolist() == [25]
    assert strand.relaxed == ["reading: any relationship: 'Tepic' has no is_a link: (y)-[]-(b)"]
    off = _strand(skb, "Where is Tepic?", cypher, "location", repairs=without("own_links"), relax=[])
    assert off.empty
    # a named node that has the relationship keeps it: the reading is the graph's, not a guess
    assert "any relationship" not in _second_readings(
        skb, "Where is country?", 'MATCH (y:location)-[:is_a]->(b:location {name: "country"}) RETURN y', "location")


def test_a_name_the_query_forgot_is_taken_from_the_question(skb) -> None:
    question = "What are the parts of a nerve cell?"
    qg = parse_cypher("MATCH (y:body_part)-[:part_of]->(b:body_part) RETURN y", skb.schema)
    named, repairs = name_from_question(qg, skb, question)
    assert named.symbols["b"].name_value() == "nerve cell" and [r.kind for r in repairs] == ["mention"]
    # "parts" is a relationship's word ("part_of"), not the class "part" that axon and dendrite are kinds of
    assert find_asked_class(read(skb, question), ("body_part",)) is None
    strand = _strand(skb, question, "MATCH (y:body_part)-[:part_of]->(b:body_part) RETURN y", "body_part")
    assert strand.answers.tolist() == [13, 14]
    # nothing to name: every symbol but the target has a name, or the question names no node of its label
    assert name_from_question(named, skb, question) == (named, [])
    assert name_from_question(qg, skb, "What are the parts of a sunfish?") == (qg, [])


def test_the_asked_phrase_passes_a_copula_and_its_determiner() -> None:
    assert "astronaut" in asked_phrases("Who are the astronauts?")
    assert asked_phrases("Who is Elgar?") == []  # no determiner: the copula is the question's verb


def test_the_new_readings_take_any_question_text(skb) -> None:
    qg = parse_cypher("MATCH (y:body_part)-[:part_of]->(b:body_part) RETURN y", skb.schema)
    for question in ["", "?", "'" * 500, "Ünïcödé 💥 parts of a nerve cell", "parts " * 5000 + "of a nerve cell"]:
        named, _ = name_from_question(qg, skb, question)
        assert named.symbols["b"].name_value() in (None, "nerve cell")
        find_asked_class(read(skb, question), ("body_part",))
        asked_phrases(question)


def test_the_asked_class_may_settle_the_target_on_a_type_step_1_found_plausible(skb) -> None:
    # both LM steps lean to location; step 1 also found natural_object plausible, and "bodies of water" names
    # a class of natural objects only: the target may be one (the class admits nothing else), not the coast
    question = "Which bodies of water are part of the North Sea?"
    cypher = 'MATCH (y:location)-[:part_of]->(b:natural_object {name: "North Sea"}) RETURN y'
    strand = _strand(skb, question, cypher, ["location", "natural_object"])
    assert strand.answers.tolist() == [19, 20, 21] and strand.relaxed == []
    assert strand.query_graph.symbols["y"].types == ["location", "natural_object"]
    # the class comes from the question's own words ("bodies of water"): the answers are the graph's, exactly
    assert strand.named_exactly(skb, read(skb, question))
    [linked] = [r.detail for r in strand.repairs if r.kind == "class"]
    assert "natural_object nodes (step 1's natural_object, not the query's location) of the class 'body of water'" in linked
    # step 1 found location alone plausible: no class of locations is named, the query's reading stands
    assert _strand(skb, question, cypher, ["location"]).answers.tolist() == [32]


def test_a_name_the_query_has_as_a_constant_is_no_asked_class_and_the_search_goes_on(skb) -> None:
    # "North Sea" is a class of its parts by shape, but the question asks for straits that join it
    question = "Which straits join North Sea?"
    assert find_asked_class(read(skb, question), ("natural_object",)).name == "North Sea"
    assert find_asked_class(read(skb, question), ("natural_object",), named=frozenset({"north sea"})).name == "strait"
    strand = _strand(skb, question, 'MATCH (y:natural_object)-[:part_of]->(b:natural_object {name: "North Sea"}) RETURN y',
                     "natural_object")
    assert strand.answers.tolist() == [19, 20]  # Kattegatt and Skagerrak, not the Zuider Zee (an inlet)
    assert any("class 'strait'" in r.detail for r in strand.repairs)
