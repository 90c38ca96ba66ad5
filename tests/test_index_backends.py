"""Embedder backends (torch, ONNX Runtime fp32 and int8, OpenVINO fp32 and bf16), their names in index manifests, the default
document budget per embedder, only-used variants, chunk sorting and dedup, and the progress bar's time left."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from rich.progress import Progress

from autofocus.config import AutofocusConfig
from autofocus.index import cpu_features, embedders
from autofocus.index.build import embed_unique
from autofocus.index.cpu_features import int8_dot_product
from autofocus.index.embedders import (
    DEFAULT_EMBEDDER,
    EmbedderError,
    get_embedder,
    split_backend,
    trained_tokens,
    with_backend,
)
from autofocus.index.onnx_model import onnx_available
from autofocus.index.openvino_model import bf16_supported, openvino_available
from autofocus.index.progress import eta_text
from autofocus.index.store import EmbeddingStore, store_dir
from autofocus.kb import KnowledgeBase, backend_of_existing
from tests.test_index import HashingEmbedder, word_skb

TEXTS = ["A man is eating food.", "A man is eating a piece of bread.", "The stock market fell sharply today.",
         "json.loads(s): deserialize s (a str, bytes or bytearray instance containing a JSON document) to a "
         "Python object. Raises JSONDecodeError if the data being deserialized is not a valid JSON document.",
         "ValueError"]  # fmt: skip (an empty text, which no document is, agrees least: cosine 0.98 in int8)


def test_specs_name_their_backend() -> None:
    assert split_backend("local:all-MiniLM-L6-v2@onnx-int8") == ("local:all-MiniLM-L6-v2", "onnx-int8")
    assert split_backend("local:/models/a@b") == ("local:/models/a@b", "auto")  # not a backend: part of the path
    assert with_backend("local:all-MiniLM-L6-v2@torch", "onnx") == "local:all-MiniLM-L6-v2@onnx"
    assert with_backend("local:all-MiniLM-L6-v2@torch", "auto") == "local:all-MiniLM-L6-v2"
    assert with_backend("openai/text-embedding-3-small", "onnx") == "openai/text-embedding-3-small"
    with pytest.raises(EmbedderError, match="unknown backend"):
        embedders.SentenceTransformerEmbedder(Path("."), "local:x", "tensorrt")


@pytest.mark.parametrize(("bf16", "int8_dot", "ov", "ort", "expected"), [
    (True, True, True, True, "openvino-bf16"),
    (True, True, False, True, "onnx-int8"),  # bf16 kernels, but no OpenVINO
    (False, True, True, True, "onnx-int8"),  # VNNI: int8 beats float32
    (False, False, True, True, "openvino"),  # plain AVX2: int8 buys nothing, OpenVINO's float32 is fastest
    (False, False, False, True, "onnx"),
    (False, True, False, False, "torch"),
])  # fmt: skip
def test_auto_backend_follows_the_cpu_features(monkeypatch: pytest.MonkeyPatch, bf16: bool, int8_dot: bool, ov: bool,
                                               ort: bool, expected: str) -> None:
    monkeypatch.setattr("autofocus.index.openvino_model.bf16_supported", lambda: bf16)
    monkeypatch.setattr("autofocus.index.cpu_features.int8_dot_product", lambda: int8_dot)
    monkeypatch.setattr("autofocus.index.openvino_model.openvino_available", lambda: ov)
    monkeypatch.setattr("autofocus.index.onnx_model.onnx_available", lambda: ort)
    assert embedders.auto_backend(embedders.packaged_minilm_path()) == expected


def test_auto_backend_warns_once_on_torch_and_keeps_unexportable_models_on_torch(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = embedders.packaged_minilm_path()
    on_cpu = ("openvino-bf16" if openvino_available() and bf16_supported() else
              "onnx-int8" if onnx_available() and int8_dot_product() else
              "openvino" if openvino_available() else "onnx" if onnx_available() else "torch")  # fmt: skip
    assert embedders.auto_backend(path) == on_cpu
    monkeypatch.setattr("autofocus.index.openvino_model.openvino_available", lambda: False)
    monkeypatch.setattr("autofocus.index.onnx_model.onnx_available", lambda: False)
    monkeypatch.setattr(embedders, "_WARNED", [])
    with caplog.at_level(logging.WARNING):
        assert embedders.auto_backend(path) == "torch"
        assert embedders.auto_backend(path) == "torch"
    assert caplog.text.count("neither onnxruntime nor openvino is installed") == 1
    assert embedders.auto_backend(Path(__file__).parent) == "torch"  # not an exportable model


def test_cpu_flags_are_read_from_cpuinfo(tmp_path: Path) -> None:
    x86 = tmp_path / "x86"
    x86.write_text("processor\t: 0\nflags\t\t: fpu avx2 FMA avx512_vnni\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd asimddp\n")
    assert {"avx2", "fma", "avx512_vnni"} <= cpu_features.cpu_flags(x86)
    assert cpu_features.int8_dot_product(cpu_features.cpu_flags(x86))
    assert cpu_features.int8_dot_product(cpu_features.cpu_flags(arm))
    assert not cpu_features.int8_dot_product(frozenset({"avx2", "fma", "avx512f"}))
    assert cpu_features.cpu_flags(tmp_path / "missing") == frozenset(cpu_features._numpy_flags())  # no file: numpy's alone


def test_default_budget_follows_the_embedder(tmp_path: Path) -> None:
    assert get_embedder(f"{DEFAULT_EMBEDDER}@torch").trained_tokens == 128  # type: ignore[attr-defined]
    assert trained_tokens(get_embedder("openai/text-embedding-3-small")) == 8191
    assert trained_tokens(get_embedder("hosted:acme/embed-v1")) == 512
    assert trained_tokens(HashingEmbedder()) == 512  # says nothing: the hosted default
    assert AutofocusConfig().index.doc_budget_tokens is None
    kb = KnowledgeBase(word_skb(10), get_embedder(f"{DEFAULT_EMBEDDER}@torch"), tmp_path, progress=False)
    assert kb.doc_budget_tokens == 128 and kb.store_dir("text").name == "text-128t"
    kb384 = KnowledgeBase(word_skb(10), get_embedder(f"{DEFAULT_EMBEDDER}@torch"), tmp_path, doc_budget_tokens=384,
                          progress=False)
    assert kb384.store_dir("text").name == "text-384t"


def test_stores_of_several_budgets_live_side_by_side(tmp_path: Path) -> None:
    skb, emb = word_skb(12), HashingEmbedder()
    small = KnowledgeBase(skb, emb, tmp_path, doc_budget_tokens=64, build_missing=True, progress=False)
    large = KnowledgeBase(skb, emb, tmp_path, doc_budget_tokens=384, build_missing=True, progress=False)
    small.index("text")
    large.index("text")
    budgets = sorted(EmbeddingStore.open(p.parent).manifest.doc_budget_tokens for p in tmp_path.glob("*/*/manifest.json"))
    assert budgets == [64, 384]
    imported = store_dir(tmp_path, emb.name, "text+rel")  # no budget: imported vectors serve every budget
    assert small.store_dir("text+rel") != imported
    imported.mkdir(parents=True)
    (imported / "manifest.json").write_text("{}")
    assert small.store_dir("text+rel") == imported == large.store_dir("text+rel")


def test_queries_use_the_backend_the_index_was_built_with(tmp_path: Path) -> None:
    spec = DEFAULT_EMBEDDER
    assert backend_of_existing(spec, tmp_path) == spec  # nothing built: auto
    for backend in ("torch",):
        name = get_embedder(f"{spec}@{backend}").name
        EmbeddingStore.create(store_dir(tmp_path, name, "text", 128), model=name, dim=4, variant="text",
                              doc_budget_tokens=128, skb_fingerprint="fp", num_nodes=2)
    assert backend_of_existing(spec, tmp_path) == f"{spec}@torch"
    assert backend_of_existing(f"{spec}@onnx", tmp_path) == f"{spec}@onnx"  # named: kept
    name = get_embedder(f"{spec}@onnx-int8").name
    EmbeddingStore.create(store_dir(tmp_path, name, "text", 128), model=name, dim=4, variant="text",
                          doc_budget_tokens=128, skb_fingerprint="fp", num_nodes=2)
    assert backend_of_existing(spec, tmp_path) == spec  # two backends built: auto decides


def test_only_the_variants_a_config_searches() -> None:
    assert AutofocusConfig().doc_variants == ["text", "text+rel"]
    assert AutofocusConfig(steps="1+7").doc_variants == ["text+rel"]
    assert AutofocusConfig(doc_variant_step7="text").doc_variants == ["text"]


def test_embed_unique_sorts_by_length_embeds_each_text_once_and_keeps_the_order() -> None:
    calls: list[list[str]] = []

    class Recording(HashingEmbedder):
        def embed(self, texts: Sequence[str], batch_size: int = 64, progress: bool = False) -> np.ndarray:
            calls.append(list(texts))
            return super().embed(texts, batch_size, progress)

    texts = ["bb", "a", "cccc", "a", "bb", ""]
    emb = Recording()
    out = embed_unique(emb, texts, batch_size=2)
    assert calls == [["cccc", "bb", "a", ""]]
    np.testing.assert_array_equal(out, HashingEmbedder().embed(texts))


def test_the_bar_says_how_long_is_left() -> None:
    now = [0.0]
    with Progress(get_time=lambda: now[0], disable=True) as bar:
        task_id = bar.add_task("embedding", total=1000, completed=200, resumed=200)
        task = bar.tasks[0]
        assert eta_text(task) == "estimating time left"
        now[0] = 10.0
        bar.advance(task_id, 100)  # 100 rows in 10 s this run (the 200 resumed ones do not count)
        assert eta_text(task) == "10.0/s, 0:01:10 left"
        now[0] = 80.0
        bar.advance(task_id, 700)
        assert eta_text(task) == "done in 0:01:20"


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "floor"), [
    pytest.param("onnx", 0.9999, marks=pytest.mark.skipif(not onnx_available(), reason="needs the onnx extra")),
    pytest.param("onnx-int8", 0.99, marks=pytest.mark.skipif(not onnx_available(), reason="needs the onnx extra")),
    pytest.param("openvino", 0.9999, marks=pytest.mark.skipif(not openvino_available(), reason="needs the openvino extra")),
    pytest.param("openvino-bf16", 0.999, marks=pytest.mark.skipif(not openvino_available(), reason="needs the openvino extra")),
])  # fmt: skip
def test_exported_vectors_agree_with_torch(backend: str, floor: float) -> None:
    torch_vecs = get_embedder(f"{DEFAULT_EMBEDDER}@torch").embed(TEXTS)
    emb = get_embedder(f"{DEFAULT_EMBEDDER}@{backend}")
    assert emb.name == f"local:all-MiniLM-L6-v2@{backend}" and emb.dim == 384
    vecs = emb.embed(TEXTS, batch_size=2)
    assert vecs.dtype == np.float32 and vecs.shape == (len(TEXTS), 384)
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    cos = (vecs * torch_vecs).sum(axis=1)
    assert cos.min() >= floor, cos
    np.testing.assert_array_equal(emb.embed(TEXTS[:1]), emb.embed(TEXTS[:1]))  # deterministic


def test_an_export_is_found_in_any_listed_models_folder_and_made_in_the_first(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from autofocus.index import exported_encoder

    model = tmp_path / "tiny-model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    made: list[Path] = []

    def export(model_dir: Path, folder: Path) -> None:
        made.append(folder)
        (folder / "model.onnx").write_bytes(b"onnx")

    first, second = tmp_path / "checkout", tmp_path / "users"
    monkeypatch.setenv("AUTOFOCUS_MODELS", f"{first}{os.pathsep}{second}")
    path = exported_encoder.exported_file(model, "v1", "model.onnx", export)
    assert path.parent.parent == first and len(made) == 1  # made in the first folder
    moved = second / path.parent.name
    second.mkdir()
    path.parent.rename(moved)  # as a user's own run (make demo) left it in theirs
    assert exported_encoder.exported_file(model, "v1", "model.onnx", export) == moved / "model.onnx"
    assert len(made) == 1  # found, not made again
    assert exported_encoder.exported_file(model, "v2", "model.onnx", export).parent.parent == first and len(made) == 2


@pytest.mark.skipif(not openvino_available(), reason="needs the openvino extra")
def test_a_cross_encoder_on_openvino_scores_pairs_as_torch_does(tmp_path: Path) -> None:
    """Step 8's trained cross-encoder exported as (question, text) -> logit: the same logits as torch's for
    pairs of any length (truncated longest first to the model's length), in the order given."""
    import torch
    from sentence_transformers.cross_encoder import CrossEncoder

    from autofocus.adapt.reranker import base_model_dir
    from autofocus.program.trained import CrossEncoderModel, TrainedPartsError

    torch.manual_seed(0)
    folder = tmp_path / "reranker"
    CrossEncoder(str(base_model_dir(None)), num_labels=1, max_length=32, device="cpu").save(str(folder))
    texts = [*TEXTS, " ".join(TEXTS * 4)]  # the last is cut to 32 word pieces with the question
    on_torch = CrossEncoderModel(folder, max_length=32, backend="torch")
    exported = CrossEncoderModel(folder, max_length=32)
    assert (on_torch.backend, exported.backend) == ("torch", "openvino")
    a, b = on_torch.logits("what does json.loads raise?", texts), exported.logits("what does json.loads raise?", texts)
    assert a.shape == b.shape == (len(texts),) and np.ptp(a) > 1e-3  # a fresh head still tells texts apart
    np.testing.assert_allclose(b, a, atol=1e-4)
    with pytest.raises(ValueError, match="unknown backend 'tensorrt' for a trained model"):
        CrossEncoderModel(folder, backend="tensorrt")
    (folder / "tokenizer.json").unlink()  # a folder OpenVINO cannot serve: asked for, a clear error
    with pytest.raises(TrainedPartsError, match=r"tokenizer\.json"):
        CrossEncoderModel(folder, backend="openvino")


@pytest.mark.skipif(not openvino_available(), reason="needs the openvino extra")
def test_a_fine_tuned_bi_encoder_on_openvino_embeds_as_torch_does(tmp_path: Path) -> None:
    """Step 8's bi-encoder (a sentence-transformers folder as training saves it) on OpenVINO: unit vectors
    equal to torch's, so both fill one cache; a folder with a layer the export leaves out stays on torch."""
    from sentence_transformers import SentenceTransformer

    from autofocus.adapt.reranker import base_model_dir
    from autofocus.index.cache import EmbeddingCache
    from autofocus.program.trained import BiEncoderModel, TrainedPartsError

    folder = tmp_path / "reranker"
    SentenceTransformer(str(base_model_dir(None)), device="cpu").save(str(folder))
    cache = EmbeddingCache(tmp_path / "cache")
    on_torch = BiEncoderModel(folder, max_length=32, backend="torch", cache=cache)
    exported = BiEncoderModel(folder, max_length=32, cache=cache)
    assert (on_torch.backend, exported.backend) == ("torch", "openvino") and on_torch.name == exported.name
    assert exported.dim == on_torch.dim == 384
    np.testing.assert_allclose(exported.embed(TEXTS), on_torch.embed(TEXTS), atol=1e-5)
    modules = json.loads((folder / "modules.json").read_text())
    modules.append({"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"})
    (folder / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(TrainedPartsError, match="mean pooling only"):
        BiEncoderModel(folder, backend="openvino", cache=cache)
