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


def test_validate_warns_of_a_missing_standard_split_and_passes(tiny_skb_dir, tmp_path):
    """Splits are optional: a KB with only val and test questions is valid, with a warning per missing split."""
    path = tmp_path / "tiny"
    shutil.copytree(tiny_skb_dir, path)
    (path / "splits" / "train.index").unlink()
    res = runner.invoke(app, ["skb", "validate", str(path)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "warning: splits/train.index: missing: the standard split 'train'" in res.output
    assert "'val'" not in res.output and "OK" in res.output
    (path / "splits" / "val.index").unlink()
    with (path / "edges.csv").open("a") as fh:  # a real error still fails, and the warnings still show
        fh.write("4,author_writes_paper,77\n")
    bad = runner.invoke(app, ["skb", "validate", str(path)], env={"COLUMNS": "200"})
    assert bad.exit_code == 1
    assert "not a node id" in bad.output and "missing: the standard split 'val'" in bad.output


def test_text_from_skb_files_is_printed_as_text(tiny_skb_data, tmp_path):
    from autofocus.skb.writer import write_skb_dir

    data = tiny_skb_data
    data["nodes"][4]["name"] = "[/] :100: Ada"
    data["schema"]["node_types"]["author"]["name_field"] = "name"
    path = tmp_path / "odd"
    write_skb_dir(path, data["schema"], data["nodes"], data["edges"], data["qa"], data["splits"])
    res = runner.invoke(app, ["skb", "info", str(path), "--samples", "3"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "[/] :100: Ada" in res.output
    with (path / "edges.csv").open("a") as fh:
        fh.write("4,[bold]x[/],0\n")
    res = runner.invoke(app, ["skb", "validate", str(path)], env={"COLUMNS": "200"})
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit), res.output
    assert "[bold]x[/]" in res.output
