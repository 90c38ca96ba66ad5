"""Step 1 scoring of every candidate type, and step 2's grammar of the schema's triples."""

from __future__ import annotations

import json
import re
from pathlib import Path

import dspy
import pytest

from autofocus.config import AutofocusConfig
from autofocus.program.steps.constrain import (
    cypher_grammar,
    grammar_config,
    query_opening,
    query_spec_grammar,
)
from autofocus.program.steps.llm_call import ANSWER_START
from autofocus.program.steps.schema_context import SchemaContext
from autofocus.program.steps.target_type import TypeInput, combine, kept
from autofocus.program.systems import afr
from autofocus.program.systems.afr import AutofocusRetriever, score_target_types
from autofocus.signatures import target_type_signature
from autofocus.skb.schema_graph import schema_graph
from autofocus.trace import Trace
from tests.skb_factory import make_skb
from tests.test_repair import EDGE_TYPES, EDGES, NAMES, NODE_TYPE, TYPES


@pytest.fixture(scope="module")
def skb():
    return make_skb(TYPES, NODE_TYPE, EDGES, EDGE_TYPES, names=NAMES)


def _hops(grammar: str) -> set[tuple[str, str, str]]:
    """(from label, relationship, to label) of every hop the grammar allows."""
    out = set()
    for line in grammar.splitlines():
        m = re.match(r"l-(\w+)-\d ::= ", line)
        if not m:
            continue
        for arrow, rel, to in re.findall(r'"(-|<-)\[:(\w+)\]-?>?" l-(\w+)-\d', line):
            out.add((m.group(1), rel, to) if arrow == "-" else (to, rel, m.group(1)))
    return out


def test_the_grammar_allows_exactly_the_triples_of_the_graph(skb) -> None:
    sg = schema_graph(skb)
    grammar = cypher_grammar(sg, ["num_params"])
    assert _hops(grammar) == {(r.src, r.rel, r.dst) for r in sg.relations}
    assert grammar.startswith('root ::= "[[ ## cypher ## ]]" "\\n" query')  # ChatAdapter's field markers
    assert '"num_params"' in grammar and '"name"' in grammar
    assert grammar_config(grammar) == {"extra_body": {"grammar": grammar}}
    given = cypher_grammar(sg, ["num_params"], header=False)  # the call gives the header (ServerChatAdapter)
    assert given.startswith("root ::= query\n") and given.splitlines()[1:] == grammar.splitlines()[1:]
    assert query_spec_grammar(sg, [], header=False).startswith("root ::= spec\n")


def test_an_opened_grammar_starts_where_its_opening_ends(skb) -> None:
    sg = schema_graph(skb)
    one = cypher_grammar(sg, [], targets=["exception"], header=False, opened=True).splitlines()
    two = cypher_grammar(sg, [], targets=["exception", "class"], header=False, opened=True).splitlines()
    assert query_opening(["exception"]) == "MATCH (y:exception" and query_opening(["exception", "class"]) == "MATCH (y:"
    assert one[0] == "root ::= opened" and 'opened ::= ")" (l-exception-0-hops)? rest' in one  # after "(y:exception"
    assert "opened ::= target rest" in two and 'l-class-y ::= "class" ")" (l-class-0-hops)?' in two  # after "(y:"
    assert 'query ::= "MATCH " "(y:" target rest' in two  # the whole query, where nothing is given, as before


def _parses(grammar: str) -> None:
    """The GBNF grammar reads as the offline LM's decoder reads it (llguidance, ``local_lm.decoding``); the
    server's own GBNF reader takes grammars in tests/test_llama_server.py."""
    from llguidance import LLMatcher
    from llguidance.gbnf_to_lark import gbnf_to_lark

    assert LLMatcher.validate_grammar(LLMatcher.grammar_from_lark(gbnf_to_lark(grammar))) == ""


def test_the_grammar_parses(skb) -> None:
    for opened in (False, True):
        _parses(cypher_grammar(schema_graph(skb), ["num_params"], targets=["class"], header=not opened, opened=opened))


def test_labels_that_are_not_identifiers_are_backticked() -> None:
    odd = make_skb(["gene/protein", "drug"], [0, 1], [(1, "drug targets", 0)], {"drug targets": ("drug", "gene/protein")})
    grammar = cypher_grammar(schema_graph(odd), [])
    assert '":" "`gene/protein`"' in grammar and '"-[:`drug targets`]->"' in grammar
    assert re.search(r"^l-genex2fprotein-0 ::= ", grammar, re.M)  # rule names stay plain


def test_step2_is_constrained_only_where_the_lm_takes_a_grammar(skb, monkeypatch: pytest.MonkeyPatch) -> None:
    class _KB:
        pass

    kb = _KB()
    kb.skb = skb
    grammar = AutofocusRetriever(kb, AutofocusConfig())._step2_constraint(["exception"])["extra_body"]["grammar"]
    assert "target ::= l-exception-y" in grammar and "RETURN \" \"y\"" in grammar  # local by default, from step 1's type
    assert grammar.startswith('root ::= "[[ ## cypher')  # a server that is not llama-server: the grammar writes the header
    program = AutofocusRetriever(kb, AutofocusConfig())
    monkeypatch.setattr(afr, "prefills", lambda lm: True)  # llama-server: the call gives the header and the opening
    opened = program._step2_constraint(["exception"])
    assert opened["extra_body"]["grammar"].startswith("root ::= opened\n")
    assert opened[ANSWER_START] == "MATCH (y:exception" and opened["stop"] == ["\nRETURN"]
    assert program._step2_constraint(["exception", "class"])[ANSWER_START] == "MATCH (y:"
    assert ANSWER_START not in program._step2_constraint()  # no target type: nothing fixed but the header
    hosted = AutofocusConfig.model_validate({"lm": {"default": "openai/gpt-4o-mini"}})
    assert AutofocusRetriever(kb, hosted)._step2_constraint() == {}
    forced = AutofocusConfig.model_validate({"lm": {"default": "openai/m"}, "constrain": "grammar"})
    assert AutofocusRetriever(kb, forced)._step2_constraint()
    assert AutofocusRetriever(kb, AutofocusConfig(constrain="off"))._step2_constraint() == {}


def test_step1_keeps_the_types_the_lm_finds_likely(skb, monkeypatch: pytest.MonkeyPatch) -> None:
    context = SchemaContext.from_skb(skb)
    assert len(context.type_descriptions) == len(TYPES) and "e.g." in context.type_descriptions[0]
    seen = {}

    def fake(lm, messages, choices, **kwargs):
        seen["prompt"] = " ".join(m["content"] for m in messages)
        seen["prefix"] = kwargs["assistant_prefix"]
        return [0.05, 0.5, 0.4, 0.05]  # module, class, exception, function

    monkeypatch.setattr(afr, "choice_probabilities", fake)
    step1 = dspy.Predict(target_type_signature(context.candidate_types, described=True))
    step1.lm = dspy.LM("openai/m", api_base="http://127.0.0.1:1/v1", api_key="k")
    trace = Trace(question="Which errors does json.loads raise?")
    kept = score_target_types(step1, context, trace.question, trace, threshold=0.3, most=2)
    weighed = Trace(question=trace.question)  # an embedding prior that favours exceptions outweighs the LM's class
    prior = TypeInput("prior", {"exception": 1.0, "class": 0.1})  # a type it leaves out weighs 0
    assert score_target_types(step1, context, trace.question, weighed, 0.3, 2, inputs=lambda: [prior]) == ["exception"]
    assert weighed.data["target_type_lm_probs"]["class"] == 0.5 and weighed.data["target_type_probs"]["exception"] > 0.8
    assert weighed.data["target_type_inputs"] == ["prior"]
    assert kept == ["class", "exception"]
    assert "json.loads raise" in seen["prompt"] and "e.g." in seen["prompt"] and seen["prefix"].startswith("[[ ## target_type")
    assert trace.data["target_type_probs"]["class"] == 0.5
    assert score_target_types(step1, context, trace.question, trace, threshold=0.9, most=2) == ["class"]
    with dspy.context(trace=[]):  # as bootstrapping traces a run: the scored answer is in it, as a call's would be
        score_target_types(step1, context, trace.question, trace, threshold=0.3, most=2)
        (called, inputs, pred), = dspy.settings.trace
    assert called is step1 and inputs["question"] == trace.question and pred.target_type == "class"


def test_the_typed_format_grammar_names_only_labels_and_relationships_of_the_graph(skb) -> None:
    sg = schema_graph(skb)
    grammar = query_spec_grammar(sg, ["num_params"])
    labels = re.search(r"^label ::= (.*)$", grammar, re.M).group(1)
    rels = re.search(r"^rel ::= (.*)$", grammar, re.M).group(1)
    assert set(re.findall(r'\\"(.+?)\\"', labels)) == set(TYPES)
    assert set(re.findall(r'\\"(.+?)\\"', rels)) == {r.rel for r in sg.relations}
    assert grammar.startswith('root ::= "[[ ## query ## ]]"')
    _parses(grammar)


def test_typed_queries_ask_hosted_lms_for_json_schema_enums(skb) -> None:
    from tests.fake_openai_server import FakeOpenAIServer

    answer = {"query": {"target": "y", "nodes": [{"var": "y", "label": "exception", "name": None, "where": []},
                                                  {"var": "b", "label": "exception", "name": "ValueError", "where": []}],
                        "edges": [{"head": "y", "rel": "exception_subclass_of_exception", "tail": "b"}]}}

    class _KB:
        pass

    kb = _KB()
    kb.skb = skb
    with FakeOpenAIServer(lambda body: json.dumps(answer)) as srv:
        cfg = AutofocusConfig.model_validate({"lm": {"default": "openai/gpt-4o-mini"}, "query_format": "typed"})
        program = AutofocusRetriever(kb, cfg)
        assert program.step2_mode() == "json_schema"
        lm = dspy.LM("openai/gpt-4o-mini", api_base=srv.api_base, api_key="k", cache=False)
        trace = Trace(question="Which exceptions subclass ValueError?")
        with dspy.context(lm=lm):
            cypher = program.derive_query(trace.question, "exception", trace)
        schema = json.dumps(srv.requests[-1]["response_format"])
        assert '"enum"' in schema and "exception_subclass_of_exception" in schema and '"module"' in schema
    assert "exception_subclass_of_exception" in cypher and trace.data["constrained"] == "json_schema"
    assert AutofocusRetriever(kb, AutofocusConfig(query_format="typed")).step2_mode() == "grammar"  # local LM


def test_step1_combines_its_inputs_in_one_place(skb) -> None:
    class _KB:
        pass

    kb = _KB()
    kb.skb = skb
    program = AutofocusRetriever(kb, AutofocusConfig(target_type_inputs=["spelled"]))
    [named] = program.type_inputs("Which functions raise KeyError?")
    assert (named.name, named.weights, named.decisive) == ("spelled", {"function": 1.0}, True)
    assert program.type_inputs("What raises KeyError?") == []  # the question spells no label
    lm = TypeInput("lm", {"module": 0.1, "class": 0.2, "exception": 0.6, "function": 0.1})
    prior = TypeInput("prior", {"module": 0.1, "class": 0.1, "exception": 0.7, "function": 0.1})
    assert list(combine(TYPES, [lm, prior])) == ["exception", "class", "module", "function"]
    assert combine(TYPES, [lm, prior])["exception"] == pytest.approx(0.42 / 0.46)
    # the label the question spells comes first, level with the best: no prior overrules it
    combined = combine(TYPES, [lm, prior, named])
    assert list(combined)[:2] == ["function", "exception"] and combined["function"] == combined["exception"]
    assert kept(combined, 0.3, 2) == ["function", "exception"] and kept(combined, 0.3, 1) == ["function"]
    assert combine(["a", "b"], [TypeInput("x", {})]) == {"a": 0.5, "b": 0.5}  # nothing known: uniform


def test_step2_sees_the_same_frequent_triples_for_every_question_then_the_target_types_own() -> None:
    """A schema of many labels has hundreds of triples: step 2 is shown the most frequent ones within a
    budget that is the same for every question (a prompt prefix the LM server evaluates once), then the
    target type's own that are left, within a budget a small LM's context holds; a small schema, all."""
    from autofocus.program.steps.schema_context import (
        RELATIONSHIP_BUDGET_CHARS,
        SHARED_BUDGET_CHARS,
        SchemaContext,
    )

    rels = [f"(:t{i % 20})-[:rel{i}]->(:t{(i + 1) % 20})" for i in range(600)]
    context = SchemaContext("kb", [f"t{i}" for i in range(20)], rels, [], ["t7", "t3"])
    shown, other = context.relationships_for("t7"), context.relationships_for("t3")
    assert sum(len(r) + 2 for r in shown[:-1]) <= RELATIONSHIP_BUDGET_CHARS < sum(len(r) + 2 for r in rels)
    shared = [r for r in shown if r in other]
    assert shown[: len(shared)] == other[: len(shared)] == rels[: len(shared)]  # one prefix for both questions
    assert sum(len(r) + 2 for r in shared) <= SHARED_BUDGET_CHARS
    own = shown[len(shared) : -1]
    assert own and all("(:t7)" in r for r in own) and own == [r for r in rels if "(:t7)" in r and r not in shared][: len(own)]
    assert shown[-1] == f"... and {len(rels) - len(shown) + 1} rarer triples"
    assert context.query_inputs("q", "t7")["relationship_labels"] == shown
    small = SchemaContext("kb", ["a"], rels[:10], [], ["a"])
    assert small.relationships_for("a") == rels[:10]


@pytest.mark.parametrize(("settings", "kept", "left_out"), [
    ({}, ["kb_description", "type_descriptions", "e.g."], ["-[:"]),  # the default: no relationships
    ({"step1_type_parts": "full"}, ["kb_description", "type_descriptions", "e.g.", "-[:"], []),
    ({"step1_type_parts": "no_examples"}, ["type_descriptions", "-[:"], ["e.g."]),
    ({"step1_type_parts": "no_relations"}, ["type_descriptions", "e.g."], ["-[:"]),
    ({"step1_type_parts": "names"}, ["kb_description", "candidate_types"], ["type_descriptions", "e.g."]),
    ({"step1_kb_description": False}, ["type_descriptions"], ["kb_description"]),
])  # fmt: skip
def test_step1_prompt_parts_are_left_out_as_configured(skb, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                       settings: dict, kept: list[str], left_out: list[str]) -> None:
    """The switches that measure what each part of step 1's prompt buys: the part goes, the rest stays."""
    from tests.test_systems_common import make_kb

    seen = {}

    def fake(lm, messages, choices, **kwargs):
        seen["prompt"] = " ".join(m["content"] for m in messages)
        return [1.0 / len(choices)] * len(choices)

    monkeypatch.setattr(afr, "choice_probabilities", fake)
    program = AutofocusRetriever(make_kb(skb, tmp_path), AutofocusConfig().updated(settings))
    step1 = program.target_type
    step1.lm = dspy.LM("openai/m", api_base="http://127.0.0.1:1/v1", api_key="k")
    trace = Trace(question="Which errors does json.loads raise?")
    assert score_target_types(step1, program.context, trace.question, trace, threshold=0.3, most=2)
    assert all(part in seen["prompt"] for part in kept) and not any(part in seen["prompt"] for part in left_out)
    assert "json.loads raise" in seen["prompt"]
