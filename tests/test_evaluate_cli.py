"""``autofocus eval / report / compare`` wiring, with a scripted system registered in the real registry.

The knowledge base is the tiny SKB loaded for real; its indexes are left out (the scripted program
needs none) through the ``autofocus.runtime.open_kb`` seam, with one index manifest on disk for the checksums.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import threading
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import dspy
import pytest
from typer.testing import CliRunner

import autofocus.commands.eval as eval_cmd
from autofocus import runtime
from autofocus.cli import app
from autofocus.cli_app import EXIT_PARTIAL
from autofocus.config import AutofocusConfig
from autofocus.evaluation.program_runs import run_dir_name, split_systems
from autofocus.program.systems import registry
from autofocus.skb.model import SKB
from autofocus.trace import Trace

CALLS: list[str] = []
LOCK = threading.Lock()


class ScriptedSystem(dspy.Module):
    """Ranks the candidate papers by a fixed rule that depends on ``k``, so configs change results."""

    def __init__(self, kb: Any, cfg: AutofocusConfig, spec: str) -> None:
        super().__init__()
        self.papers = [int(i) for i in kb.skb.candidate_ids]
        self.cfg, self.spec = cfg, spec

    def forward(self, question: str) -> dspy.Prediction:
        with LOCK:
            CALLS.append(question)
            n = len(CALLS)
        if INTERRUPT_ON_CALL and n == INTERRUPT_ON_CALL:
            raise KeyboardInterrupt
        trace = Trace(system=self.spec, question=question)
        with trace.step("7_vss_rest"):
            shift = len(question) % len(self.papers)
            ranked = (self.papers[shift:] + self.papers[:shift])[: self.cfg.merge.k]
        trace.data["target_type"] = "paper"
        trace.data["state"] = getattr(self, "state", None)
        return dspy.Prediction(ranked_ids=ranked, trace=trace)


INTERRUPT_ON_CALL = 0


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, tiny_skb: SKB, tiny_skb_dir: Path, tmp_path: Path) -> CliRunner:
    monkeypatch.setitem(registry._SYSTEMS, "scripted", (lambda kb, cfg, spec: ScriptedSystem(kb, cfg, spec), {}))
    index_root = tmp_path / "index"
    (index_root / "text").mkdir(parents=True)
    (index_root / "text" / "manifest.json").write_text(json.dumps({"sha256": "abc123"}))
    fake_kb = SimpleNamespace(
        skb=tiny_skb, store_dir=lambda variant: index_root / variant, embedder=SimpleNamespace(name="emb"),
        source=tiny_skb_dir,
    )
    monkeypatch.setattr(runtime, "open_kb", lambda path, embedder, *_: fake_kb)
    CALLS.clear()
    return CliRunner()


def invoke(cli: CliRunner, *args: str | Path) -> Any:
    return cli.invoke(app, [str(a) for a in args], terminal_width=200)


def said(res: Any, text: str) -> bool:
    """Whether the output holds ``text``, however the console wrapped it."""
    return re.sub(r"\s+", "", text) in re.sub(r"\s+", "", res.output)


def test_eval_writes_a_run_resumes_it_and_refuses_another_config(
    cli: CliRunner, tiny_skb_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "runs" / "scripted-train"
    args = ("eval", "--skb", tiny_skb_dir, "--split", "train", "--out", out, "--system", "scripted", "--no-progress")
    res = invoke(cli, *args)
    assert res.exit_code == 0, res.output
    assert len(CALLS) == 3 and "hit@1" in res.output and "3 questions" in res.output
    for name in ("traces.jsonl", "manifest.json", "summary.json", "summary.md", "funnel.png", "latency.png"):
        assert (out / name).is_file(), name
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["system"] == "scripted" and manifest["split"] == "train"
    assert manifest["skb"]["path"] == str(tiny_skb_dir) and manifest["skb"]["fingerprint"]
    assert manifest["index_checksums"] == {"emb/text": "abc123"}  # text+rel has no index on disk
    assert json.loads((out / "summary.json").read_text())["n"] == 3

    CALLS.clear()
    assert invoke(cli, *args).exit_code == 0 and CALLS == []  # everything was done

    res = invoke(cli, *args, "--steps", "1-7")
    assert res.exit_code == eval_cmd.EXIT_MISMATCH
    assert "config.steps: '1-8' -> '1-7'" in res.output and "--force-new" in res.output

    res = invoke(cli, *args, "--steps", "1-7", "--force-new", "--concurrency", "2")
    assert res.exit_code == 0 and len(CALLS) == 3
    assert len(list(out.glob("previous-*"))) == 1


def test_eval_limit_unknown_split_and_interrupt(cli: CliRunner, tiny_skb_dir: Path, tmp_path: Path) -> None:
    global INTERRUPT_ON_CALL
    out = tmp_path / "run"
    base = ("eval", "--skb", tiny_skb_dir, "--out", out, "--system", "scripted", "--no-progress")
    res = invoke(cli, *base, "--split", "nope")
    assert res.exit_code == 1 and "unknown split 'nope'" in res.output

    INTERRUPT_ON_CALL = 2
    try:
        res = invoke(cli, *base, "--split", "train", "--concurrency", "1")  # one thread: call 1 finishes first
    finally:
        INTERRUPT_ON_CALL = 0
    assert res.exit_code == eval_cmd.EXIT_INTERRUPTED
    assert "1 of 3 questions; run incomplete" in res.output and "run the same command again" in res.output

    CALLS.clear()
    res = invoke(cli, *base, "--split", "train", "--limit", "2")
    assert res.exit_code == 0 and len(CALLS) == 1 and "2 questions" in res.output


class DegradingSystem(ScriptedSystem):
    """The scripted system with an LM that gave no answer for every question but the first."""

    def forward(self, question: str) -> dspy.Prediction:
        pred = super().forward(question)
        if len(CALLS) > 1:
            pred.trace.degrade("1_target_type", "LMTransportError: connection refused")
        return pred


def test_eval_fails_loudly_when_too_many_questions_are_degraded(
    cli: CliRunner, tiny_skb_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(registry._SYSTEMS, "degrading", (lambda kb, cfg, spec: DegradingSystem(kb, cfg, spec), {}))
    base = ("eval", "--skb", tiny_skb_dir, "--split", "train", "--system", "degrading", "--no-progress")
    res = invoke(cli, *base, "--out", tmp_path / "a")
    assert res.exit_code == EXIT_PARTIAL, res.output
    assert said(res, "3 questions, 2 degraded (66.7%")
    assert said(res, "2 of 3 questions were not answered by the method (--max-degraded 10% of them may fall back")
    assert said(res, "2 fell back (1_target_type: LMTransportError (2))")
    CALLS.clear()
    res = invoke(cli, *base, "--out", tmp_path / "b", "--max-degraded", "0.7")
    assert res.exit_code == 0, res.output


def test_lm_waits_are_options_that_a_resume_may_change(cli: CliRunner, tiny_skb_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    base = ("eval", "--skb", tiny_skb_dir, "--split", "train", "--out", out, "--system", "scripted", "--no-progress")
    res = invoke(cli, *base, "--lm-timeout", "30", "--lm-retries", "1", "--deadline", "600", "--limit", "1")
    assert res.exit_code == 0, res.output
    config = json.loads((out / "manifest.json").read_text())["config"]["runtime"]
    assert (config["lm"]["timeout_s"], config["lm"]["num_retries"], config["question_deadline_s"]) == (30, 1, 600)
    res = invoke(cli, *base, "--lm-timeout", "90")  # how long to wait is not part of what was run
    assert res.exit_code == 0, res.output


def test_eval_on_damaged_files_names_the_place_without_a_traceback(
    cli: CliRunner, tiny_skb_dir: Path, tmp_path: Path
) -> None:
    skb = tmp_path / "skb"
    shutil.copytree(tiny_skb_dir, skb)
    base = ("eval", "--skb", skb, "--split", "train", "--system", "scripted", "--no-progress", "--out", tmp_path / "r")
    (skb / "qa.csv").write_text((tiny_skb_dir / "qa.csv").read_text().replace("[1, 2, 11]", "[1, 2, 999]"))
    res = invoke(cli, *base)
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit), res.output
    assert re.search(r"qa\.csv\s*│\s*3\s*│ question 1: answer id 999 is not a node id", res.output), res.output

    (skb / "qa.csv").write_text((tiny_skb_dir / "qa.csv").read_text().replace('"[1, 2, 11]"', "[/]"))
    res = invoke(cli, *base)  # Rich markup in qa.csv: printed as text
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit), res.output
    assert said(res, "answer_ids is not a JSON or Python list: '[/]'")

    (skb / "qa.csv").write_text((tiny_skb_dir / "qa.csv").read_text())
    (skb / "splits" / "train.index").write_text("0\n[/]\n")  # Rich markup in a file: printed as text
    res = invoke(cli, *base)
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit), res.output
    assert said(res, "not a question id: '[/]'")

    (skb / "splits" / "train.index").write_text((tiny_skb_dir / "splits" / "train.index").read_text())
    with (skb / "edges.csv").open("a") as fh:
        fh.write("4,[/],0\n")
    res = invoke(cli, *base)
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit), res.output
    assert "edges.csv" in res.output and "[/]" in res.output


def test_eval_refuses_to_resume_over_a_damaged_traces_line(cli: CliRunner, tiny_skb_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ("eval", "--skb", tiny_skb_dir, "--split", "train", "--out", out, "--system", "scripted", "--no-progress")
    assert invoke(cli, *args).exit_code == 0
    lines = (out / "traces.jsonl").read_text().splitlines(keepends=True)
    (out / "traces.jsonl").write_text("".join([lines[0], "garbage\n", *lines[1:]]))
    for command, code in ((args, eval_cmd.EXIT_MISMATCH), (("report", out), 1)):
        res = invoke(cli, *command)
        assert res.exit_code == code and isinstance(res.exception, SystemExit), res.output
        assert said(res, "traces.jsonl:2: not a valid JSON trace line")


def test_report_reprints_and_compares(cli: CliRunner, tiny_skb_dir: Path, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    common = ("eval", "--skb", tiny_skb_dir, "--split", "train", "--no-progress")
    assert invoke(cli, *common, "--out", a, "--system", "scripted").exit_code == 0
    assert invoke(cli, *common, "--out", b, "--system", "scripted:k=1").exit_code == 0
    (a / "summary.md").unlink()
    res = invoke(cli, "report", a, b)
    assert res.exit_code == 0, res.output
    assert "Comparison" in res.output and "Paired differences from scripted (a)" in res.output
    assert (a / "summary.md").is_file()
    res = invoke(cli, "report", a, b, "--comparisons", "7")
    assert res.exit_code == 0 and "adjusted for the comparisons made" in " ".join(res.output.split())
    res = invoke(cli, "report", tmp_path / "missing")
    assert res.exit_code != 0


def test_compare_runs_each_system_on_the_same_questions(cli: CliRunner, tiny_skb_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    res = invoke(
        cli, "compare", "--skb", tiny_skb_dir, "--split", "train", "--systems", "scripted,scripted:k=1,alpha=0.5",
        "--out", out, "--limit", "2", "--no-progress",
    )
    assert res.exit_code == 0, res.output
    assert len(CALLS) == 4
    assert (out / "scripted" / "traces.jsonl").is_file() and (out / "scripted_k=1_alpha=0.5" / "traces.jsonl").is_file()
    md = (out / "comparison.md").read_text()
    assert "| scripted | 2 |" in md and "| scripted:k=1,alpha=0.5 | 2 |" in md and "Paired differences" in md
    rows = (out / "comparison.csv").read_text().splitlines()
    assert rows[0].startswith("system,n,errors,degraded,hit@1") and len(rows) == 3
    manifest = json.loads((out / "scripted_k=1_alpha=0.5" / "manifest.json").read_text())
    assert manifest["config"]["merge"]["k"] == 1 and manifest["config"]["merge"]["alpha"] == 0.5

    res = invoke(cli, "compare", "--skb", tiny_skb_dir, "--systems", "scripted", "--out", out)
    assert res.exit_code == 1 and "at least two systems" in res.output


def test_split_systems_and_dir_names() -> None:
    assert split_systems("afr,afr:steps=1-7, vss") == ["afr", "afr:steps=1-7", "vss"]
    assert split_systems("afr:reranker=pairwise,alpha=0.5,vss") == ["afr:reranker=pairwise,alpha=0.5", "vss"]
    assert run_dir_name("afr:reranker=pairwise,alpha=0.5") == "afr_reranker=pairwise_alpha=0.5"


def test_eval_with_a_saved_program_uses_its_system_config_and_state(
    cli: CliRunner, tiny_skb_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The saved-program contract of ``autofocus.program.saved`` (as ``autofocus.runtime`` uses it)."""
    saved = ModuleType("autofocus.program.saved")

    def read_program_config(path: Path) -> tuple[str, AutofocusConfig]:
        data = json.loads(Path(path).read_text())
        return data["system"], AutofocusConfig.model_validate(data["config"])

    def load_program_state(program: Any, path: Path) -> None:
        program.state = json.loads(Path(path).read_text())["state"]

    saved.read_program_config, saved.load_program_state = read_program_config, load_program_state
    saved.ProgramFileError = type("ProgramFileError", (ValueError,), {})
    monkeypatch.setitem(sys.modules, "autofocus.program.saved", saved)
    prog = tmp_path / "optimised.json"
    prog.write_text(json.dumps({"system": "scripted", "config": {"k": 2, "alpha": 0.4}, "state": "tuned"}))
    out = tmp_path / "run"
    res = invoke(cli, "eval", "--skb", tiny_skb_dir, "--split", "train", "--out", out, "--program", prog,
                 "--reranker", "none", "--no-progress")
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["system"] == "scripted" and manifest["program"]["sha256"]
    assert (manifest["config"]["merge"]["k"], manifest["config"]["merge"]["alpha"], manifest["config"]["rerank"]["reranker"]) == (2, 0.4, "none")
    recs = [json.loads(x) for x in (out / "traces.jsonl").read_text().splitlines()]
    assert all(r["trace"]["data"]["state"] == "tuned" and len(r["ranked"]) == 2 for r in recs)
    prog.write_text(json.dumps({"system": "scripted", "config": {"k": 2, "alpha": 0.4}, "state": "retuned"}))
    res = invoke(cli, "eval", "--skb", tiny_skb_dir, "--split", "train", "--out", out, "--program", prog,
                 "--reranker", "none", "--no-progress")
    assert res.exit_code == eval_cmd.EXIT_MISMATCH and "program.sha256" in res.output
