"""Adaptation by training (``autofocus adapt``): template questions, mined lists, the cross-encoder and
the type reader, the program that carries them, and what bad input gets.

The knowledge base is the tiny bibliography with the hashing embedder (real stores and FAISS); the
cross-encoder is the packaged MiniLM, trained for real on a few dozen pairs (slow tests).
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from autofocus import runtime
from autofocus.adapt import adapt
from autofocus.adapt.mining import answer_type, mine
from autofocus.adapt.reranker import Documents, RerankerTraining, pairs, train_reranker, triplets
from autofocus.adapt.type_reader import fit_type_reader
from autofocus.config import AutofocusConfig
from autofocus.options import AdaptOptions, SynthOptions
from autofocus.program.steps.rerankers import make_reranker
from autofocus.program.steps.trained_reranker import TrainedReranker
from autofocus.program.systems.base import program_copy
from autofocus.program.trained import (
    BiEncoderModel,
    CrossEncoderModel,
    TrainedParts,
    TrainedPartsError,
    TypeReader,
    load_trained,
    open_reranker,
    parts_folder,
    write_manifest,
)
from autofocus.skb.candidate_texts import candidate_text
from autofocus.skb.qa import QAItem
from autofocus.synthetic.build import synthesise
from autofocus.synthetic.patterns import PatternSampler
from autofocus.synthetic.templates import TemplateWriter
from tests.test_systems_common import make_kb

# --- template questions -------------------------------------------------------------------------


def test_template_questions_name_constants_and_label_and_are_seeded(tiny_skb, tmp_path):
    sampler = PatternSampler(tiny_skb, max_answers=5)
    rng = np.random.default_rng(0)
    patterns = [p for _ in range(40) if (p := sampler.sample("paper", rng)) is not None]
    assert patterns
    writer, again = TemplateWriter(tiny_skb, seed=3), TemplateWriter(tiny_skb, seed=3)
    for p in patterns:
        q = writer(p)
        assert q == again(p)  # the wording is a function of the pattern and the seed
        assert q[-1] in "?."
        assert "paper" in q.lower()
        for var in p.constants:
            assert str(p.query.symbols[var].name_value()) in q
        assert "unknown answer" not in q and "MATCH" not in q


def test_template_synthesis_writes_checked_questions_without_an_lm(tiny_skb, tmp_path):
    kb = make_kb(tiny_skb, tmp_path / "index")
    result = synthesise(kb, 6, SynthOptions(writer="template", max_answers=5, clue_share=0.0))
    assert result.pairs and result.lm_calls == 0
    assert result.settings["writer"] == "template"
    for pair in result.pairs:
        assert pair.question and pair.pattern.answers.size


def test_unknown_writer_is_refused(tiny_skb, tmp_path):
    kb = make_kb(tiny_skb, tmp_path / "index")
    with pytest.raises(ValueError, match="writer"):
        synthesise(kb, 2, SynthOptions(writer="poet"))


# --- mining -------------------------------------------------------------------------------------


def _program(kb):
    return runtime.assemble("afr", kb, AutofocusConfig(steps="1-7"), lms=False)


def test_mined_lists_put_a_gold_querys_answers_first_and_negatives_exclude_answers(tiny_skb, tmp_path):
    kb = make_kb(tiny_skb, tmp_path / "index")
    item = QAItem(0, "Which papers cite Graph Retrieval at Scale?", [1, 2, 11], target_type="paper",
                  cypher="MATCH (y:paper)-[:paper_cites_paper]->(a:paper {title: 'Graph Retrieval at Scale'}) RETURN y")
    (mined,) = mine(_program(kb), [item])
    assert set(mined.lists) == {"grounded", "vector"}
    assert set(mined.lists["grounded"][:3]) == {1, 2, 11}
    negatives = mined.negatives(5)
    assert negatives and not set(negatives) & {1, 2, 11}
    assert all(tiny_skb.type_of(n) == "paper" for n in mined.lists["vector"])


def test_answer_type_of_a_labelled_question_is_its_answers_type(tiny_skb):
    assert answer_type(QAItem(0, "who?", [4, 5, 0]), tiny_skb.type_of) == "author"
    assert answer_type(QAItem(0, "which?", [4], target_type="paper"), tiny_skb.type_of) == "paper"


def test_unknown_mining_source_is_refused(tiny_skb, tmp_path):
    kb = make_kb(tiny_skb, tmp_path / "index")
    with pytest.raises(ValueError, match="unknown candidate sources"):
        mine(_program(kb), [QAItem(0, "q", [0])], sources=["oracle"])


# --- the cross-encoder ---------------------------------------------------------------------------

TOPICS = {9: "Information Retrieval", 10: "Natural Language Processing"}


def _topic_items(skb) -> list[QAItem]:
    """Questions whose answers differ from the other papers by their topic edge only: what a relation-
    reading reranker must learn."""
    papers = [int(i) for i in skb.ids_of_type("paper")]
    items = []
    for k, (field, name) in enumerate(TOPICS.items()):
        gold = [p for p in papers if field in skb.graph.neighbours(np.array([p]), ["paper_has_topic_field"]).tolist()]
        for j, form in enumerate(("Which papers are about {}?", "Papers with the topic {}", "List papers on {}",
                                  "Find the paper that has topic {}", "What papers have topic {}?")):
            items.append(QAItem(10 * k + j, form.format(name), gold, target_type="paper"))
    return items


@pytest.mark.slow
def test_training_raises_answers_above_non_answers(tiny_skb, tmp_path):
    kb = make_kb(tiny_skb, tmp_path / "index")
    mined = mine(_program(kb), _topic_items(tiny_skb), sources=["vector"])
    opts = RerankerTraining(epochs=5, batch_size=8, learning_rate=5e-4, max_length=96, negatives=4)
    docs = Documents(tiny_skb)
    cols = pairs(mined, docs, opts)
    untrained = CrossEncoderModel.__new__(CrossEncoderModel)  # the base model with its fresh head, as training starts
    import torch
    from sentence_transformers.cross_encoder import CrossEncoder

    from autofocus.adapt.reranker import base_model_dir

    torch.manual_seed(0)
    untrained.model, untrained.batch_size, untrained.folder = CrossEncoder(
        str(base_model_dir(None)), num_labels=1, max_length=96, device="cpu"), 8, Path("base")

    def margin(model: CrossEncoderModel) -> float:
        labels, scores = np.array(cols["label"]), np.zeros(len(cols["label"]))
        queries = np.array(cols["query"], dtype=object)
        for q in dict.fromkeys(cols["query"]):  # one batch per question
            rows = np.flatnonzero(queries == q)
            scores[rows] = model.logits(q, [cols["document"][i] for i in rows])
        return float(scores[labels == 1].mean() - scores[labels == 0].mean())

    before = margin(untrained)
    record = train_reranker(mined, [], tiny_skb, tmp_path / "parts", opts, progress=False)
    after = margin(CrossEncoderModel(tmp_path / "parts" / "reranker"))
    assert record["pairs"] == len(cols["label"]) and record["positive_pairs"] > 0
    assert after > before + 1.0  # answers now score well above the hard negatives


@pytest.mark.slow
def test_fine_tuning_the_embedder_raises_answers_above_non_answers(tiny_skb, tmp_path):
    """The bi-encoder: the packaged MiniLM fine-tuned on (question, answer, hard non-answer) triplets."""
    kb = make_kb(tiny_skb, tmp_path / "index")
    mined = mine(_program(kb), _topic_items(tiny_skb), sources=["vector"])
    opts = RerankerTraining(kind="bi-encoder", epochs=4, batch_size=8, learning_rate=2e-4, max_length=96, negatives=4)
    docs = Documents(tiny_skb)
    cols = triplets(mined, docs, opts)
    from autofocus.adapt.reranker import base_model_dir

    def margin(model: BiEncoderModel) -> float:
        pos = [model.logits(q, [d])[0] for q, d in zip(cols["anchor"], cols["positive"], strict=True)]
        neg = [model.logits(q, [d])[0] for q, d in zip(cols["anchor"], cols["negative"], strict=True)]
        return float(np.mean(pos) - np.mean(neg))

    before = margin(BiEncoderModel(base_model_dir(None)))
    record = train_reranker(mined, [], tiny_skb, tmp_path / "parts", opts, progress=False)
    model = open_reranker(tmp_path / "parts" / "reranker", record)
    assert isinstance(model, BiEncoderModel) and record["kind"] == "bi-encoder" and record["triplets"] == len(cols["anchor"])
    assert margin(model) > before + 1.0  # answers now score above the hard negatives (cosine x 20)
    probs = model.probabilities(cols["anchor"][0], [cols["positive"][0], cols["negative"][0]])
    assert probs.sum() == pytest.approx(1.0) and probs[0] > probs[1]


@pytest.mark.slow
def test_the_bi_encoder_embeds_each_candidate_once(tmp_path):
    """A candidate's vector does not depend on the question: kept under the model's digest on disk, a
    candidate met again (another question, another run) is looked up, and scores as when embedded."""
    from autofocus.adapt.reranker import base_model_dir
    from autofocus.index.cache import EmbeddingCache

    texts = ["Graph Retrieval at Scale (paper)", "Ada Lovelace (author)", "Information Retrieval (field of study)"]
    cache = EmbeddingCache(tmp_path / "vectors.sqlite")
    model = BiEncoderModel(base_model_dir(None), cache=cache)
    first = model.logits("Which papers are about retrieval?", texts)
    q, d = model.embed(["Which papers are about retrieval?"]), model.embed(texts)
    np.testing.assert_allclose(first, 20.0 * (d @ q[0]), rtol=1e-5, atol=1e-5)  # what an uncached model scores
    assert cache.misses == 4
    second = model.logits("Who wrote about graphs?", texts)
    assert cache.misses == 5 and second.shape == (3,)  # the new question only
    reopened = BiEncoderModel(base_model_dir(None), cache=EmbeddingCache(tmp_path / "vectors.sqlite"))
    assert reopened.name == model.name
    np.testing.assert_array_equal(reopened.logits("Which papers are about retrieval?", texts), first)
    assert reopened.cache.misses == 0  # read back from disk
    shorter = BiEncoderModel(base_model_dir(None), max_length=32, cache=cache)
    assert shorter.name != model.name  # another input length embeds anew
    assert copy.deepcopy(model) is model  # a program's copies for other threads share it, cache and all


def test_no_pairs_of_both_kinds_is_a_clear_error(tiny_skb, tmp_path):
    kb = make_kb(tiny_skb, tmp_path / "index")
    papers = [int(i) for i in tiny_skb.ids_of_type("paper")]
    mined = mine(_program(kb), [QAItem(0, "Which papers exist?", papers, target_type="paper")], sources=["vector"])
    with pytest.raises(ValueError, match="no training pairs of both kinds"):
        train_reranker(mined, [], tiny_skb, tmp_path / "parts", RerankerTraining(epochs=1), progress=False)


# --- the type reader -----------------------------------------------------------------------------


def test_type_reader_learns_a_schemas_way_of_asking():
    rng = np.random.default_rng(0)
    centres = {"author": rng.normal(size=8), "paper": rng.normal(size=8), "venue": rng.normal(size=8)}
    ys = [t for t in centres for _ in range(30)]
    xs = np.stack([centres[t] + 0.3 * rng.normal(size=8) for t in ys])
    reader, record = fit_type_reader(xs[::2], ys[::2], xs[1::2], ys[1::2], ["author", "paper", "venue", "field"], "e")
    assert record["val_accuracy"] == 1.0
    probs = reader.probabilities(centres["venue"])
    assert max(probs, key=probs.get) == "venue"
    assert probs["field"] < 0.01  # no question asked for it: possible, not likely
    again = TypeReader.from_dict(json.loads(json.dumps(reader.to_dict())), "reader.json")
    assert again.probabilities(centres["venue"]) == pytest.approx(probs, abs=1e-5)


def test_type_reader_needs_two_types():
    with pytest.raises(ValueError, match="two types"):
        fit_type_reader(np.zeros((3, 4)), ["paper"] * 3, np.zeros((0, 4)), [], ["paper", "author"], "e")


# --- the adapted program -------------------------------------------------------------------------


@pytest.fixture
def adapted(two_type_skb, tmp_path, monkeypatch):
    """An adaptation of the tiny SKB (papers and authors as answers) on template questions and its
    labelled train split."""
    from autofocus.skb.skbdir import load_skb_dir

    kb = make_kb(load_skb_dir(two_type_skb, progress=False), tmp_path / "index", source=two_type_skb)
    monkeypatch.setattr(runtime, "open_kb", lambda *args, **kw: kb)
    options = AdaptOptions(out=tmp_path / "out" / "adapted.json", splits=("train",), templates=16, epochs=1,
                           batch_size=8, max_length=96, val_share=0.3, reranker_kind="cross-encoder")
    return kb, adapt(two_type_skb, AutofocusConfig(), options)


@pytest.mark.slow
def test_adapted_program_reranks_with_its_model_and_reloads_identically(adapted):
    kb, result = adapted
    folder = parts_folder(result.program)
    assert result.folder == folder and (folder / "manifest.json").is_file()
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["reranker"]["pairs"] > 0 and manifest["type_reader"]["train_questions"] > 0
    assert manifest["options"]["negatives"] == 7  # the cross-encoder's own number of hard negatives
    stages = manifest["stage_minutes"]  # what each part cost, in the order the sequence runs them
    assert list(stages) == ["open", "questions", "mining", "reranker", "fusion", "type_reader"]
    assert sum(stages.values()) == pytest.approx(manifest["minutes"], abs=0.05)
    saved = json.loads(result.program.read_text())
    assert saved["config"]["trained"] == folder.name  # relative: program and models move together
    program = runtime.open_program(kb, "afr", None, result.program, lms=False)
    assert isinstance(program.reranker, TrainedReranker) and program.reranker.method == "cross-encoder"
    question = "Which papers cite Graph Retrieval at Scale?"
    cypher = "MATCH (y:paper)-[:paper_cites_paper]->(a:paper {title: 'Graph Retrieval at Scale'}) RETURN y"
    found = program.retrieve(question, "paper", cypher)
    from autofocus.trace import Trace

    first = program.rerank(question, "paper", found, {}, program.config, Trace())
    assert program_copy(program).reranker.model is program.reranker.model  # threads share the weights
    moved = result.program.parent.parent / "moved"
    shutil.copytree(result.program.parent, moved)
    again = runtime.open_program(kb, "afr", None, moved / result.program.name, lms=False)
    assert again.trained.folder.resolve() == (moved / folder.name).resolve()
    assert again.rerank(question, "paper", found, {}, again.config, Trace()) == first


def test_missing_or_corrupt_parts_folder_is_a_clear_error(tmp_path, tiny_skb):
    with pytest.raises(TrainedPartsError, match=r"no such trained-parts manifest: .*interrupted"):
        TrainedParts.load(tmp_path / "nothing.trained", tiny_skb)
    broken = tmp_path / "broken.trained"
    broken.mkdir()
    (broken / "manifest.json").write_text("{not json")
    with pytest.raises(TrainedPartsError, match=r"manifest\.json:1:2: not a trained-parts manifest \(bad JSON"):
        TrainedParts.load(broken, tiny_skb)
    write_manifest(broken, {"reranker": {"max_length": 64}})
    with pytest.raises(TrainedPartsError, match="not a cross-encoder folder"):
        TrainedParts.load(broken, tiny_skb)
    write_manifest(broken, {"reranker": {"kind": "bi-encoder"}})
    with pytest.raises(TrainedPartsError, match="not a sentence-transformers folder"):
        TrainedParts.load(broken, tiny_skb)
    write_manifest(broken, {"reranker": {"kind": "tri-encoder"}})
    with pytest.raises(TrainedPartsError, match="unknown reranker kind 'tri-encoder'"):
        TrainedParts.load(broken, tiny_skb)


def test_parts_of_another_knowledge_base_warn_or_fail(tmp_path, tiny_skb, caplog):
    folder = tmp_path / "other.trained"
    reader = TypeReader(["paper"], np.zeros((1, 4)), np.zeros(1), "test:hash")  # the tiny KB asks for papers only
    folder.mkdir()
    (folder / "type_reader.json").write_text(json.dumps(reader.to_dict()))
    write_manifest(folder, {"type_reader": {"train_questions": 3}, "content_digest": "0" * 32, "skb": "elsewhere"})
    parts = TrainedParts.load(folder, tiny_skb, "test:hash")
    assert any("trained on another knowledge base" in w for w in parts.warnings)
    assert parts.type_reader is not None
    assert TrainedParts.load(folder, tiny_skb, "local:other").type_reader is None  # another embedder's vectors
    foreign = TypeReader(["protein", "drug"], np.zeros((2, 4)), np.zeros(2), "test:hash")
    (folder / "type_reader.json").write_text(json.dumps(foreign.to_dict()))
    with pytest.raises(TrainedPartsError, match="no answer type of this knowledge base"):
        TrainedParts.load(folder, tiny_skb, "test:hash")


def test_loaded_trained_parts_are_kept_up_to_a_bound(tmp_path, tiny_skb, monkeypatch):
    from autofocus.program import trained

    monkeypatch.setattr(trained, "_LOADED", type(trained._LOADED)(trained.MAX_LOADED))
    loads: list[str] = []
    real = TrainedParts.load.__func__
    monkeypatch.setattr(TrainedParts, "load", classmethod(lambda cls, folder, *a: loads.append(Path(folder).name)
                                                          or real(cls, folder, *a)))
    folders = []
    for i in range(trained.MAX_LOADED + 1):
        folders.append(tmp_path / f"p{i}.trained")
        write_manifest(folders[-1], {"content_digest": None})

    class KB:
        skb, embedder = tiny_skb, None

    for folder in [*folders[:-1], folders[0], folders[-1], folders[0], folders[1]]:
        load_trained(folder, KB())
    assert len(trained._LOADED) == trained.MAX_LOADED
    assert loads == [f.name for f in folders] + ["p1.trained"]  # p0 asked again stayed; p1, the oldest, went


def test_a_trained_reranker_without_a_model_of_its_kind_is_refused():
    cfg = AutofocusConfig(reranker="cross-encoder")
    with pytest.raises(ValueError, match="autofocus adapt"):
        make_reranker(cfg, "local")

    class Parts:
        reranker = BiEncoderModel.__new__(BiEncoderModel)

    with pytest.raises(ValueError, match="its trained reranker is a bi-encoder"):
        make_reranker(cfg, "local", trained=Parts())
    assert make_reranker(AutofocusConfig(), "local", trained=Parts()).method == "bi-encoder"  # auto: the trained one
    assert make_reranker(AutofocusConfig(), "local") is None  # auto without a trained model: as before
    assert load_trained(None, None) is None


def test_candidate_text_reads_name_type_document_and_relations(tiny_skb):
    text = candidate_text(tiny_skb, 11)
    assert text.startswith("Multi-hop Reasoning over Graphs (paper)\nAnswering questions that need several hops")
    # every relationship type in words where the budget has room, in both directions
    assert "paper cites paper: Graph Retrieval at Scale; Cypher Queries from Text" in text
    assert "paper has topic field: Natural Language Processing; Information Retrieval" in text
    assert "<- author writes paper: Grace Hopper; Ada Lovelace" in text


def test_an_unknown_reranker_kind_is_refused_before_any_work(tmp_path):
    from typer.testing import CliRunner

    from autofocus.cli import app

    out = tmp_path / "adapted.json"
    result = CliRunner().invoke(app, ["adapt", "--skb", str(tmp_path), "--templates", "5", "--reranker-kind",
                                      "biencoder", "--out", str(out)])
    assert result.exit_code == 2 and "--reranker-kind must be one of cross-encoder, bi-encoder" in result.output
    assert not out.exists() and not parts_folder(out).exists()
    with pytest.raises(ValueError, match="unknown reranker kind 'biencoder'"):  # the Python API, as the options are made
        AdaptOptions(out=out, templates=5, reranker_kind="biencoder")
    assert AdaptOptions(reranker_kind="cross-encoder").hard_negatives == 7 and AdaptOptions().hard_negatives == 3
    with pytest.raises(ValueError, match="negatives must be at least 1"):
        AdaptOptions(negatives=0)


def _damaged_reranker(tmp_path: Path, kind: str, damage: str) -> Path:
    """A trained-parts folder whose reranker is the packaged MiniLM with ``damage`` done to its files."""
    from autofocus.adapt.reranker import base_model_dir

    folder, base = tmp_path / f"{damage}.trained", base_model_dir(None)
    reranker = folder / "reranker"
    shutil.copytree(base, reranker, ignore=shutil.ignore_patterns("model.safetensors"))
    weights = (base / "model.safetensors").read_bytes()
    if damage == "truncated":
        (reranker / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    elif damage == "garbage":
        (reranker / "model.safetensors").write_bytes(np.random.default_rng(0).bytes(4096))
    elif damage == "bad config":
        (reranker / "model.safetensors").write_bytes(weights)
        (reranker / "config.json").write_text("{not json")
    write_manifest(folder, {"reranker": {"kind": kind, "max_length": 64}})
    return folder


@pytest.mark.parametrize("kind", ["bi-encoder", "cross-encoder"])
@pytest.mark.parametrize("damage", ["truncated", "deleted", "garbage", "bad config"])
def test_damaged_weights_are_named_in_one_line_before_any_export(tmp_path, monkeypatch, kind, damage):
    """A trained reranker whose weights are cut short, deleted or garbage, or whose config is unreadable: the
    trained-parts error naming the file, at once, and no export folder begun for it."""
    import time

    monkeypatch.setenv("AUTOFOCUS_MODELS", str(tmp_path / "models"))
    folder = _damaged_reranker(tmp_path, kind, damage)
    start = time.perf_counter()
    with pytest.raises(TrainedPartsError) as caught:
        TrainedParts.load(folder)
    message = str(caught.value)
    assert "\n" not in message and time.perf_counter() - start < 10
    named = "config.json" if damage == "bad config" else "model.safetensors"
    assert message.startswith(str(folder / "reranker" / named)) and "autofocus adapt" in message
    assert not (tmp_path / "models").exists() or not any((tmp_path / "models").iterdir())


# --- the output: a working model is never lost, an unwritable --out refused, too few questions said -----


def _tiny_kb(two_type_skb, tmp_path, monkeypatch):
    from autofocus.skb.skbdir import load_skb_dir

    kb = make_kb(load_skb_dir(two_type_skb, progress=False), tmp_path / "index", source=two_type_skb)
    monkeypatch.setattr(runtime, "open_kb", lambda *args, **kw: kb)
    return kb


def test_adapting_again_keeps_the_working_model_until_the_new_one_is_complete(two_type_skb, tmp_path, monkeypatch):
    """A second `adapt` to the same --out: the first model stays whole (manifest and all) while the second
    trains and after it is interrupted; a completed one replaces it and leaves nothing beside it."""
    import autofocus.adapt.run as adapt_run

    kb = _tiny_kb(two_type_skb, tmp_path, monkeypatch)
    out = tmp_path / "out" / "adapted.json"
    first = adapt(two_type_skb, AutofocusConfig(), AdaptOptions(out=out, splits=("train", "test"), reranker=False))
    manifest = (first.folder / "manifest.json").read_text()
    seen: list[bool] = []

    def interrupted(*args, **kwargs):
        TrainedParts.load(first.folder, kb.skb)  # usable while training
        seen.append((first.folder / "manifest.json").read_text() == manifest)
        raise KeyboardInterrupt

    monkeypatch.setattr(adapt_run, "train_reranker", interrupted)
    with pytest.raises(KeyboardInterrupt):
        adapt(two_type_skb, AutofocusConfig(), AdaptOptions(out=out, splits=("train",), epochs=1))
    assert seen == [True]
    assert (first.folder / "manifest.json").read_text() == manifest  # the old model, untouched
    assert runtime.open_program(kb, "afr", None, out, lms=False).trained.folder == first.folder.resolve()
    second = adapt(two_type_skb, AutofocusConfig(), AdaptOptions(out=out, splits=("train",), reranker=False, seed=1))
    assert json.loads((second.folder / "manifest.json").read_text())["options"]["seed"] == 1
    assert sorted(p.name for p in out.parent.iterdir() if not p.name.endswith(".lock")) == [
        "adapted.json", "adapted.summary.json", "adapted.trained"]  # no work folder left beside it


@pytest.mark.parametrize("where", ["a read-only folder", "a file where the folder should be"])
def test_an_out_that_cannot_be_written_is_refused_before_any_work(two_type_skb, tmp_path, monkeypatch, where):
    import os

    from typer.testing import CliRunner

    from autofocus.cli import app

    if where == "a read-only folder":
        if os.geteuid() == 0:
            pytest.skip("root writes into a read-only folder")
        parent = tmp_path / "locked"
        parent.mkdir(mode=0o555)
    else:
        parent = tmp_path / "file"
        parent.write_text("")
    out = parent / "adapted.json"

    def no_work(*args, **kwargs):
        raise AssertionError("the knowledge base was opened: work began before the refusal")

    monkeypatch.setattr(runtime, "open_kb", no_work)
    with pytest.raises(ValueError, match=rf"--out {out}: cannot write in {parent} \("):
        adapt(two_type_skb, AutofocusConfig(), AdaptOptions(out=out, templates=5))
    result = CliRunner().invoke(app, ["adapt", "--skb", str(two_type_skb), "--templates", "5", "--out", str(out)])
    assert result.exit_code == 1 and f"cannot write in {parent}" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


@pytest.mark.slow
def test_too_few_questions_to_hold_any_out_is_said_and_recorded(two_type_skb, tmp_path, monkeypatch):
    """Three questions: none held out, a warning, and the manifest records that the epoch and the fusion
    weight are the defaults, not chosen (the tiny bi-encoder trains one epoch on a few triplets)."""
    from autofocus.progress import LogReporter

    _tiny_kb(two_type_skb, tmp_path, monkeypatch)
    notes: list[tuple[str, str]] = []

    class Notes(LogReporter):
        def note(self, text: str, level: str = "info") -> None:
            notes.append((text, level))

    options = AdaptOptions(out=tmp_path / "adapted.json", splits=("train",), epochs=1, batch_size=8, max_length=32,
                           type_reader=False)
    result = adapt(two_type_skb, AutofocusConfig(), options, Notes())
    warnings = [t for t, level in notes if level == "warning" and t.startswith("no held-out questions")]
    assert warnings == ["no held-out questions: only 3 questions (at least 10 are needed to hold any out); the "
                        "reranker keeps its last epoch and the fusion weight the default 1.0"]
    manifest = json.loads((result.folder / "manifest.json").read_text())
    assert manifest["held_out"]["questions"] == 0 and "only 3 questions" in manifest["held_out"]["why"]
    assert manifest["held_out"]["defaults"]["reranker_epoch"] == "the last of 1 (none chosen)"
    assert manifest["reranker"]["fusion"] == {"fitted": False, "used": 1.0, "why": "no held-out questions"}
    rerank = json.loads(result.program.read_text())["config"]["rerank"]
    assert rerank["rerank_prior_weight"] == 1.0 and rerank["rerank_keep_block"] is True


# --- the judge: trained parts used only where questions like users' say they help -----------------


def _lists(n: int, kind: str, answer_at: int) -> list[tuple[list[int], set[int], str]]:
    return [(list(range(10)), {answer_at}, kind) for _ in range(n)]


def test_the_judge_uses_a_reranker_only_where_it_gains_and_no_kind_loses():
    from autofocus.adapt.judge import rerank_verdict

    def toward(node: int):  # a reranker sure of one candidate
        return lambda i: [0.99 if j == node else 0.01 for j in range(10)]

    lists = _lists(12, "textual", 3)
    assert rerank_verdict(lists, toward(3), weight=0.5).used  # raises the answer from 4th to 1st
    lost = rerank_verdict(_lists(12, "textual", 0), toward(3), weight=0.5)  # pushes the answer down
    assert not lost.used and "does not gain" in lost.reason and lost.overall["diff"] < 0
    mixed = [*_lists(30, "textual", 3), *_lists(10, "relational", 0)]
    scores = lambda i: toward(3)(i)  # noqa: E731  # gains on the textual, loses every relational one
    split = rerank_verdict(mixed, scores, weight=0.5)
    assert split.overall["diff"] > 0 and not split.used and "relational" in split.reason
    assert split.kinds["relational"]["diff"] < 0 and split.kinds["textual"]["diff"] > 0


def test_the_judge_keeps_step_1_without_a_reader_that_does_not_help():
    from autofocus.adapt.judge import type_reader_verdict

    right = ({"paper": 0.7, "author": 0.3}, {"paper": 0.2, "author": 0.8}, "paper", "relational")
    assert not type_reader_verdict([right] * 6, 1.0).used  # it turns right answers wrong
    wrong = ({"paper": 0.55, "author": 0.45}, {"paper": 0.1, "author": 0.9}, "author", "hybrid")
    assert type_reader_verdict([wrong] * 6, 1.0).used


@pytest.mark.slow
def test_a_reranker_that_loses_on_judge_questions_is_not_switched_on(two_type_skb, tmp_path, monkeypatch):
    """Judge questions whose answer steps 1-7 already rank first: a reranker can only lose there, so the
    program written keeps steps 1-7's order and says why."""
    from autofocus.adapt.judge import JudgeQuestion
    from autofocus.skb.skbdir import load_skb_dir

    kb = make_kb(load_skb_dir(two_type_skb, progress=False), tmp_path / "index", source=two_type_skb)
    monkeypatch.setattr(runtime, "open_kb", lambda *args, **kw: kb)
    asked = [QAItem(-1, "papers about graphs and questions", [0]), QAItem(-2, "who wrote about ranking", [4]),
             QAItem(-3, "a survey of knowledge base question answering", [3])]
    firsts = mine(_program(kb), asked, sources=["vector"])
    judge = [JudgeQuestion(m.item.query, (m.lists["vector"][0],), kind) for m, kind in
             zip(firsts, ("textual", "hybrid", "textual"), strict=True)]
    options = AdaptOptions(out=tmp_path / "out" / "adapted.json", splits=("train",), templates=16, epochs=1,
                           batch_size=8, max_length=96, val_share=0.3, judge_questions=judge)
    result = adapt(two_type_skb, AutofocusConfig(), options)
    manifest = json.loads((result.folder / "manifest.json").read_text())
    judged = manifest["reranker"]["judged"]
    assert not judged["used"] and judged["overall"]["a"] == 1.0 and "does not gain" in judged["reason"]
    assert manifest["judge"]["questions"] == 3 and manifest["reranker"]["val_source"] == "judge"
    assert not manifest["type_reader"]["judged"]["used"]  # no run recorded step 1 on the judge questions
    saved = json.loads(result.program.read_text())["config"]
    assert saved["steps"] == "1-7" and saved["rerank"]["reranker"] == "none"
    program = runtime.open_program(kb, "afr", None, result.program, lms=False)
    assert not isinstance(program.reranker, TrainedReranker)


@pytest.mark.slow
@pytest.mark.parametrize(("source", "judge"), [("mix", ()), ("templates", ("lm",))])
def test_the_lm_is_asked_for_judge_questions_by_its_sources_or_by_judge_lm(two_type_skb, tmp_path, monkeypatch,
                                                                           source, judge):
    """``--questions mix`` and no ``--judge``, or any source with ``--judge lm``: the judge is the LM's questions
    about held-out nodes (asked with the adaptation's seed, share and LM), never trained on; here they favour
    steps 1-7, so step 8 stays off."""
    import autofocus.adapt.questions as questions
    import autofocus.adapt.run as run
    from autofocus.skb.skbdir import load_skb_dir
    from autofocus.synthetic.natural import NaturalQuestion

    kb = make_kb(load_skb_dir(two_type_skb, progress=False), tmp_path / "index", source=two_type_skb)
    monkeypatch.setattr(runtime, "open_kb", lambda *args, **kw: kb)
    asked = [QAItem(-1, "papers about graphs and questions", [0]), QAItem(-2, "who wrote about ranking", [4]),
             QAItem(-3, "a survey of knowledge base question answering", [3])]
    firsts = [m.lists["vector"][0] for m in mine(_program(kb), asked, sources=["vector"])]
    written = [NaturalQuestion(q.query, (node,), kind, kb.skb.type_of(node), node)
               for q, node, kind in zip(asked, firsts, ("textual", "hybrid", "textual"), strict=True)]
    calls: list[dict] = []

    def judge_questions(skb, cfg, **kw):
        calls.append(kw)
        return written

    monkeypatch.setattr(run, "judge_questions", judge_questions)
    asked_step1: list[tuple[list[str], str | None]] = []

    def step1_probabilities(kb_, system, cfg, queries, lm=None, reporter=None):  # the LM's step 1, scripted
        asked_step1.append((list(queries), lm))
        types = list(kb_.skb.schema.answer_types)
        return {q: {t: 1.0 / len(types) for t in types} for q in queries}

    monkeypatch.setattr(run, "step1_probabilities", step1_probabilities)
    monkeypatch.setattr(questions, "lm_writer", lambda *args: None)  # the training share: no LM here
    monkeypatch.setattr(questions, "natural_questions", lambda *args, **kw: ([], {"asked": 0}))
    options = AdaptOptions(out=tmp_path / "out" / "adapted.json", splits=("train",), templates=16, epochs=1,
                           batch_size=8, max_length=96, val_share=0.3, questions=source, lm="local", seed=3,
                           judge=judge)
    result = adapt(two_type_skb, AutofocusConfig(), options)
    assert [(c["lm"], c["seed"], c["judge_share"]) for c in calls] == [("local", 3, options.judge_share)]
    manifest = json.loads((result.folder / "manifest.json").read_text())
    assert manifest["judge"]["questions"] == 3 and manifest["judge"]["kinds"] == {"textual": 2, "hybrid": 1}
    assert not manifest["reranker"]["judged"]["used"]
    assert json.loads(result.program.read_text())["config"]["steps"] == "1-7"
    # step 1 is asked of the same LM on the judge questions, so the type reader is judged, not skipped
    assert asked_step1 == [([q.query for q in written], "local")]
    assert manifest["type_reader"]["judged"]["metric"] == "type accuracy"
    assert manifest["type_reader"]["judged"]["overall"]["n"] == 3


def test_judge_questions_carry_their_kind_from_the_qa_file(tiny_skb_data, tmp_path):
    from autofocus.adapt.judge import ALL, load_judge
    from autofocus.skb.writer import write_skb_dir

    data = tiny_skb_data
    write_skb_dir(tmp_path / "plain", data["schema"], data["nodes"], data["edges"], data["qa"], data["splits"])
    assert {q.kind for q in load_judge(tmp_path / "plain", ["train"], None, 12)} == {ALL}  # no kind column
    for row, kind in zip(data["qa"], ("relational", "hybrid", "textual", "hybrid", "relational", "textual"), strict=True):
        row["kind"] = kind
    write_skb_dir(tmp_path / "kinds", data["schema"], data["nodes"], data["edges"], data["qa"], data["splits"])
    judge = load_judge(tmp_path / "kinds", ["train", "val"], None, 12)
    assert [(q.query, q.answer_ids, q.kind) for q in judge[:1]] == [
        ("Which papers by Ada Lovelace were published at NeurIPS?", (0, 11), "relational")]
    assert [q.kind for q in judge] == ["relational", "hybrid", "textual", "hybrid"]
