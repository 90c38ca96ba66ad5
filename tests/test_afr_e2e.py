"""AF-Retriever end to end: the eight steps on a hand-made SKB with a scripted LM, what degrades (and
how it is recorded) when the LM answers badly, the paper's step ablations, and the same program behind
``autofocus ask`` / ``autofocus eval`` talking HTTP to a scripted OpenAI-compatible server."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dspy
import numpy as np
import pytest
from dspy.clients.cache import Cache
from typer.testing import CliRunner

from autofocus.cli import app
from autofocus.config import AutofocusConfig
from autofocus.kb import KnowledgeBase
from tests.fake_openai_server import FakeOpenAIServer, chat_adapter_reply, last_user_text
from tests.skb_factory import make_skb
from tests.test_systems_common import ScriptedLM, field_value, make_kb, run, scripted_config

STEPS = ["1_target_type", "2_query", "3_parse", "3_repair", "4_symbols", "5_grounding", "6_vss_grounded", "7_vss_rest", "8_rerank"]

# movies 0-5, people 6-8, genres 9-10; Mira Sol (6) acted in 0 and 2; movie 5 is a biopic *about* her
NAMES = ["Quiet Harbour", "Neon Circuit", "Paper Lanterns", "Iron Orchard", "Salt and Stone", "Mira Sol: A Life",
         "Mira Sol", "Tomas Reed", "Ines Vale", "drama", "thriller"]  # fmt: skip
DOCS = [
    "A drama about a fishing village waiting out a storm.", "A thriller about hackers in a city of lights.",
    "A drama about a lantern festival and a family.", "A war film about an orchard on a front line.",
    "A documentary about harvesting sea salt.", "A biopic of the actress Mira Sol and the movies she acted in.",
    "An actress known for quiet dramas.", "A director who also acts in thrillers.", "An actress.",
    "Films about emotional conflict.", "Films of suspense.",
]  # fmt: skip
MOVIES, PEOPLE = [0, 1, 2, 3, 4, 5], [6, 7, 8]
QUESTION = "Which movies did Mira Sol act in?"
# the NOT and the ORDER BY are what step 3 drops
CYPHER = ("MATCH (p:person {name: 'Mira Sol'})-[:acted_in]->(m:movie) WHERE NOT m.name CONTAINS 'Storm' "
          "RETURN m.name ORDER BY m.name")  # fmt: skip
SCORES = {2: 0.9, 0: 0.8}  # the scripted pointwise judge; every other candidate gets 0.1


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory) -> KnowledgeBase:
    skb = make_skb(
        ["movie", "person", "genre"], [0] * 6 + [1] * 3 + [2] * 2,
        [(6, "acted_in", 0), (6, "acted_in", 2), (7, "acted_in", 1), (8, "acted_in", 3), (8, "acted_in", 4),
         (7, "directed", 3), (7, "directed", 5), (0, "has_genre", 9), (2, "has_genre", 9), (1, "has_genre", 10),
         (3, "has_genre", 9), (5, "has_genre", 9)],
        {"acted_in": ("person", "movie"), "directed": ("person", "movie"), "has_genre": ("movie", "genre")},
        names=NAMES, docs=DOCS, candidate_types=["movie", "person"],
        description="Movies, the people in them and their genres.",
    )  # fmt: skip
    return make_kb(skb, tmp_path_factory.mktemp("kb"))


def candidate_ids(user: str, field: str) -> list[int]:
    return [int(x) for x in re.findall(r"^\[(\d+)\]", field_value(user, field), re.MULTILINE)]


def scripted(**overrides: Callable[[str], dict[str, Any]]) -> ScriptedLM:
    """An LM that answers every AF-Retriever signature well, unless a field's handler is overridden."""
    handlers: dict[str, Callable[[str], dict[str, Any]]] = {
        "target_type": lambda u: {"target_type": "movie"},
        "cypher": lambda u: {"cypher": CYPHER},
        "score": lambda u: {"score": SCORES.get(candidate_ids(u, "candidate")[0], 0.1)},
        "ranking": lambda u: {"ranking": candidate_ids(u, "candidates")[::-1]},
    }
    return ScriptedLM({**handlers, **overrides})


def by_score(kb: KnowledgeBase, variant: str, ids: list[int], question: str = QUESTION) -> list[int]:
    """``ids`` best first by the index's similarity to the question (ties by id), as steps 6/7 rank."""
    arr = np.asarray(ids)
    scores = kb.index(variant).scores(kb.embed_query(question), arr)
    return arr[np.lexsort((arr, -scores))].tolist()


def strands(pred: dspy.Prediction) -> list[str]:
    return [pred.trace.data["strand"][str(i)] for i in pred.ranked_ids]


def events(pred: dspy.Prediction) -> list[tuple[str, str]]:
    return [(e.step, e.kind) for e in pred.trace.events]


def retrieval_order(kb: KnowledgeBase) -> list[int]:
    """Steps 6-7 with k = 4 and alpha = 2/3: three grounded slots, then the best other movie."""
    return by_score(kb, "text", [0, 2, 3, 4])[:3] + by_score(kb, "text+rel", [1, 5])[:1]


def test_all_eight_steps_ground_the_answers_and_trace_every_step(kb: KnowledgeBase) -> None:
    lm = scripted()
    pred = run("afr:reranker=pointwise", kb, lm, QUESTION, config4())
    tr = pred.trace
    # step 1 chose among the candidate types; step 2 was told its choice
    assert lm.fields() == ["target_type", "cypher"] + ["score"] * 4
    assert "movie" in field_value(lm.calls[0][1], "candidate_types") and "person" in field_value(
        lm.calls[0][1], "candidate_types"
    )
    assert tr.data["target_type"] == "movie" and field_value(lm.calls[1][1], "target_type") == "movie"
    # step 3 kept the pattern and recorded what it dropped
    assert tr.data["cypher"] == CYPHER and tr.data["cypher_target_type"] == "movie"
    dropped = [e.detail for e in tr.events if (e.step, e.kind) == ("3_parse", "dropped")]
    assert len(dropped) == 2 and dropped[0].startswith("NOT m.name CONTAINS 'Storm'") and "ORDER BY" in dropped[1]
    assert events(pred) == [("3_parse", "dropped")] * 2
    # step 4 found the constant; step 5 widened it (l = 1, 2) until k = 4 answers: Ines Vale (8) is next best
    assert tr.data["symbol_candidates"]["p"]["search"] == "Mira Sol" and tr.data["symbol_candidates"]["p"]["ids"][0] == 6
    assert [(r["cut"], r["num_target"]) for r in tr.data["grounding_rounds"]] == [(1, 2), (2, 4)]
    assert tr.data["grounded_ids"].tolist() == [0, 2, 3, 4]
    # steps 6-7 and the merge; step 8 sorted by the scripted scores (ties keep the retrieval order)
    pre = retrieval_order(kb)
    assert tr.data["pre_rerank"] == pre and [tr.data["strand"][str(i)] for i in pre] == ["grounded"] * 3 + ["vss"]
    assert pred.ranked_ids == sorted(pre, key=lambda i: (-SCORES.get(i, 0.1), pre.index(i)))
    assert pred.ranked_ids[:2] == [2, 0] and strands(pred)[:2] == ["grounded", "grounded"]
    assert tr.data["rerank"]["method"] == "pointwise" and tr.data["rerank"]["input"] == pre
    assert tr.data["support"]["2"] == [[("m", 2, "acted_in", 6)]] and tr.data["support"]["0"] == [[("m", 0, "acted_in", 6)]]
    # every step timed, LM calls and tokens where the LM was asked
    assert list(tr.steps) == STEPS and all(s.seconds > 0 for s in tr.steps.values())
    assert [tr.steps[s].lm_calls for s in STEPS] == [1, 1, 0, 0, 0, 0, 0, 0, 4]
    assert all(tr.steps[s].input_tokens > 0 for s in ("1_target_type", "2_query", "8_rerank"))
    assert tr.flags == {"valid_cypher": True, "has_triplet": True, "has_constant": True, "repaired": False,
                        "grounded_nonempty": True}


def test_listwise_reranking_takes_the_lms_order(kb: KnowledgeBase) -> None:
    lm = scripted()
    pred = run("afr:reranker=listwise", kb, lm, QUESTION, config4())
    assert lm.fields() == ["target_type", "cypher", "ranking"]
    assert pred.ranked_ids == retrieval_order(kb)[::-1] and pred.trace.steps["8_rerank"].lm_calls == 1
    assert pred.trace.data["rerank"]["fixed"] == {"unknown": 0, "duplicate": 0, "missing": 0}


def test_a_target_type_in_prose_is_salvaged(kb: KnowledgeBase) -> None:
    lm = scripted(target_type=lambda u: {"target_type": "Movies, I think"})
    pred = run("afr:reranker=none", kb, lm, QUESTION, config4())
    assert pred.trace.data["target_type"] == "movie" and field_value(lm.calls[-1][1], "target_type") == "movie"
    assert events(pred)[:2] == [("1_target_type", "llm_error"), ("1_target_type", "salvaged")]
    assert pred.trace.steps["1_target_type"].lm_calls == lm.fields().count("target_type") >= 1  # adapter retries count
    assert pred.ranked_ids == retrieval_order(kb)


def test_an_unusable_target_type_searches_every_candidate_type(kb: KnowledgeBase) -> None:
    lm = scripted(target_type=lambda u: {"target_type": "banana"})
    pred = run("afr:reranker=none", kb, lm, QUESTION, config4())
    assert pred.trace.data["target_type"] is None and ("1_target_type", "invalid") in events(pred)
    assert field_value(lm.calls[-1][1], "target_type") == "any"
    # grounding still works (the Cypher names its own types); the VSS slot may now hold a person
    assert pred.ranked_ids[:3] == by_score(kb, "text", [0, 2, 3, 4])[:3]
    assert pred.ranked_ids[3:] == by_score(kb, "text+rel", [1, 5, *PEOPLE])[:1]


def config4() -> AutofocusConfig:
    """k = 4 and the paper's scope expansion past a constant's exact name, which these cases follow."""
    return scripted_config(k=4, exact_name_only=False)


def test_step8_sees_the_path_that_grounded_a_candidate_when_asked(kb: KnowledgeBase) -> None:
    """``rerank_evidence``: a grounded candidate's description names the edge that satisfied the query
    (the judge cannot see a multi-hop fact in the candidate's own relations); VSS candidates have none."""
    prompts: dict[bool, dict[int, str]] = {}
    for on in (False, True):
        lm = scripted()
        pred = run("afr:reranker=pointwise", kb, lm, QUESTION, config4().updated({"rerank_evidence": on}))
        prompts[on] = {candidate_ids(u, "candidate")[0]: u for f, u, _ in lm.calls if f == "score"}
        assert set(prompts[on]) == set(pred.trace.data["pre_rerank"])
    grounded = [int(i) for i, s in pred.trace.data["strand"].items() if s == "grounded"]
    assert sorted(grounded) == [0, 2, 4]
    via = {0: "Mira Sol", 2: "Mira Sol", 4: "Ines Vale"}  # 4 came with the scope expansion (l = 2)
    for node, prompt in prompts[True].items():
        line = f"matches the question's graph query: {kb.skb.name(node)} -[acted_in]- {via.get(node)}"
        assert (line in prompt) == (node in grounded), (node, prompt)
        assert "graph query" not in prompts[False][node]


def test_an_exact_name_is_the_constant_unless_relaxed(kb: KnowledgeBase) -> None:
    pred = run("afr:reranker=none", kb, scripted(), QUESTION, scripted_config(k=4))
    tr = pred.trace
    assert tr.data["symbol_candidates"]["p"]["ids"] == [6]  # Mira Sol alone: no name-similar people
    assert [(r["cut"], r["num_target"]) for r in tr.data["grounding_rounds"]] == [(1, 2)]
    assert tr.data["grounded_ids"].tolist() == [0, 2] and strands(pred)[:2] == ["grounded", "grounded"]


def raise_503(user: str) -> dict[str, Any]:
    raise RuntimeError("server said 503")


@pytest.mark.parametrize(
    ("answer", "event"),
    [({"cypher": lambda u: {"cypher": "Sorry, I cannot write that query."}}, ("3_parse", "dropped")),
     ({"cypher": raise_503}, ("2_query", "llm_error"))],
    ids=["prose", "lm-error"],
)  # fmt: skip
def test_no_usable_cypher_falls_back_to_vss(kb: KnowledgeBase, answer: dict[str, Any], event: tuple[str, str]) -> None:
    pred = run("afr:reranker=none", kb, scripted(**answer), QUESTION, config4())
    assert event in events(pred) and pred.trace.flags["valid_cypher"] is False
    assert pred.ranked_ids == by_score(kb, "text+rel", MOVIES)[:4] and strands(pred) == ["vss"] * 4
    assert "4_symbols" not in pred.trace.steps and "5_grounding" not in pred.trace.steps


@pytest.mark.parametrize(
    ("reranker", "answer", "kind"),
    [("listwise", {"ranking": lambda u: {"ranking": "the first one is best"}}, "unparsable_ranking"),
     ("pointwise", {"score": lambda u: {"score": "very high"}}, "neutral_score")],
)  # fmt: skip
def test_malformed_rerank_output_keeps_the_retrieval_order(
    kb: KnowledgeBase, reranker: str, answer: dict[str, Any], kind: str
) -> None:
    pred = run(f"afr:reranker={reranker}", kb, scripted(**answer), QUESTION, config4())
    assert pred.ranked_ids == pred.trace.data["pre_rerank"] == retrieval_order(kb)
    assert ("8_rerank", "llm_error") in events(pred) and ("8_rerank", kind) in events(pred)


@pytest.mark.parametrize("steps", ["1+7", "1-5", "1-6", "1-7"])
def test_step_ablations_give_their_strands(kb: KnowledgeBase, steps: str) -> None:
    lm = scripted()
    pred = run(f"afr-steps{steps}", kb, lm, QUESTION, config4())
    expected = {
        "1+7": (by_score(kb, "text+rel", MOVIES)[:4], ["vss"] * 4, ["1_target_type", "7_vss_rest"]),
        "1-5": ([0, 2, 3, 4], ["grounded"] * 4, STEPS[:7]),  # grounding order: round, then id
        "1-6": (by_score(kb, "text", [0, 2, 3, 4])[:3], ["grounded"] * 3, STEPS[:7]),
        "1-7": (retrieval_order(kb), ["grounded"] * 3 + ["vss"], STEPS[:8]),
    }[steps]
    assert (pred.ranked_ids, strands(pred), list(pred.trace.steps)) == expected
    assert lm.fields() == (["target_type"] if steps == "1+7" else ["target_type", "cypher"])


# --- the CLI, with an OpenAI-compatible server scripted over HTTP ---------------------------------------

CLI_CYPHER = {
    "Which papers by Ada Lovelace were published at NeurIPS?": "MATCH (a:author {name: 'Ada Lovelace'})"
    "-[:author_writes_paper]->(p:paper)-[:paper_published_in_venue]->(v:venue {name: 'NeurIPS'}) RETURN p.title",
    "Which papers cite Graph Retrieval at Scale?": "MATCH (p:paper)-[:paper_cites_paper]->"
    "(g:paper {name: 'Graph Retrieval at Scale'}) RETURN p.title",
    "Which Natural Language Processing papers appeared after 2020?": "MATCH (p:paper)-[:paper_has_topic_field]->"
    "(f:field {name: 'Natural Language Processing'}) WHERE p.year > 2020 RETURN p.title",
}


def server_field(body: dict[str, Any], name: str) -> str:
    return field_value(last_user_text(body), name).split("\n\nRespond with")[0].strip()


def serve(body: dict[str, Any]) -> str:
    """Step 1 says paper, step 2 writes the question's Cypher, step 8 keeps the order it was given."""
    outputs = body["messages"][0]["content"].split("Your output fields are:")[1]
    if "`target_type`" in outputs:
        return chat_adapter_reply(target_type="paper")
    if "`cypher`" in outputs:
        return chat_adapter_reply(cypher=CLI_CYPHER[server_field(body, "question")])
    if "`ranking`" in outputs:
        ids = re.findall(r"^\[(\d+)\]", server_field(body, "candidates"), re.MULTILINE)
        return chat_adapter_reply(ranking=[int(i) for i in ids])
    raise AssertionError(f"unexpected signature: {outputs[:200]}")


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAIServer]:
    monkeypatch.setattr(dspy, "cache", Cache(False, False, "", 0, 0), raising=False)  # every call reaches the server
    with FakeOpenAIServer(serve) as srv:
        monkeypatch.setenv("AUTOFOCUS_LM_API_BASE", srv.api_base)
        monkeypatch.setenv("AUTOFOCUS_LM_API_KEY", "test-key")
        yield srv


def test_ask_and_eval_run_afr_through_the_cli_against_an_openai_server(
    server: FakeOpenAIServer, two_type_skb: Path, tmp_path: Path
) -> None:
    cli = CliRunner()
    trace_file = tmp_path / "trace.json"
    res = cli.invoke(app, ["ask", "Which papers by Ada Lovelace were published at NeurIPS?", "--skb", str(two_type_skb),
                           "--system", "afr", "--lm", "openai/fake-model", "-k", "4", "--trace",
                           "--trace-json", str(trace_file)], terminal_width=200)  # fmt: skip
    assert res.exit_code == 0, res.output
    assert re.search(r"│ 1\s+│ 0\s+│ paper │ Graph Retrieval at Scale\s+│ grounded", res.output)
    assert "triplet: (a)-[author_writes_paper]->(p)" in res.output  # relation names are not read as markup
    assert "order: grounded first: the query's constants are names the question gives" in res.output
    assert [b["model"] for b in server.requests] == ["fake-model"] * 3  # target type, Cypher, listwise rerank
    assert server_field(server.requests[1], "target_type") == "paper"
    trace = json.loads(trace_file.read_text())
    assert [trace["steps"][s]["lm_calls"] for s in STEPS] == [1, 1, 0, 0, 0, 0, 0, 0, 1]
    assert trace["data"]["rerank"]["method"] == "listwise" and trace["data"]["strand"]["11"] == "grounded"
    # the numpy grounded set as a JSON list: Ada Lovelace's papers (her exact name is the constant, no expansion)
    assert trace["data"]["grounded_ids"] == [0, 11]

    out = tmp_path / "run"
    res = cli.invoke(app, ["eval", "--skb", str(two_type_skb), "--split", "train", "--out", str(out), "--system", "afr",
                           "--lm", "openai/fake-model", "--concurrency", "1", "--no-progress"], terminal_width=200)  # fmt: skip
    assert res.exit_code == 0, res.output
    records = [json.loads(line) for line in (out / "traces.jsonl").read_text().splitlines()]
    assert len(records) == 3 and {r["status"] for r in records} == {"ok"}
    for r in records:  # each question's first answer is a gold one, from the grounded strand
        assert r["ranked"][0] in r["gold"] and r["trace"]["data"]["strand"][str(r["ranked"][0])] == "grounded"
        assert r["trace"]["flags"]["grounded_nonempty"] and r["derived"]["gold_in_grounded"]
    assert json.loads((out / "summary.json").read_text())["metrics"]["hit@1"]["mean"] == 1.0
    assert json.loads((out / "manifest.json").read_text())["config"]["runtime"]["lm"]["default"] == "openai/fake-model"
    assert len(server.requests) == 3 + 3 * 3


def test_target_type_salvage_ignores_dspy_field_markers() -> None:
    from autofocus.program.systems.afr import closest_type

    assert closest_type("[[ ## target_type ## ]]\ndrug", ["target", "drug"]) == "drug"
    assert closest_type("drug", ["target", "drug"]) == "drug"


def test_ask_runs_steps_3_to_8_on_a_given_query(server: FakeOpenAIServer, two_type_skb: Path) -> None:
    res = CliRunner().invoke(app, [
        "ask", "Which papers did Ada Lovelace write?", "--skb", str(two_type_skb), "--system", "afr:reranker=none",
        "--lm", "openai/fake-model", "-k", "4", "--trace",
        "--query", 'MATCH (p:paper)<-[:writes]-(a:author {name: "Ada Lovelace"}) RETURN p',
    ], terminal_width=200)  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "given (a recorded run or ask --query)" in res.output and "grounded" in res.output
    outputs = [b["messages"][0]["content"].split("Your output fields are:")[1] for b in server.requests]
    assert len(outputs) == 1 and "`target_type`" in outputs[0]  # step 1 asked, step 2 not


def test_step_1s_plausible_types_reach_step_3b_and_a_replay_keeps_them(tmp_path: Path) -> None:
    from autofocus.evaluation.program_runs import recorded_llm_steps
    from autofocus.program.systems.afr import plausible_types
    from autofocus.trace import Trace

    probs = {"location": 0.78, "natural_object": 0.2, "plant": 0.004}
    trace = Trace(question="Which rivers run through Minnesota?")
    trace.data["target_type_probs"] = probs
    assert plausible_types(["location"], trace, AutofocusConfig().query.class_type_floor) == ["location", "natural_object"]
    assert plausible_types(["location"], trace, AutofocusConfig(class_type_floor=1.0).query.class_type_floor) == ["location"]
    assert plausible_types(["location"], Trace(question="q"), AutofocusConfig().query.class_type_floor) == ["location"]  # step 1 generated
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    data = {"target_type": "location", "cypher": "MATCH (y:location) RETURN y", "target_type_probs": probs}
    lines = [{"id": 0, "status": "ok", "query": trace.question, "trace": {"data": data}},
             {"id": 1, "status": "ok", "query": "generated", "trace": {"data": {**data, "target_type_probs": None}}}]
    (run_dir / "traces.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert recorded_llm_steps(run_dir) == {trace.question: ("location", data["cypher"], probs),
                                           "generated": ("location", data["cypher"], None)}


def test_eval_replays_a_runs_step_1_2_outputs_without_asking_the_lm(
    server: FakeOpenAIServer, two_type_skb: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autofocus import runtime
    from autofocus.skb.skbdir import load_skb_dir

    kb = make_kb(load_skb_dir(two_type_skb, progress=False), tmp_path / "kb", source=two_type_skb)
    monkeypatch.setattr(runtime, "open_kb", lambda *args, **kw: kb)  # the real KB with a cheap embedder

    def evaluate(out: Path, *extra: str) -> Any:
        return CliRunner().invoke(app, [
            "eval", "--skb", str(two_type_skb), "--split", "train", "--out", str(out), "--lm", "openai/fake-model",
            "--concurrency", "1", "--no-progress", *extra], terminal_width=200)  # fmt: skip

    first = tmp_path / "first"
    assert evaluate(first, "--system", "afr:steps=1-7").exit_code == 0
    asked = len(server.requests)
    from autofocus.program.systems import registry

    attached: list[str] = []
    monkeypatch.setattr(registry, "apply_lms", lambda program, cfg: attached.append(cfg.steps))
    res = evaluate(tmp_path / "replayed", "--system", "afr:steps=1-7,k=2", "--replay", str(first))
    assert res.exit_code == 0, res.output
    assert len(server.requests) == asked  # steps 1-2 came from the first run
    assert attached == []  # and no LM was attached: a replay without step 8 starts no offline LM server
    for line in (tmp_path / "replayed" / "traces.jsonl").read_text().splitlines():
        record = json.loads(line)
        assert record["status"] == "ok" and len(record["ranked"]) == 2 and record["ranked"][0] in record["gold"]
        assert ("2_query", "replayed") in {(e["step"], e["kind"]) for e in record["trace"]["events"]}

    lines = (first / "traces.jsonl").read_text().splitlines(keepends=True)
    (first / "traces.jsonl").write_text("".join([lines[0], "garbage\n", *lines[1:]]))
    for extra, message in (
        (("--system", "afr", "--replay", str(first)), "traces.jsonl:2: not a valid JSON trace line"),
        (("--system", "afr", "--replay", str(tmp_path)), "no traces.jsonl to replay"),
        (("--system", "vss", "--replay", str(first)), "replaying step 1-2 outputs needs a program with steps 1-2"),
    ):
        res = evaluate(tmp_path / "refused", *extra)
        assert res.exit_code == 1 and isinstance(res.exception, SystemExit), res.output
        assert re.sub(r"\s+", "", message) in re.sub(r"\s+", "", res.output), res.output  # however it wrapped
    assert (first / "traces.jsonl").read_text().count("garbage") == 1  # a replayed run is read, never repaired


def test_the_score_merge_orders_both_strands_by_similarity_with_a_bonus_for_grounded(kb: KnowledgeBase) -> None:
    """``merge_rule: score``: the same k candidates as the block merge, ordered together on step 7's
    similarity scale; a grounded candidate gains ``grounded_bonus`` (a huge one is the paper's block order)."""
    block = run("afr:reranker=none", kb, scripted(), QUESTION, scripted_config(k=4, merge_rule="block"))
    grounded = [i for i in block.ranked_ids if block.trace.data["strand"][str(i)] == "grounded"]
    assert sorted(grounded) == [0, 2] and "merge" not in block.trace.data
    for bonus, expected in ((0.0, by_score(kb, "text+rel", block.ranked_ids)), (2.0, block.ranked_ids)):
        cfg = scripted_config(k=4, merge_rule="score", grounded_bonus=bonus)
        pred = run("afr:reranker=none", kb, scripted(), QUESTION, cfg)
        assert pred.ranked_ids == expected and pred.trace.data["merge"]["grounded_bonus"] == bonus
        assert strands(pred) == [block.trace.data["strand"][str(i)] for i in expected]


def test_the_evidence_merge_keeps_the_block_only_for_names_the_question_gives(kb: KnowledgeBase) -> None:
    """``merge_rule: evidence``: a query whose constants are names the question gives (and that name nodes)
    keeps the paper's block order; one the question supports only in part ("Sol" for "Mira Sol")
    competes on similarity with ``grounded_bonus``."""
    cfg = scripted_config(k=4, merge_rule="evidence", grounded_bonus=0.0)
    partly = "Which movies did Sol act in?"
    for question, strong in ((QUESTION, True), (partly, False)):
        block = run("afr:reranker=none", kb, scripted(), question, scripted_config(k=4, merge_rule="block"))
        pred = run("afr:reranker=none", kb, scripted(), question, cfg)
        assert sorted(pred.trace.data["grounded_ids"].tolist()) == [0, 2]
        assert pred.trace.data["merge"] == {"order": "block" if strong else "score", "strong_evidence": strong,
                                            "grounded_bonus": None if strong else 0.0}
        similarity = by_score(kb, "text+rel", block.ranked_ids, question)
        assert pred.ranked_ids == (block.ranked_ids if strong else similarity)
    assert block.ranked_ids != similarity  # the partly named question: the two orders differ


def test_merge_with_a_bonus_lets_a_much_closer_vss_hit_pass_grounded_ones() -> None:
    from autofocus.program.steps.vss import merge

    scores = {1: 0.2, 2: 0.5, 3: 0.6, 4: 0.1, 5: 0.05}
    assert merge([1, 2], [3, 4, 5], 4, scores).ids == [1, 2, 3, 4]  # the paper's block order
    assert merge([1, 2], [3, 4, 5], 4, scores, bonus=0.05).ids == [3, 2, 1, 4]
    assert merge([1, 2], [3, 4, 5], 4, scores, bonus=2.0).ids == [2, 1, 3, 4]
    assert merge([1, 2], [3, 4, 5], 4, scores, bonus=0.05).strand == {1: "grounded", 2: "grounded", 3: "vss", 4: "vss"}


def test_the_rrf_merge_fuses_the_similarity_order_with_the_grounded_order() -> None:
    from autofocus.program.steps.vss import merge

    scores = {1: 0.2, 2: 0.5, 3: 0.6, 4: 0.55, 5: 0.4}  # by similarity 3, 4, 2, 5, 1; 1 below VSS's last hit
    # 2, grounded and close, leads; 1, grounded but farther than anything VSS found, ties VSS's first hit
    assert merge([1, 2], [3, 4, 5], 5, scores, rrf_weight=1.0).ids == [2, 1, 3, 4, 5]
    # less evidence, less weight: the graph-only candidate falls behind VSS's hits
    assert merge([1, 2], [3, 4, 5], 5, scores, rrf_weight=0.5).ids == [2, 3, 4, 5, 1]
    assert merge([1, 2], [3, 4, 5], 5, scores, rrf_weight=0.0).ids == [3, 4, 2, 5, 1]  # similarity alone
    fused = merge([1, 2], [3, 4, 5], 5, scores, bonus=2.0, rrf_weight=0.5)  # rrf over a score bonus
    assert fused.ids == [2, 3, 4, 5, 1] and fused.strand == {1: "grounded", 2: "grounded", 3: "vss", 4: "vss", 5: "vss"}


def test_step8_can_keep_a_block_of_strong_evidence_first(kb: KnowledgeBase) -> None:
    """``rerank_keep_block``: where the merge kept the grounded block (the query's constant is a name the
    question gives), the judge reorders inside the block and inside the rest, not across them."""
    prefers_vss = scripted(score=lambda u: {"score": {3: 0.95, 2: 0.9, 0: 0.8}.get(candidate_ids(u, "candidate")[0], 0.1)})
    orders = {}
    for keep in (False, True):
        cfg = scripted_config(k=4, rerank_keep_block=keep)
        pred = run("afr:reranker=pointwise", kb, prefers_vss, QUESTION, cfg)
        assert pred.trace.data["merge"]["order"] == "block"
        orders[keep] = pred.ranked_ids
    assert orders[False][:3] == [3, 2, 0] and orders[True][:3] == [2, 0, 3]
    assert pred.trace.data["rerank"]["block_kept"] == 2
    weak = run("afr:reranker=pointwise", kb, prefers_vss, "Which movies did Sol act in?", cfg)
    assert weak.ranked_ids[0] == 3 and "block_kept" not in weak.trace.data["rerank"]  # weak evidence: the judge decides


def test_a_candidate_the_question_names_goes_last(kb: KnowledgeBase) -> None:
    """The question starts from Quiet Harbour; it is one of Mira Sol's movies, but not what is asked."""
    question = "Which movies like Quiet Harbour did Mira Sol act in?"
    orders = {}
    for on in (True, False):
        pred = run("afr:steps=1-7", kb, scripted(), question, scripted_config(k=4, named_last=on))
        orders[on] = pred.ranked_ids
    assert 0 in orders[False][:-1] and orders[True] == [i for i in orders[False] if i != 0] + [0]
    assert pred.trace.data.get("named_last") is None
    pred = run("afr:reranker=pointwise", kb, scripted(), question, scripted_config(k=4))
    assert pred.trace.data["named_last"] == [0] and pred.ranked_ids[-1] == 0  # the judge (0.8 for it) keeps it last


def test_a_name_counts_as_given_only_whole_and_as_written() -> None:
    from autofocus.language import language
    from autofocus.program.steps.reading import QuestionReading
    from autofocus.program.steps.vss import named_in_question as named_in

    skb = make_skb(["class"], [0] * 6, [], {}, names=["queue.SimpleQueue", "queue.SimpleQueue.put", "os", "Event",
                                                        "Ascii", "jsonschema"])  # fmt: skip
    ids = list(range(6))

    def named_in_question(skb, ids, question):
        return named_in(skb, ids, QuestionReading(question, skb, language("en")))

    assert named_in_question(skb, ids, "What depends on jsonschema-specifications?") == set()  # a longer name
    assert named_in_question(skb, ids, "What depends on jsonschema, or on json-jsonschema?") == {5}
    assert named_in_question(skb, ids, "Which class defines queue.SimpleQueue.put?") == {1}  # not its prefix
    assert named_in_question(skb, ids, "What subclasses queue.SimpleQueue?") == {0}
    assert named_in_question(skb, ids, "Which functions in os and which Event?") == {3}  # "os": too short
    assert named_in_question(skb, ids, "What prints non-ASCII text? Which event fires?") == set()  # case counts
