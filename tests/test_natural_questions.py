"""Training questions that read like users': the LM writer (checks, cache, resume, malformed and failed
answers) with scripted LMs, the paraphrasing templates, and how ``adapt`` plans and splits its sources."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autofocus.adapt.questions import paraphrased_questions, plan
from autofocus.language import language
from autofocus.options import AdaptOptions, SynthOptions
from autofocus.skb.model import SKB
from autofocus.synthetic import synthesise
from autofocus.synthetic.clues import _content
from autofocus.synthetic.natural import NaturalWriter, choose_nodes, held_out, relation_lines
from autofocus.synthetic.paraphrase import Paraphraser, ParaphraseWriter, spells_label
from autofocus.synthetic.templates import TemplateWriter
from tests.skb_factory import make_skb
from tests.test_systems_common import ScriptedLM, field_value, make_kb

EN = language("en")
GRAPH_PAPER = 0  # "Graph Retrieval at Scale": Ada Lovelace wrote it, NeurIPS published it, its topic is IR


def good(user: str) -> dict[str, str]:
    """A writer that describes the node from its text and names the first related node it was shown."""
    related = field_value(user, "relations")
    name = re.findall(r"-> ([^\"\]\n,]+?)\"?(?:,|\]|$)", related)
    first = next((n.strip() for n in name if n.strip() != "this node"), "NeurIPS")
    text = field_value(user, "text").split()
    return {"textual": f"Which work is about {' '.join(text[2:7])}?",
            "hybrid": f"Which work tied to {first} is about {' '.join(text[2:5])}?",
            "relational": f"What is linked to {first}?"}


def test_the_writer_keeps_plain_questions_and_rejects_leaks_labels_and_unrelated_ones(tiny_skb: SKB, tmp_path: Path):
    def leaky(user: str) -> dict[str, str]:
        return {"textual": "Which paper studies retrieval over large knowledge graphs with typed edges?",
                "hybrid": "Is Graph Retrieval at Scale the NeurIPS paper on graphs?",  # names the answer
                "relational": "Which paper_has_topic_field paper is about Information Retrieval?"}  # a label

    lm = ScriptedLM({"textual": leaky})
    result = NaturalWriter(tiny_skb, lm=lm, path=tmp_path / "q.jsonl")([GRAPH_PAPER])
    assert [(q.kind, q.answer_ids, q.target_type, q.node) for q in result.questions] == [
        ("textual", (GRAPH_PAPER,), "paper", GRAPH_PAPER)]
    assert result.rejected == {"names the answer": 1, "spells a schema label": 1}
    record = json.loads((tmp_path / "q.jsonl").read_text().splitlines()[0])
    assert record["answers"] == leaky("")  # what the LM wrote is kept: the checks run when it is read

    off = ScriptedLM({"textual": lambda user: {**good(user), "textual": "What is a toy bibliography about?"}})
    about_kb = NaturalWriter(tiny_skb, lm=off, path=tmp_path / "o.jsonl")([GRAPH_PAPER])
    assert about_kb.rejected == {"says nothing the node's text says": 1}

    unrelated = ScriptedLM({"textual": lambda user: {**good(user), "relational": "Which paper cites Grace Hopper?"}})
    out = NaturalWriter(tiny_skb, lm=unrelated, path=tmp_path / "u.jsonl")([2])  # Grace Hopper is not shown for 2
    assert not any("Grace Hopper" in s.line for s in relation_lines(tiny_skb, 2)) and out.rejected == {"names no related node": 1}


def test_a_node_is_asked_once_and_an_interrupted_run_resumes_where_it_stopped(tiny_skb: SKB, tmp_path: Path):
    nodes = choose_nodes(tiny_skb, 4)
    path = tmp_path / "q.jsonl"

    class Interrupted(Exception):
        pass

    def stop_after_two(done: int, total: int) -> None:
        if done == 2:
            raise Interrupted  # the user pressed Ctrl-C after the second node was written

    first = ScriptedLM({"textual": good})
    with pytest.raises(Interrupted):
        NaturalWriter(tiny_skb, lm=first, path=path)(nodes, progress=stop_after_two)
    assert len(path.read_text().splitlines()) == 2
    with path.open("a") as fh:
        fh.write('{"node": ' + str(nodes[2]) + ', "questions": [')  # a line cut short by a killed process

    second = ScriptedLM({"textual": good})
    result = NaturalWriter(tiny_skb, lm=second, path=path)(nodes)
    assert len(second.calls) == 2 and result.cached == 2 and result.asked == 2  # the cut line is asked again
    assert {q.answer_ids[0] for q in result.questions} == set(nodes)

    def not_opened() -> Any:
        raise AssertionError("every node is cached: the LM (a server that takes minutes to start) is not opened")

    again = NaturalWriter(tiny_skb, lm=not_opened, name="scripted", path=path)(nodes)
    assert again.questions == result.questions and again.asked == 0


def test_a_malformed_answer_is_recorded_and_an_outage_is_asked_again(tiny_skb: SKB, tmp_path: Path):
    path = tmp_path / "q.jsonl"
    garbled = ScriptedLM({"textual": lambda user: {"reasoning": "I think the answer is a paper."}})
    result = NaturalWriter(tiny_skb, lm=garbled, path=path)([GRAPH_PAPER])
    assert result.questions == [] and result.rejected == {"malformed answer": 1}
    record = json.loads(path.read_text())
    assert "the answer is a paper" in record["malformed"]  # the LM's text, kept with the adapter's error
    assert any(e["kind"] == "llm_error" for e in record["events"])

    def down(user: str) -> dict[str, Any]:
        raise ConnectionError("connection refused")

    nodes = choose_nodes(tiny_skb, 5)
    out_path = tmp_path / "down.jsonl"
    stopped = NaturalWriter(tiny_skb, lm=ScriptedLM({"textual": down}), path=out_path)(nodes)
    assert stopped.stopped and "no answer 3 times" in stopped.stopped and stopped.asked == 3
    assert not out_path.exists() or out_path.read_text() == ""  # nothing written: every node is asked again
    back = ScriptedLM({"textual": good})
    assert NaturalWriter(tiny_skb, lm=back, path=out_path)(nodes).asked == len(nodes)


def test_the_judge_nodes_are_a_seeded_share_never_trained_on(tiny_skb: SKB):
    judge = held_out(tiny_skb.num_nodes, 0, 0.5)
    train = choose_nodes(tiny_skb, 10, exclude=judge)
    assert judge.any() and not judge[train].any()
    assert (held_out(tiny_skb.num_nodes, 0, 0.5) == judge).all()  # the same draw every time
    assert not judge[[q.node for q in paraphrased_questions(tiny_skb, 5, judge_share=0.5)]].any()


def test_the_plan_splits_the_questions_between_writers():
    assert plan(AdaptOptions(templates=600)) == {"patterns": 600, "textual": 0, "lm_nodes": 0}
    assert plan(AdaptOptions(templates=600, questions="paraphrase")) == {"patterns": 400, "textual": 200, "lm_nodes": 0}
    assert plan(AdaptOptions(templates=600, questions="mix", lm_share=0.5)) == {"patterns": 200, "textual": 100,
                                                                               "lm_nodes": 100}
    with pytest.raises(ValueError, match="unknown question source"):
        plan(AdaptOptions(templates=10, questions="poems"))


# --- paraphrasing templates ------------------------------------------------------------------------------

DOCS = [
    "kettle(x)\nA vessel that heats water quickly, patented as the Zorbulator model.",
    "A vessel for cooking food slowly.",
    "A vessel that heats milk.",
    "A tool that cuts paper.",
    "A tool that cuts wood.",
    "A kitchen in a house.",
]


def kitchen() -> SKB:
    return make_skb(["thing", "room"], [0, 0, 0, 0, 0, 1], [(0, "thing_found_in_room", 5), (1, "thing_found_in_room", 5)],
                    {"thing_found_in_room": ("thing", "room")},
                    names=["kettle", "slow cooker", "milk pan", "scissors", "saw", "kitchen"], docs=DOCS,
                    candidate_types=["thing"])


def test_a_clause_says_what_the_node_is_in_common_words_without_its_rarest_or_its_name():
    skb = kitchen()
    clause = Paraphraser(skb).clause(0)
    assert clause is not None and clause.startswith("a vessel that heats water")
    assert "Zorbulator" not in clause and "patented" in DOCS[0] and "kettle" not in clause  # rarest words, the name
    question = Paraphraser(skb).textual(0, np.random.default_rng(0))
    assert question is not None and "thing" in question and "kettle" not in question.lower()


def test_relationships_that_read_as_labels_are_written_as_plain_links(tiny_skb: SKB, tmp_path: Path):
    info = tiny_skb.schema.edge_types
    label = {rel: spells_label(rel, i.src_type, i.dst_type, EN) for rel, i in info.items()}
    assert label == {"author_writes_paper": False, "paper_cites_paper": False, "paper_extends_paper": False,
                     "paper_published_in_venue": False, "paper_has_topic_field": True}
    kb = make_kb(tiny_skb, tmp_path / "kb")
    plain = synthesise(kb, 12, SynthOptions(seed=0, writer="template", clue_kind="phrase"))
    paraphrased = synthesise(kb, 12, SynthOptions(seed=0, writer="paraphrase"))
    topical = [p.question for p in plain.pairs if "paper_has_topic_field" in p.pattern.edge_types]
    assert topical and all("has topic" in q for q in topical)  # the schema's words, which the paraphrase avoids
    rewritten = [p.question for p in paraphrased.pairs if "paper_has_topic_field" in p.pattern.edge_types]
    assert rewritten and not any("has topic" in q for q in rewritten)
    assert all(any(link in q for link in EN.paraphrase["link"]) for q in rewritten)
    writer = ParaphraseWriter(tiny_skb)
    assert isinstance(writer, TemplateWriter) and writer.clue_forms("paraphrase")


def test_a_paraphrase_clue_gives_the_answers_clause_not_its_rarest_phrase():
    skb = kitchen()
    node, clause = Paraphraser(skb).clue(np.array([0, 1]), ["kitchen"], np.random.default_rng(0))
    assert clause == Paraphraser(skb).clause(node)
    other = 1 - node
    assert not _content(clause) <= _content(skb.doc(other))  # it fits its answer only


def test_adapt_takes_a_mix_of_paraphrases_and_the_lms_questions_and_leaves_the_judge_out(two_type_skb: Path,
                                                                                         tmp_path: Path, monkeypatch):
    from autofocus import runtime
    from autofocus.adapt import questions
    from autofocus.config import AutofocusConfig
    from autofocus.evaluation.program_runs import load_split
    from autofocus.skb.skbdir import load_skb_dir

    kb = make_kb(load_skb_dir(two_type_skb, progress=False), tmp_path / "index", source=two_type_skb)
    monkeypatch.setattr(runtime, "open_kb", lambda *args, **kw: kb)
    lm = ScriptedLM({"textual": good})
    monkeypatch.setattr(questions, "lm_writer", lambda skb, cfg, spec, seed, threads: NaturalWriter(
        skb, lm=lm, seed=seed, path=tmp_path / "lm.jsonl"))
    options = AdaptOptions(templates=12, questions="mix", lm_share=0.5, judge_share=0.3)
    sources, items, record = questions.training_questions(two_type_skb, kb.skb, AutofocusConfig(), options,
                                                          tmp_path / "questions")
    assert record["plan"] == {"patterns": 4, "textual": 2, "lm_nodes": 2}
    assert [s for s, _ in sources] == ["synthetic"] and load_split(two_type_skb, "synthetic", kb.skb.num_nodes,
                                                                   qa_dir=sources[0][1])
    assert record["lm"]["asked"] == 2 and len(lm.calls) == 2
    judges = held_out(kb.skb.num_nodes, 0, 0.3)
    written_from = [q.node for q in questions.paraphrased_questions(kb.skb, 2, 0, 0.3)] + [
        int(json.loads(line)["node"]) for line in (tmp_path / "lm.jsonl").read_text().splitlines()]
    assert len(written_from) == 4 and not judges[written_from].any()  # no question is written from a judge's node
    assert len(items) > 4
    judge = questions.natural_questions(questions.lm_writer(kb.skb, None, None, 0, 1), 2, judge=True, judge_share=0.3)[0]
    assert judge and judges[[q.node for q in judge]].all()


def test_a_relational_question_is_answered_by_every_node_that_shares_the_named_relation(tiny_skb: SKB, tmp_path: Path):
    lm = ScriptedLM({"textual": lambda user: {**good(user), "relational": "Which papers appeared at NeurIPS?"}})
    result = NaturalWriter(tiny_skb, lm=lm, path=tmp_path / "q.jsonl")([GRAPH_PAPER])
    relational = [q for q in result.questions if q.kind == "relational"]
    assert [q.answer_ids for q in relational] == [(0, 2, 11)]  # NeurIPS published papers 0, 2 and 11
    assert all(q.answer_ids == (GRAPH_PAPER,) for q in result.questions if q.kind != "relational")
