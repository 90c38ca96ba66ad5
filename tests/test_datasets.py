"""``autofocus.qa_dataset`` and ``autofocus.run_dataset``: QA splits and evaluation runs as ``datasets.Dataset``
tables with the columns users filter and join on, read from the files the commands write."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import autofocus
from autofocus.kb import KnowledgeBase
from autofocus.skb.errors import SKBFormatError
from autofocus.skb.model import SKB
from autofocus.skb.qa import load_qa
from tests.test_systems_common import make_kb


@pytest.fixture(scope="module")
def kb(tiny_skb: SKB, tiny_skb_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> KnowledgeBase:
    return make_kb(tiny_skb, tmp_path_factory.mktemp("kb"), source=tiny_skb_dir)


def test_a_split_is_a_dataset_with_the_qa_files_other_columns(tiny_skb_dir: Path, tmp_path: Path) -> None:
    ds = autofocus.qa_dataset(tiny_skb_dir, "train")
    items = load_qa(tiny_skb_dir, "train")
    assert ds.column_names[:3] == ["id", "query", "answer_ids"] and ds.num_rows == len(items) == 3
    assert ds[1] == {**ds[1], "id": 1, "query": items[1].query, "answer_ids": [1, 2, 11]}
    assert str(ds.features["answer_ids"].feature) == "Value('int64')"
    assert autofocus.qa_dataset(tiny_skb_dir, "test")["id"] == [5, 4]  # the split file's order

    kb_dir = tmp_path / "kb"  # a kind column, and a whole-file split with synth's columns in a qa_dir
    shutil.copytree(tiny_skb_dir, kb_dir)
    lines = (kb_dir / "qa.csv").read_text().splitlines()
    (kb_dir / "qa.csv").write_text("\n".join([lines[0] + ",kind", *(f"{row},{'hybrid' if i % 2 else 'relational'}"
                                                                     for i, row in enumerate(lines[1:]))]) + "\n")  # fmt: skip
    qa_dir = tmp_path / "synth"
    qa_dir.mkdir()
    (qa_dir / "qa_synthetic.csv").write_text('id,query,answer_ids,shape,cypher\n0,Which paper?,[1],1-hop,"MATCH (p) RETURN p"\n'
                                            '1,Who wrote it?,"[4, 5]",2-hop,\n')  # fmt: skip
    kinds = autofocus.qa_dataset(kb_dir, "train")
    assert kinds.filter(lambda q: q["kind"] == "hybrid")["id"] == [1]
    synthetic = autofocus.qa_dataset(kb_dir, "synthetic[1:]", qa_dir=qa_dir)
    assert synthetic.to_list() == [{"id": 1, "query": "Who wrote it?", "answer_ids": [4, 5], "shape": "2-hop", "cypher": ""}]
    with pytest.raises(KeyError, match="unknown split"):
        autofocus.qa_dataset(kb_dir, "nope")
    (qa_dir / "qa_synthetic.csv").write_text("id,query,answer_ids\nx,Which?,[1]\n")
    with pytest.raises(SKBFormatError, match="id is not an integer"):
        autofocus.qa_dataset(kb_dir, "synthetic", qa_dir=qa_dir)


def test_a_run_is_a_dataset_one_row_per_question_with_its_metrics(
    kb: KnowledgeBase, tiny_skb_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "vss-train"
    done = autofocus.evaluate(autofocus.open(kb, "vss", config={"k": 4}), split="train", out=out)
    ds = autofocus.run_dataset(out)
    assert ds.num_rows == 3 and set(ds["status"]) == {"ok"}
    assert ds["id"] == [r["id"] for r in done.run.records] and ds["gold"] == [r["gold"] for r in done.run.records]
    assert ds["hit@1"] == [r["metrics"]["hit@1"] for r in done.run.records]
    assert sum(ds["mrr"]) / 3 == pytest.approx(done.summary["metrics"]["mrr"]["mean"])
    assert ds.column_names.index("hit@5") < ds.column_names.index("hit@20")  # metrics in natural order
    assert json.loads(ds[0]["trace"])["system"] == "vss" and ds["lm_calls"] == [0, 0, 0]
    joined = ds.to_pandas().merge(autofocus.qa_dataset(tiny_skb_dir, "train").to_pandas(), on="id")
    assert (joined["query_x"] == joined["query_y"]).all()  # the run's questions are the split's

    lines = (out / "traces.jsonl").read_text().splitlines()  # a failed question: its metrics are None
    failed = {"id": 99, "query": "Which?", "gold": [1], "status": "error", "error": "RuntimeError: boom"}
    (out / "traces.jsonl").write_text("\n".join([*lines, json.dumps(failed)]) + "\n")
    row = autofocus.run_dataset(out).filter(lambda r: r["status"] == "error")[0]
    assert row["error"] == "RuntimeError: boom" and row["hit@1"] is None and row["trace"] is None
    with pytest.raises(FileNotFoundError, match="not a run directory"):
        autofocus.run_dataset(tmp_path)
