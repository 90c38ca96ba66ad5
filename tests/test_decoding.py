"""Grammar-constrained greedy decoding beside llama-server (``autofocus.local_lm.decoding``), against the fake
server with a toy tokenizer: the forced tokens are appended without a request, each free token is the
likeliest the grammar allows, and calls that cannot be decoded here go to the server's own path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dspy
import pytest
from llguidance import LLTokenizer, TokenizerWrapper

from autofocus.local_lm import decoding, servers
from autofocus.local_lm.server import LocalServer
from autofocus.program.steps.constrain import grammar_config
from autofocus.program.steps.llm_call import ServerChatAdapter
from autofocus.usage import usage_scope
from tests.fake_openai_server import FakeOpenAIServer

GRAMMAR = 'root ::= "(y:" label ")-[:likes]->(b:" label ")"\nlabel ::= "cat" | "dog" | "bird"\n'
PIECES = ["<eos>", "(y:", ")-[:", "likes", "]->(b:", ")", "cat", "dog", "bird", "fish", "ird",
          *[chr(c) for c in range(32, 127)]]  # fmt: skip
FAVOURITE = "(y:fish)-[:likes]->(b:dog)"  # what the toy LM would write without the grammar
SECOND = "(y:bird)-[:likes]->(b:dog)"


class _Toy:
    """A tokenizer of ``PIECES`` (longest piece first) for llguidance."""

    def __init__(self) -> None:
        self.eos_token_id, self.bos_token_id, self.special_token_ids = 0, None, [0]
        self.tokens = [b"\xff<eos>", *(p.encode() for p in PIECES[1:])]

    def __call__(self, text: bytes) -> list[int]:
        out, i = [], 0
        while i < len(text):
            best = max((t for t in range(1, len(self.tokens)) if text.startswith(self.tokens[t], i)),
                       key=lambda t: len(self.tokens[t]))
            out.append(best)
            i += len(self.tokens[best])
        return out


TOY = LLTokenizer(TokenizerWrapper(_Toy()))


def _logprob(messages: list[dict[str, Any]], text: str) -> float:
    """The toy LM: its favourite answer, then the second, then anything else."""
    if FAVOURITE.startswith(text):
        return -0.1 * len(text)
    if SECOND.startswith(text):
        return -1.0 - 0.1 * len(text)
    return -20.0 - len(text)


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeOpenAIServer, LocalServer, dspy.LM]]:
    def chat(body: dict[str, Any]) -> str:  # the server's own grammar path
        return "(y:cat)-[:likes]->(b:cat)"

    with FakeOpenAIServer(chat, choice_logprobs=_logprob, vocab=PIECES) as fake:
        srv = LocalServer.attach(fake.base_url, tmp_path / "toy.gguf", "toy")
        monkeypatch.setitem(servers._SERVERS, srv.model_path, srv)
        monkeypatch.setattr(decoding, "model_tokenizer", lambda path: TOY)
        lm = dspy.LM("openai/toy", api_base=srv.api_base, api_key="local", temperature=0.0, max_tokens=64, cache=False)
        yield fake, srv, lm


def _completions(fake: FakeOpenAIServer) -> list[dict[str, Any]]:
    return [r for r, p in zip(fake.requests, fake.paths, strict=True) if p == "/completion"]


def test_forced_tokens_are_appended_and_each_choice_is_the_likeliest_allowed(toy) -> None:
    fake, srv, _ = toy
    prompt = srv.post("apply-template", {"messages": [{"role": "user", "content": "Who likes whom?"}]}, 10)["prompt"]
    out = decoding.decode(srv, TOY, prompt, GRAMMAR, max_tokens=64)
    # "fish" is the LM's first choice but no label: the likeliest allowed start is the second answer's "b";
    # "ird)-[:likes]->(b:" is then forced, and after "d" so is "og)", and the grammar ends
    assert out.text == SECOND
    asked = _completions(fake)
    assert len(asked) == 2 and out.forced == out.tokens - 2
    assert [TOY.decode_str(r["prompt"][1:]) for r in asked] == ["(y:", "(y:bird)-[:likes]->(b:"]
    assert all(r["id_slot"] == asked[0]["id_slot"] and r["n_predict"] == 1 for r in asked)


def test_a_stop_string_cuts_the_answer_before_it(toy) -> None:
    _, srv, _ = toy
    prompt = srv.post("apply-template", {"messages": [{"role": "user", "content": "Who?"}]}, 10)["prompt"]
    assert decoding.decode(srv, TOY, prompt, GRAMMAR, max_tokens=64, stop=["-[:"]).text == "(y:bird)"
    assert decoding.decode(srv, TOY, prompt, GRAMMAR, max_tokens=3).tokens == 3


def test_no_allowed_token_among_the_reported_ones_lets_the_server_choose_among_the_allowed(toy, monkeypatch) -> None:
    fake, srv, _ = toy
    monkeypatch.setattr(decoding, "TOP_PROBS", 1)  # only "f" of "fish" reported
    prompt = srv.post("apply-template", {"messages": [{"role": "user", "content": "Who?"}]}, 10)["prompt"]
    assert decoding.decode(srv, TOY, prompt, GRAMMAR, max_tokens=64).text == SECOND
    grammars = [r["grammar"] for r in _completions(fake) if "grammar" in r]
    # the first label's: "f" is no label's start; the second label's "d" was reported and allowed
    assert grammars == ["root ::= " + " | ".join(f"<[{TOY.tokenize_str(t)[0]}]>" for t in ("cat", "dog", "bird", "b", "c", "d"))]


def test_a_greedy_grammar_call_of_the_adapter_is_decoded_here(toy) -> None:
    fake, _, lm = toy
    predict = dspy.Predict("question -> cypher")
    with dspy.context(lm=lm, adapter=ServerChatAdapter()), usage_scope() as usage:
        pred = predict(question="Who likes whom?", config=grammar_config(GRAMMAR))
    assert pred.cypher == SECOND and "/v1/chat/completions" not in fake.paths
    first = _completions(fake)[0]
    assert first["prompt"][0].endswith("[[ ## cypher ## ]]\n")  # the prompt ends with the answer's given header
    # one call; its tokens "(y:" "b" "ird" ")-[:" "likes" "]->(b:" "d" "o" "g" ")", two of them chosen
    assert (usage.calls, usage.output_tokens) == (1, 10) and len(_completions(fake)) == 2
    # generate: llama-server decodes every token (its own grammar path)
    lm.forced_tokens = "generate"
    with dspy.context(lm=lm, adapter=ServerChatAdapter()):
        assert predict(question="Who likes whom?", config=grammar_config(GRAMMAR)).cypher == "(y:cat)-[:likes]->(b:cat)"
    lm.forced_tokens = "skip"
    # sampling, no grammar, or a grammar that does not convert: the server's path too
    for config in ({**grammar_config(GRAMMAR), "temperature": 0.7}, {}, grammar_config("root ::= (")):
        before = fake.paths.count("/v1/chat/completions")
        with dspy.context(lm=lm, adapter=ServerChatAdapter()):
            assert predict(question="Who likes whom?", config=config).cypher == "(y:cat)-[:likes]->(b:cat)"
        assert fake.paths.count("/v1/chat/completions") == before + 1
