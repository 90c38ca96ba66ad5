"""``autofocus index ...`` and ``autofocus search`` on the tiny SKB with the real packaged embedder."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from autofocus.cli import app
from autofocus.index.onnx_model import onnx_available
from autofocus.index.store import EmbeddingStore

runner = CliRunner()


@pytest.fixture(scope="module")
def skb_dir(tmp_path_factory: pytest.TempPathFactory, tiny_skb_dir: Path) -> Path:
    """A private copy: its SKB cache and indexes are written under the isolated autofocus home."""
    path = tmp_path_factory.mktemp("cli") / "tiny"
    shutil.copytree(tiny_skb_dir, path)
    return path


def run(*args: str) -> str:
    result = runner.invoke(app, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_build_then_search_then_info(skb_dir: Path, tmp_path: Path) -> None:
    out = run("index", "build", str(skb_dir), "--index-dir", str(tmp_path))  # the variants the default config searches
    assert "text+rel" in out and "12/12" in out
    stores = sorted(p.parent for p in tmp_path.glob("*/*/manifest.json"))
    assert sorted(p.name for p in stores) == ["text+rel-128t", "text-128t"]
    assert list((stores[0] / "faiss" / "flat").glob("*.faiss"))

    out = run("search", "multi-hop question answering over knowledge graphs", "--skb", str(skb_dir),
              "--type", "paper", "-k", "3", "--index-dir", str(tmp_path))
    rows = [line for line in out.splitlines() if line.startswith("│")]
    assert len(rows) == 3 and "Multi-hop Reasoning over Graphs" in rows[0]

    out = run("index", "info", str(skb_dir), "--index-dir", str(tmp_path), "--verify")
    assert out.count("verified") == 2
    stale, old = EmbeddingStore.open(stores[0], writable=True), EmbeddingStore.open(stores[1], writable=True)
    stale.manifest.documents = "0" * 16  # built by a rendering that is gone
    stale.save_manifest()
    old.manifest.documents = None  # built before digests
    old.save_manifest()
    out = " ".join(run("index", "info", str(skb_dir), "--index-dir", str(tmp_path)).split())
    assert "stale: the documents render differently" in out and "undated: built before" in out


def test_build_only_the_variants_a_config_searches_with_a_chosen_backend(skb_dir: Path, tmp_path: Path) -> None:
    config = tmp_path / "steps17.json"
    config.write_text('{"steps": "1+7"}')  # step 7 alone searches: its variant alone is built
    out = run("index", "build", str(skb_dir), "--config", str(config), "--embedder-backend", "torch", "--budget", "64",
              "--index-dir", str(tmp_path))
    stores = [EmbeddingStore.open(p.parent) for p in tmp_path.glob("*/*/manifest.json")]
    assert [(s.directory.name, s.manifest.model, s.manifest.doc_budget_tokens) for s in stores] == [
        ("text+rel-64t", "local:all-MiniLM-L6-v2@torch", 64)]
    assert "text+rel" in out and "64" in out
    result = runner.invoke(app, ["index", "build", str(skb_dir), "--embedder-backend", "tensorrt"])
    assert result.exit_code != 0 and "--embedder-backend must be one of" in result.output


@pytest.mark.skipif(not onnx_available(), reason="needs the onnx extra (onnxruntime, onnx)")
def test_an_onnx_built_index_answers_onnx_queries(skb_dir: Path, tmp_path: Path) -> None:
    run("index", "build", str(skb_dir), "--variant", "text", "--embedder-backend", "onnx-int8", "--index-dir", str(tmp_path))
    out = run("search", "multi-hop question answering over knowledge graphs", "--skb", str(skb_dir),
              "--type", "paper", "-k", "3", "--index-dir", str(tmp_path))  # no backend named: the index's own
    assert "local:all-MiniLM-L6-v2@onnx-int8" in out and "Multi-hop Reasoning over Graphs" in out


def test_search_errors_are_one_line(skb_dir: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["search", "x", "--skb", str(skb_dir), "--type", "planet", "--index-dir", str(tmp_path)])
    assert result.exit_code == 1 and "unknown node type 'planet'" in result.output
    result = runner.invoke(app, ["search", "x", "--skb", str(skb_dir), "--embedder", "openai/text-embedding-3-small",
                                 "--index-dir", str(tmp_path)])
    assert result.exit_code == 1 and "Queries must be embedded by the model" in result.output
    result = runner.invoke(app, ["search", "x", "--skb", str(skb_dir), "--variant", "rel"])
    assert result.exit_code != 0 and "--variant must be one of" in result.output


def test_import_then_search_needs_the_same_model(skb_dir: Path, tmp_path: Path) -> None:
    vecs = np.random.default_rng(0).standard_normal((12, 8)).astype(np.float32)
    torch.save({i: torch.from_numpy(vecs[i][None]) for i in (0, 1, 2, 3, 11)}, tmp_path / "candidate_emb_dict.pt")
    out = run("index", "import", str(tmp_path / "candidate_emb_dict.pt"), "--skb", str(skb_dir), "--variant", "text",
              "--model", "openai/text-embedding-ada-002", "--index-dir", str(tmp_path / "idx"))
    assert "imported 5/12 rows" in out and "7 nodes have no vector" in out
    store = EmbeddingStore.open(next((tmp_path / "idx").glob("*/text")))
    assert store.manifest.model == "openai/text-embedding-ada-002" and store.manifest.dim == 8

    torch.save({"graph retrieval": torch.from_numpy(vecs[0])}, tmp_path / "entity_emb_dict.pt")
    out = run("index", "import-queries", str(tmp_path / "entity_emb_dict.pt"), "--model",
              "openai/text-embedding-ada-002")
    assert "cached 1 query vectors" in out
    out = run("search", "graph retrieval", "--skb", str(skb_dir), "--embedder",
              "precomputed:openai/text-embedding-ada-002", "-k", "2", "--index-dir", str(tmp_path / "idx"))
    assert "Graph Retrieval at Scale" in out  # node 0's own vector was the query
    result = runner.invoke(app, ["search", "graph retrieval", "--skb", str(skb_dir), "--index-dir",
                                 str(tmp_path / "idx"), "--embedder", "openai/text-embedding-3-small"])
    assert result.exit_code == 1 and "built with: openai/text-embedding-ada-002 (text, imported)" in result.output


def test_info_prints_paths_and_model_names_as_text(skb_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import autofocus.commands.index as index_cmd

    # wide enough for the whole path: the console's width was fixed when it was made (pytest-xdist sets COLUMNS=80)
    monkeypatch.setattr(index_cmd.console, "_width", 400)
    odd = tmp_path / "[bold]idx[/bold]"  # Rich markup in a user's path
    vecs = np.ones((12, 4), dtype=np.float32)
    torch.save(torch.from_numpy(vecs), tmp_path / "vectors.pt")
    run("index", "import", str(tmp_path / "vectors.pt"), "--skb", str(skb_dir), "--variant", "text",
        "--model", "openai/text-embedding-3-small", "--index-dir", str(odd))
    result = runner.invoke(app, ["index", "info", str(skb_dir), "--index-dir", str(odd)])
    assert result.exit_code == 0, result.output
    assert "[bold]idx[/bold]" in result.output and "openai/text-embedding-3-small" in result.output
