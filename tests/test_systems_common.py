"""Shared helpers for the systems' tests (a scripted LM, a real KB with a cheap embedder) and the
registry presets of every system."""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import dspy
import numpy as np
import pytest
from dspy.clients.engines.dummy_engine import AsyncDummyEngine, DummyEngine
from dspy.lm15 import Message, Response, TextPart, Usage
from dspy.utils.dummies import DummyLM

from autofocus.config import AutofocusConfig, LMConfig
from autofocus.index.cache import EmbeddingCache
from autofocus.index.embedders import l2_normalise
from autofocus.kb import KnowledgeBase
from autofocus.program.systems.registry import apply_lms, build_program, resolve_config, systems
from autofocus.skb.model import SKB
from autofocus.trace import Trace
from autofocus.usage import install_usage_callback

Handler = Callable[[str], dict[str, Any]]


class HashEmbedder:
    """Word and character-trigram feature hashing: a real, deterministic embedder cheap enough for tests."""

    name = "test:hash"
    dim = 96

    def embed(self, texts: Sequence[str], batch_size: int = 64, progress: bool = False) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), np.float32)
        for row, text in enumerate(texts):
            padded = f"  {text.lower()} "
            feats = [padded[j : j + 3] for j in range(len(padded) - 2)] + text.lower().split() * 3
            for f in feats:
                out[row, zlib.crc32(f.encode()) % self.dim] += 1.0
        return l2_normalise(out)


def make_kb(skb: SKB, root: Path, source: Path | None = None) -> KnowledgeBase:
    """The real KnowledgeBase (real documents, stores and FAISS search) with the hashing embedder."""
    kb = KnowledgeBase(skb, HashEmbedder(), root, build_missing=True, progress=False, cache=EmbeddingCache(None))
    kb.source = source
    return kb


class _ScriptEngine(DummyEngine):
    def _complete_messages(self, messages: list[dict[str, Any]]) -> Response:
        owner: ScriptedLM = self.owner
        outputs = messages[0]["content"].split("Your output fields are:")[1].split("All interactions")[0]
        user = messages[-1]["content"]
        if owner.max_messages is not None and len(messages) > owner.max_messages:
            raise dspy.lm15.ContextLengthError(f"prompt of {len(messages)} messages exceeds the context window")
        field = next((f for f in owner.handlers if f"`{f}`" in outputs), None)
        if field is None:
            raise AssertionError(f"no scripted answer for a signature with outputs: {outputs.strip()}")
        answer = owner.handlers[field](user)
        with owner.lock:
            owner.calls.append((field, user, messages))
        text = owner._format_answer_fields(answer)
        return Response(id=None, model="scripted", message=Message.assistant([TextPart(text)]), finish_reason="stop",
                        usage=Usage(input_tokens=0, output_tokens=0, total_tokens=0))


class ScriptedLM(DummyLM):
    """Answers each call by the signature asked: ``handlers[first output field](last user message)``.

    ``calls`` records ``(field, user message, all messages)`` in call order; a prompt of more than
    ``max_messages`` messages is refused as a real server refuses one over its context window.
    """

    def __init__(self, handlers: dict[str, Handler], max_messages: int | None = None) -> None:
        super().__init__([])
        self.handlers = handlers
        self.max_messages = max_messages
        self.calls: list[tuple[str, str, list[dict[str, Any]]]] = []
        self.lock = threading.Lock()
        self._engine_spec = _ScriptEngine(self)
        self._async_engine_spec = AsyncDummyEngine(self._engine_spec)

    def fields(self) -> list[str]:
        return [c[0] for c in self.calls]


def field_value(user: str, name: str) -> str:
    """The text of input field ``name`` in a ChatAdapter user message."""
    return user.split(f"[[ ## {name} ## ]]")[1].split("[[ ## ")[0].strip()


def scripted_config(**overrides: Any) -> AutofocusConfig:
    """A config whose LM spec is not the offline one (so pointwise scoring uses the signature)."""
    return AutofocusConfig(lm=LMConfig(default="test/scripted"), **{"concurrency": 1, **overrides})


def run(spec: str, kb: KnowledgeBase, lm: ScriptedLM, question: str, config: AutofocusConfig | None = None,
        ) -> dspy.Prediction:
    install_usage_callback()
    program = build_program(spec, kb, config or scripted_config(), with_lms=False)
    with dspy.context(lm=lm):
        return program(question=question)


@pytest.fixture(scope="module")
def kb(tiny_skb: SKB, tmp_path_factory: pytest.TempPathFactory) -> KnowledgeBase:
    return make_kb(tiny_skb, tmp_path_factory.mktemp("kb"))


# --- registry presets ---------------------------------------------------------------------------------


def test_every_system_is_registered_with_its_papers_defaults() -> None:
    names = set(systems())
    assert {"afr", "bm25", "vss", "vss-rerank", "4stepfocus", "focusedretriever", "hybgrag"} <= names
    assert {"afr-steps1+7", "afr-steps1-5", "afr-steps1-6", "afr-steps1-7", "afr-pairwise", "afr-code"} <= names
    assert resolve_config("afr-steps1+7")[1].steps == "1+7"
    assert resolve_config("afr-tournament")[1].rerank.reranker == "tournament"
    assert resolve_config("vss-rerank")[1].rerank.reranker == "pointwise"
    assert resolve_config("vss")[1].rerank.reranker == "none"
    fr = resolve_config("focusedretriever")[1]
    assert (fr.rerank.reranker, fr.grounding.l_max, fr.merge.alpha, fr.grounding.expansion) == ("pairwise", 1_500_000, 0.6, "paper")
    fsf = resolve_config("4stepfocus:name_similarity=0.8")[1]
    assert (fsf.rerank.reranker, fsf.grounding.edge_mode, fsf.systems.name_similarity) == ("pointwise", "lenient", 0.8)
    assert resolve_config("hybgrag:critic_rounds=2")[1].systems.critic_rounds == 2
    code = resolve_config("afr-code")[1]
    assert (code.grounding.l_max, code.grounding.expansion, code.merge.step6_order, code.merge.step7_exclude) == (3, "code", "round", "none")
    # what autofocus adds is off in the papers' methods, on in afr
    assert not resolve_config("afr-paper")[1].merge.named_last and not fr.merge.named_last and resolve_config("afr")[1].merge.named_last


@pytest.mark.parametrize("spec", ["bm25", "vss", "4stepfocus", "focusedretriever", "hybgrag"])
def test_systems_refuse_afr_ablations_instead_of_ignoring_them(spec: str, kb: KnowledgeBase) -> None:
    with pytest.raises(ValueError, match="AF-Retriever ablation"):
        build_program(f"{spec}:steps=1-7", kb, scripted_config(), with_lms=False)


def test_llm_steps_are_named_sub_modules(kb: KnowledgeBase) -> None:
    """Optimisers and ``apply_lms`` find each LLM step by its attribute name."""
    expected = {
        "4stepfocus": {"triplets", "reranker.score"},
        "focusedretriever": {"cypher", "reranker.compare"},
        "hybgrag": {"router", "validator", "commenter"},
        "vss-rerank": {"reranker.score"},
        "vss": set(),
        "bm25": set(),
    }
    for spec, names in expected.items():
        program = build_program(spec, kb, scripted_config(), with_lms=False)
        assert {n for n, _ in program.named_predictors()} == names, spec


def test_each_system_returns_a_ranking_and_a_trace(kb: KnowledgeBase, tiny_skb: SKB) -> None:
    lm = ScriptedLM({
        "triplets": lambda u: {"triplets": [], "target": "?1"},
        "cypher": lambda u: {"cypher": "MATCH (p:paper) RETURN p.title"},
        "score": lambda u: {"score": 0.5},
        "better_id": lambda u: {"better_id": 0},
        "topic_entities": lambda u: {"topic_entities": [], "useful_relations": [], "source": "text documents"},
        "aligned": lambda u: {"aligned": True},
    })
    papers = set(tiny_skb.ids_of_type("paper").tolist())
    for spec in ("bm25", "vss", "vss-rerank", "4stepfocus", "focusedretriever", "hybgrag"):
        pred = run(spec, kb, lm, "Which papers cite Graph Retrieval at Scale?", scripted_config(k=4))
        assert isinstance(pred.trace, Trace) and pred.trace.system == spec
        assert len(pred.ranked_ids) == 4 and set(pred.ranked_ids) <= papers, spec
        assert all(s.seconds >= 0 for s in pred.trace.steps.values()) and pred.trace.steps


def test_apply_lms_gives_every_predictor_its_steps_lm_and_refuses_unknown_ones(kb: KnowledgeBase) -> None:
    cfg = AutofocusConfig(lm=LMConfig(default="openai/base", cypher="openai/coder", rerank="openai/judge"),
                          reranker="pointwise")
    program = build_program("afr", kb, cfg)
    models = {name: p.lm.model for name, p in program.named_predictors()}
    assert models == {"cypher": "openai/coder", "query_graph": "openai/coder", "reranker.score": "openai/judge"}
    program = build_program("hybgrag", kb, cfg)
    models = {name: p.lm.model for name, p in program.named_predictors()}
    assert models == {"router": "openai/coder", "commenter": "openai/coder", "validator": "openai/judge"}

    class NewSystem(dspy.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cypher = dspy.Predict("question -> cypher")
            self.planner = dspy.Predict("question -> plan")  # a step apply_lms does not know

    with pytest.raises(ValueError, match="predictors with no LM step: planner"):
        apply_lms(NewSystem(), cfg)


def test_a_program_call_keeps_to_its_configs_question_deadline(kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> None:
    from autofocus import usage

    ticks = iter(range(0, 10**6, 100))  # every reading of the deadline's clock is 100 s later
    monkeypatch.setattr(usage, "clock", lambda: next(ticks))
    lm = ScriptedLM({"cypher": lambda u: {"cypher": "MATCH (p:paper) RETURN p"}})
    pred = run("afr", kb, lm, "Which papers cite Graph Retrieval at Scale?",
               scripted_config(question_deadline_s=50, reranker="none"))
    assert [d.step for d in pred.trace.degraded] == ["2_query"] and lm.calls == []  # no call after it
    assert pred.ranked_ids  # the VSS fallback still answers
