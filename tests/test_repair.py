"""Step 3b (query repair), the schema graph it reads, name lookup, and the relaxation ladder of step 5."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autofocus.config import AutofocusConfig
from autofocus.cypher import parse_cypher, to_cypher
from autofocus.language import language
from autofocus.program.steps.grounded_strand import StrandSettings, ground_strand, relaxations
from autofocus.program.steps.label_phrases import LabelPhrases, asked_label
from autofocus.program.steps.reading import Naming, QuestionReading, tokenise, words_of
from autofocus.program.steps.repairs import repair_query
from autofocus.query_graph import Constraint, QueryGraph, Symbol, Triplet
from autofocus.skb.names import labels_named, named_ids
from autofocus.skb.schema_graph import SchemaGraph
from autofocus.trace import Trace
from tests.skb_factory import make_skb

# a small code base: modules define classes, functions and exceptions; functions raise exceptions
TYPES = ["module", "class", "exception", "function"]
NAMES = ["json", "os", "json.JSONDecoder", "ValueError", "json.JSONDecodeError", "KeyError", "json.loads", "os.getcwd",
         "os.OSErrorLike"]
NODE_TYPE = [0, 0, 1, 2, 2, 2, 3, 3, 2]
EDGES = [
    (2, "class_defined_in_module", 0),
    (4, "exception_defined_in_module", 0),
    (8, "exception_defined_in_module", 1),
    (4, "exception_subclass_of_exception", 3),
    (8, "exception_subclass_of_exception", 5),
    (6, "function_defined_in_module", 0),
    (7, "function_defined_in_module", 1),
    (6, "function_raises_exception", 4),
    (7, "function_raises_exception", 8),
    (2, "class_subclass_of_class", 2),
]
# schema.json leaves the domain of one edge type open: the schema graph must read it from the edges
EDGE_TYPES = {
    "class_defined_in_module": ("class", "module"),
    "exception_defined_in_module": (None, "module"),
    "exception_subclass_of_exception": ("exception", "exception"),
    "function_defined_in_module": ("function", "module"),
    "function_raises_exception": ("function", "exception"),
    "class_subclass_of_class": ("class", "class"),
}


@functools.cache
def _graph():
    return make_skb(TYPES, NODE_TYPE, EDGES, EDGE_TYPES, names=NAMES)


@pytest.fixture(scope="module")
def skb():
    return _graph()


EN = language("en")


def repaired(skb, cypher: str, target_type: str | None = None, question: str = ""):
    qg = parse_cypher(cypher, skb.schema, target_type=target_type)
    return repair_query(qg, QuestionReading(question, skb, EN), target_type)


def triples(qg: QueryGraph) -> list[tuple[str | None, str | None, str | None]]:
    return [(qg.symbols[t.head].type, t.rel, qg.symbols[t.tail].type) for t in qg.triplets]


def test_schema_graph_reads_the_triples_from_the_edges(skb) -> None:
    sg = SchemaGraph.from_skb(skb)
    got = {(r.src, r.rel, r.dst): r.count for r in sg.relations}
    assert got[("exception", "exception_defined_in_module", "module")] == 2  # open domain in schema.json
    assert got[("function", "function_raises_exception", "exception")] == 2
    assert len(got) == len(EDGE_TYPES)
    assert sg.examples["module"] == "json"  # the best-connected module
    assert [[(h.rel, h.forward, h.dst) for h in p] for p in sg.paths("class", "exception")] == [
        [("class_defined_in_module", True, "module"), ("exception_defined_in_module", False, "exception")]
    ]
    assert "-[:function_raises_exception]->(exception)" in sg.describe_label("function")
    described = sg.describe_label("function", description="a module-level callable")  # the schema's own words
    assert described.startswith("function (") and "= a module-level callable: -[:" in described


def test_names_are_found_exactly_normalised_and_by_the_end_of_a_qualified_name(skb) -> None:
    assert named_ids(skb, "valueerror") == (pytest.approx(np.array([3])), "exact")
    assert named_ids(skb, "Value Error")[1] == "normalised"
    assert named_ids(skb, "JSONDecodeError")[0].tolist() == [4]
    assert named_ids(skb, "JSONDecodeError")[1] == "suffix"
    assert labels_named(skb, "getcwd") == ({"function": 1}, "suffix")
    assert labels_named(skb, "nothing") == ({}, "none")


def test_a_wrong_relationship_and_a_wrong_constant_label_are_repaired_together(skb) -> None:
    result = repaired(skb, 'MATCH (y:exception)-[:class_subclass_of_class]->(b:class {name: "ValueError"}) RETURN y',
                      "exception")
    assert triples(result.query) == [("exception", "exception_subclass_of_exception", "exception")]
    kinds = [r.kind for r in result.repairs]
    assert "relabel" in kinds and "relation" in kinds


def test_a_query_the_schema_accepts_is_left_alone(skb) -> None:
    result = repaired(skb, 'MATCH (y:function)-[:function_raises_exception]->(b:exception {name: "KeyError"}) RETURN y',
                      "function")
    assert result.repairs == [] and triples(result.query) == [("function", "function_raises_exception", "exception")]


def test_a_reversed_relationship_is_turned_round(skb) -> None:
    qg = QueryGraph(target="y", symbols={
        "y": Symbol(var="y", type="exception", label="exception"),
        "f": Symbol(var="f", type="function", label="function", constraints=[Constraint(key="name", value="json.loads")]),
    }, triplets=[Triplet(head="y", rel_label="function_raises_exception", tail="f")])  # fmt: skip
    result = repair_query(qg, QuestionReading("", skb, EN))
    t = result.query.triplets[0]
    assert (t.head, t.rel, t.tail) == ("f", "function_raises_exception", "y")
    assert [r.kind for r in result.repairs] == ["relation", "direction"]


def test_two_labels_that_no_relationship_connects_get_the_two_hop_path(skb) -> None:
    result = repaired(skb, 'MATCH (y:class)-[:raises]->(b:exception {name: "ValueError"}) RETURN y', "class")
    assert [r.kind for r in result.repairs] == ["path"]
    assert len(result.query.triplets) == 2 and result.query.symbols["y"].type == "class"
    via = next(v for v in result.query.symbols if v.startswith("_via"))
    assert result.query.symbols[via].type == "module"


def test_a_relationship_whose_name_does_not_fit_gets_a_two_hop_second_reading(skb) -> None:
    # "exceptions raised by functions of json", written as one hop between exception and module
    result = repaired(skb, 'MATCH (y:exception)-[:function_raises_exception]->(m:module {name: "json"}) RETURN y')
    assert triples(result.query) == [("exception", "exception_defined_in_module", "module")]
    assert len(result.alternatives) == 1
    alt, notes = result.alternatives[0]
    assert {t.rel for t in alt.triplets} == {"function_raises_exception", "function_defined_in_module"}
    assert any(n.kind == "path" for n in notes)


def test_question_mentions_skip_stopwords_and_label_words(skb) -> None:
    mentions = dict(QuestionReading("Which module of the json library defines loads?", skb, EN)._phrases_beside_labels())
    assert "json" in mentions and "module" not in mentions and "the" not in mentions
    assert mentions["json"] == set() and "json library" in mentions
    assert mentions["json library"] == set() and mentions["loads"] == set()
    beside = dict(QuestionReading("Which classes does the json module define?", skb, EN)._phrases_beside_labels())
    assert beside["json"] == {"module"}


def test_relaxations_loosen_one_rung_at_a_time_farthest_from_the_target_first() -> None:
    qg = QueryGraph(
        target="y",
        symbols={
            "y": Symbol(var="y", type="function", constraints=[Constraint(key="year", op=">=", value=2000)]),
            "m": Symbol(var="m", type="module", constraints=[Constraint(key="name", value="json")]),
            "e": Symbol(var="e", type="exception", constraints=[Constraint(key="name", value="ValueError"),
                                                                 Constraint(key="size", op="<", value=3)]),
        },
        triplets=[Triplet(head="y", rel="function_defined_in_module", tail="m"),
                  Triplet(head="y", rel="function_raises_exception", tail="e")],
    )
    steps = list(relaxations(qg, ["filters", "triplets", "constants", "edges"]))
    names = [s[0].split(":")[0] for s in steps]
    assert names == ["filters", "filters", "triplets", "constants", "edges"]
    assert steps[-1][1].triplets[0].rel is None and len(steps[-1][1].triplets) == 1
    # equally far triplets: the first written goes first, so m's triplet is dropped and only e is left to widen
    assert steps[2][0] == "triplets: dropped (y)-[:function_defined_in_module]-(m)"
    assert set(steps[2][1].symbols) == {"y", "e"}  # m no longer constrains y: no orphan MATCH (m:module)
    assert "module" not in to_cypher(steps[2][1])
    assert steps[3][2] == frozenset({"e"})
    with pytest.raises(ValueError, match="unknown relaxation"):
        list(relaxations(qg, ["nonsense"]))


class _KB:
    """The parts of a knowledge base that steps 3b-5 use, with a name-matching stand-in for VSS."""

    def __init__(self, skb) -> None:
        self.skb = skb

    def embed_queries(self, texts):
        return [np.array([hash(t) % 97], dtype=np.float32) for t in texts]

    def index(self, variant):
        skb = self.skb

        class _Index:
            def search(self, qvec, node_type=None, candidates=None, k=10, exclude=None):
                ids = np.arange(skb.num_nodes)
                if node_type is not None:
                    ids = ids[skb.node_type == skb.type_code(node_type)]
                if candidates is not None:
                    ids = ids[np.asarray(candidates)[ids]]
                return ids[:k], np.zeros(min(k, len(ids)))

        return _Index()


def test_the_strand_repairs_then_relaxes_until_something_grounds(skb) -> None:
    cfg = AutofocusConfig(exact_name_only=True)
    trace = Trace(question="Which exceptions subclass KeyError and are defined in json?")
    qg = parse_cypher('MATCH (y:exception)-[:subclass]->(b {name: "KeyError"}), (y)-[:defined_in]->(m:module {name: "json"}) '
                      "RETURN y", skb.schema)
    strand = ground_strand(_KB(skb), qg, StrandSettings.of(cfg), trace, "exception")
    # as written nothing is both (json's exception subclasses ValueError): the farthest triplet goes; both are
    # one hop from y, so the first written (subclass of KeyError) goes and json's exception stays
    assert strand.relaxed[0] == "triplets: dropped (y)-[:exception_subclass_of_exception]-(b)"
    assert strand.answers.tolist() == [4]
    assert trace.flags["grounded_nonempty"] is True and trace.data["relaxed"] == strand.relaxed
    assert ("5_relax", "triplets") in [(e.step, e.kind) for e in trace.events]


def test_votes_keep_what_most_grounding_samples_agree_on(skb) -> None:
    from autofocus.program.steps.grounded_strand import ground_by_votes

    defined = 'MATCH (y:exception)-[:exception_defined_in_module]->(m:module {name: "json"}) RETURN y'  # {4}
    subclass = 'MATCH (y:exception)-[:exception_subclass_of_exception]->(b:exception {name: "ValueError"}) RETURN y'  # {4}
    other = 'MATCH (y:exception)-[:exception_defined_in_module]->(m:module {name: "os"}) RETURN y'  # {8}
    trace = Trace(question="Which exception of json (or os) subclasses ValueError?")
    strand = ground_by_votes(_KB(skb), [defined, subclass, other, "not a query"], StrandSettings.of(AutofocusConfig(relax=[])), trace,
                             "exception")
    assert strand.answers.tolist() == [4]  # 2 of the 3 grounding samples; the unparsable one does not vote
    assert trace.data["votes"] == {"samples": 4, "grounding": 3, "kept": 1, "sizes": [1, 1, 1, 0]}
    assert trace.flags["grounded_nonempty"] is True and trace.data["grounded_ids"].tolist() == [4]
    lone = ground_by_votes(_KB(skb), ["not a query", other], StrandSettings.of(AutofocusConfig(relax=[])), Trace(question="os errors?"),
                           "exception")
    assert lone.answers.tolist() == [8]  # one grounding sample is a majority of one


_TOKENS = ["MATCH", "(", ")", "-[", "]->", "<-[", "]-", ":", "{name: ", "}", '"ValueError"', '"json"', "y", "b",
           "module", "exception", "Exceptions", "class_subclass_of_class", "raises", "defined_in", "WHERE", "y.num >= 3",
           "RETURN y", ",", "NOT", "OR", "`gene/protein`", "*2", "|", "ValueError", "\n", "  "]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(st.sampled_from(_TOKENS), max_size=30), question=st.text(max_size=80))
def test_hostile_queries_still_give_a_strand(skb, parts: list[str], question: str) -> None:
    """Whatever the LM writes, steps 3-5 return a (possibly empty) grounded set and never raise."""
    cfg = AutofocusConfig()
    trace = Trace(question=question)
    from autofocus.program.steps.grounded_strand import parse_step

    qg = parse_step(_KB(skb), " ".join(parts), "exception", cfg.grounding, trace)
    strand = ground_strand(_KB(skb), qg, StrandSettings.of(cfg), trace, "exception")
    assert strand.answers.dtype.kind == "i" and set(strand.answers.tolist()) <= set(range(skb.num_nodes))
    assert len(strand.relaxed) <= cfg.grounding.relax_max_rungs + 2  # the second readings, then the ladder's rungs


def named_in(name: str, question: str) -> bool:
    return QuestionReading(question, _graph(), EN).names(name, Naming.NEAR)


def test_a_constant_leaves_a_label_where_nothing_has_its_name(skb) -> None:
    # the relationship fits module -> module exactly, but no module is called ValueError: an exception is
    cypher = 'MATCH (y:module)<-[:exception_defined_in_module]-(b:module {name: "ValueError"}) RETURN y'
    result = repaired(skb, cypher, "module", question="Which module defines ValueError?")
    assert result.query.symbols["b"].type == "exception"
    assert any(r.kind == "relabel" and "exception is named 'ValueError'" in r.detail for r in result.repairs)



def test_an_entity_the_question_names_and_the_query_left_out_is_linked_to_the_target(skb) -> None:
    one_condition = 'MATCH (y:function)-[:function_raises_exception]->(b:exception {name: "KeyError"}) RETURN y'
    result = repaired(skb, one_condition, "function", question="Which functions of the json module raise KeyError?")
    assert triples(result.query) == [("function", "function_raises_exception", "exception"),
                                     ("function", "function_defined_in_module", "module")]
    added = next(v for v in result.query.symbols if v.startswith("_named"))
    assert result.query.symbols[added].name_value() == "json" and [r.kind for r in result.repairs] == ["mention"]
    # a qualified name needs no label word beside it; a query with no triplet gets the link too
    bare = repaired(skb, "MATCH (y:exception) RETURN y", "exception", question="What does json.loads raise?")
    assert triples(bare.query) == [("function", "function_raises_exception", "exception")]
    # a plain word away from its label's word is no name; a name the query has already is not added twice
    for question in ("Which functions does json define that raise KeyError?", "Which functions raise a KeyError?"):
        assert repaired(skb, one_condition, "function", question=question).repairs == []
    # an entity of the target's own label is left alone: which way the relationship goes is open
    same = repaired(skb, 'MATCH (y:exception)-[:exception_defined_in_module]->(m:module {name: "json"}) RETURN y',
                    "exception", question="Which exceptions like ValueError are defined in json?")
    assert same.repairs == []


def test_an_entity_two_relationships_could_link_is_not_guessed() -> None:
    edges = [*EDGES, (6, "function_documented_in_module", 1)]
    two = make_skb(TYPES, NODE_TYPE, edges, {**EDGE_TYPES, "function_documented_in_module": ("function", "module")},
                   names=NAMES)
    result = repaired(two, 'MATCH (y:function)-[:function_raises_exception]->(b:exception {name: "KeyError"}) RETURN y',
                      "function", question="Which functions of the json module raise KeyError?")
    assert result.repairs == [] and len(result.query.triplets) == 1


def test_a_word_inside_a_longer_name_the_question_gives_is_no_mention_of_its_own() -> None:
    """"socket server classes" names the module socketserver, so "server" beside "classes" is not the
    class asyncio.Server (the longer mention is not linked either: the query's constant is part of it)."""
    net = make_skb(["module", "class"], [0, 0, 0, 1], [(1, "module_imports_module", 0), (3, "class_defined_in_module", 2)],
                   {"module_imports_module": ("module", "module"), "class_defined_in_module": ("class", "module")},
                   names=["socket", "socketserver", "asyncio", "asyncio.Server"])  # fmt: skip
    query = 'MATCH (y:module)-[:module_imports_module]->(b:module {name: "socket"}) RETURN y'
    inside = repaired(net, query, "module", question="Which module that depends on socket provides generic socket server classes?")
    assert inside.repairs == [] and len(inside.query.triplets) == 1
    alone = repaired(net, query, "module", question="Which module that depends on socket defines the server class?")
    assert [r.kind for r in alone.repairs] == ["mention"] and "the class 'server'" in alone.repairs[0].detail


def test_a_one_hop_relationship_gets_a_second_reading_through_the_label_the_question_names(skb) -> None:
    """"exceptions raised by the functions of json" written exactly as ``exception_defined_in_module``:
    the question names functions, which the query skips, so the path through them is the second reading;
    without that word, or when the word labels a named entity ("the json module"), there is none."""
    one_hop = 'MATCH (y:exception)-[:exception_defined_in_module]->(m:module {name: "json"}) RETURN y'
    result = repaired(skb, one_hop, "exception", question="Which exceptions do the functions of json raise?")
    assert triples(result.query) == [("exception", "exception_defined_in_module", "module")] and result.repairs == []
    (alt, notes), = result.alternatives
    assert {t.rel for t in alt.triplets} == {"function_raises_exception", "function_defined_in_module"}
    assert [n.kind for n in notes] == ["path"]
    for question in ("Which exceptions does json define?", "Which exceptions are defined in the json module?"):
        assert repaired(skb, one_hop, "exception", question=question).alternatives == []



def test_the_strand_tries_the_second_reading_when_the_written_one_grounds_nothing() -> None:
    # logging defines no exception; its function raises ValueError
    logs = make_skb(["module", "exception", "function"], [0, 1, 2, 0, 1],
                    [(2, "function_defined_in_module", 0), (2, "function_raises_exception", 1),
                     (4, "exception_defined_in_module", 3)],
                    {"function_defined_in_module": ("function", "module"),
                     "function_raises_exception": ("function", "exception"),
                     "exception_defined_in_module": ("exception", "module")},
                    names=["logging", "ValueError", "logging.config.dictConfig", "os", "os.error"])  # fmt: skip
    question = "What errors can the functions of the logging module raise?"
    qg = parse_cypher('MATCH (y:exception)-[:exception_defined_in_module]->(b:module {name: "logging"}) RETURN y',
                      logs.schema, target_type="exception")
    trace = Trace(question=question)
    strand = ground_strand(_KB(logs), qg, StrandSettings.of(AutofocusConfig()), trace, "exception")
    assert strand.answers.tolist() == [1] and strand.relaxed[0].startswith("reading: ")
    assert ("5_relax", "reading") in [(e.step, e.kind) for e in trace.events]
    assert {t.rel for t in strand.query_graph.triplets} == {"function_raises_exception", "function_defined_in_module"}


def test_a_name_the_question_gives_is_verbatim_and_a_short_one_a_word_of_its_own() -> None:
    assert not named_in("sys", "How do I find out how many CPUs the system has?")
    assert not named_in("os", "Which is the most common error?")
    assert not named_in("os.path", "the disk containing a path")
    assert named_in("os", "functions of the os module") and named_in("TP53", "genes that interact with tp53's product")
    assert named_in("dict", "which methods return dicts?") and named_in("http.client", "exceptions of http.client")
    assert named_in("Stanford University", "papers from stanford universty")  # long names: nearly verbatim


def test_the_label_a_question_asks_for_heads_the_phrase_after_its_question_word() -> None:
    words = LabelPhrases.of(["module", "class", "method", "exception", "function"], EN)
    asked = {
        "Which modules define their own subclass of KeyError?": "module",
        "Which standard library modules declare an exception that inherits from KeyError?": "module",
        "In tarfile, which class methods throw ValueError?": "method",
        "List the selectors.BaseSelector methods whose code raises NotImplementedError.": "method",
        "What shutil functions throw some more specific kind of OSError?": "function",
        "When I use functions from base64, which exception types do they raise explicitly?": "exception",
        "In the json module, which classes raise ValueError?": "class",  # after the question word
        "What json functions throw a kind of ValueError?": "function",
        "How do I parse a JSON document?": None,
        "What errors can the functions of the logging module raise directly?": None,  # a verb comes first
        "What do the functions of json raise?": None,
        "Which subclass of random.Random draws from the operating system?": None,
        "How do I find out how many CPUs the system has?": None,
    }
    related = {frozenset(p) for p in [("module", "class"), ("module", "function"), ("module", "exception"),
                                      ("class", "method"), ("function", "exception"), ("method", "exception")]}
    asked |= {
        "List the exception classes of json that inherit from ValueError.": "exception",  # a kind, not a relation
        "Which math module function computes exp(x)-1?": "function",
        "I'm calling into secrets: which of its functions throw a ValueError themselves?": "function",
        "What is the function defined in the module base64?": "function",
        "What are some classes that subclass tuple?": "class",
        "What is the name of the exception that json raises?": None,
        "What is json?": None,
    }
    def ask(q: str) -> str | None:
        return asked_label(words_of(tokenise(q, EN)), words, EN, lambda a, b: frozenset((a, b)) in related)

    assert {q: ask(q) for q in asked} == asked


def _modules_skb():
    names = ["base64", "os", "abc", "importlib", "email", "json"]
    edges = [(3, "module_imports_module", 0), (3, "module_imports_module", 1), (4, "module_imports_module", 0),
             (0, "module_imports_module", 1), (5, "module_imports_module", 2)]  # fmt: skip
    return make_skb(["module"], [0] * 6, edges, {"module_imports_module": ("module", "module")}, names=names)


def test_a_list_written_as_a_chain_of_named_nodes_becomes_a_star() -> None:
    """"Modules that import base64 and os" written as (y)->(base64)->(os): the second triplet joins two
    named nodes (true in the graph, so it would constrain nothing and email would be an answer too)."""
    skb = _modules_skb()
    cypher = ('MATCH (y:module)-[:module_imports_module]->(b:module {name: "base64"})'
              '-[:module_imports_module]->(c:module {name: "os"}) RETURN y')  # fmt: skip
    result = repaired(skb, cypher, "module", question="Which modules import base64 and also os?")
    assert sorted((t.head, t.tail) for t in result.query.triplets) == [("y", "b"), ("y", "c")]
    assert [r.kind for r in result.repairs] == ["star"]
    strand = ground_strand(_KB(skb), result.query, StrandSettings.of(AutofocusConfig(repairs=[])), Trace(question="q"), "module")
    assert strand.answers.tolist() == [3]  # importlib; email imports base64 but not os
    # a triplet the target's label cannot take stays as written: a module depends on no package
    typed = make_skb(["module", "package"], [0, 0, 1, 1], [(2, "ships", 0), (2, "depends_on", 3)],
                     {"ships": ("package", "module"), "depends_on": ("package", "package")},
                     names=["base64", "os", "wheelhouse", "numpy"])  # fmt: skip
    cypher = ('MATCH (y:module)<-[:ships]-(c:package {name: "wheelhouse"})'
              '-[:depends_on]->(d:package {name: "numpy"}) RETURN y')  # fmt: skip
    result = repaired(typed, cypher, "module", question="Which modules ship with wheelhouse, which needs numpy?")
    assert not any(r.kind == "star" for r in result.repairs) and len(result.query.triplets) == 2


@pytest.mark.parametrize(("question", "written", "flipped"), [
    ("Which modules does importlib import?", "(y)-[:module_imports_module]->(b)", True),
    ("Which modules are imported by importlib?", "(y)-[:module_imports_module]->(b)", True),
    ("Which modules import base64?", "(b)-[:module_imports_module]->(y)", True),
    ("Which modules import base64?", "(y)-[:module_imports_module]->(b)", False),  # as the question reads
    ("Which modules does importlib import?", "(b)-[:module_imports_module]->(y)", False),
    ("Which modules relate to importlib?", "(y)-[:module_imports_module]->(b)", False),  # the wording says nothing
])
def test_a_same_type_relationship_is_turned_the_way_the_question_reads(question: str, written: str,
                                                                       flipped: bool) -> None:  # fmt: skip
    skb = _modules_skb()
    name = "importlib" if "importlib" in question else "base64"
    cypher = f'MATCH {written.replace("(b)", f"(b:module {{name: {chr(34)}{name}{chr(34)}}})")} RETURN y'
    result = repaired(skb, cypher.replace("(y)", "(y:module)"), "module", question=question)
    (t,) = result.query.triplets
    before = ("y", "b") if written.startswith("(y)") else ("b", "y")
    assert ((t.head, t.tail) != before) is flipped
    assert any(r.kind == "direction" for r in result.repairs) is flipped
    if flipped and name == "importlib":
        strand = ground_strand(_KB(skb), result.query, StrandSettings.of(AutofocusConfig(repairs=[])), Trace(question=question), "module")
        assert sorted(strand.answers.tolist()) == [0, 1]  # what importlib imports: base64, os


