"""``autofocus skb build | info | validate`` end to end on the fixtures."""

from __future__ import annotations

import shutil
from pathlib import Path

from typer.testing import CliRunner

from autofocus.cli import app

runner = CliRunner()
STARK = Path(__file__).parent / "fixtures" / "stark"


def test_build_then_cache_hit(tiny_skb_dir, tmp_path):
    path = tmp_path / "tiny"
    shutil.copytree(tiny_skb_dir, path)
    first = runner.invoke(app, ["skb", "build", str(path)])
    assert first.exit_code == 0, first.output
    assert "Built cache" in first.output and "12 nodes" in first.output
    second = runner.invoke(app, ["skb", "build", str(path)])
    assert "Loaded from cache" in second.output
    forced = runner.invoke(app, ["skb", "build", str(path), "--force"])
    assert "Built cache" in forced.output


def test_info(tiny_skb_dir):
    result = runner.invoke(app, ["skb", "info", str(tiny_skb_dir)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    out = result.output
    assert "tiny-papers" in out and "12 nodes, 25 edges" in out
    assert "paper_published_in_venue" in out and "Ada Lovelace" in out
    assert "QA splits" in out and "train" in out


def test_info_stark_with_profile():
    result = runner.invoke(
        app, ["skb", "info", str(STARK / "mag_like"), "--profile", "mag"], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    assert "author___writes___paper" in result.output and "human_generated_eval" in result.output


def test_validate_ok_and_errors(tiny_skb_dir, tmp_path):
    ok = runner.invoke(app, ["skb", "validate", str(tiny_skb_dir)])
    assert ok.exit_code == 0 and "OK" in ok.output and "0 isolated nodes" in ok.output
    path = tmp_path / "broken"
    shutil.copytree(tiny_skb_dir, path)
    with (path / "edges.csv").open("a") as fh:
        fh.write("4,author_writes_paper,77\n")
    bad = runner.invoke(app, ["skb", "validate", str(path)], env={"COLUMNS": "200"})
    assert bad.exit_code == 1
    assert "edges.csv" in bad.output and "27" in bad.output and "not a node id" in bad.output
    missing = runner.invoke(app, ["skb", "validate", str(tmp_path / "nowhere")])
    assert missing.exit_code == 1
