"""``autofocus lm warm``: the prompts' shared start evaluated ahead, so that the first ``ask`` of a new
process restores it instead of evaluating it (the fake llama-server of ``test_lm_serve``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autofocus import runtime
from autofocus.local_lm import servers
from autofocus.skb.skbdir import load_skb_dir
from tests.test_lm_serve import cli, fake_llama, home  # noqa: F401  (fixtures)
from tests.test_systems_common import make_kb


def test_warm_saves_the_shared_start_and_the_first_ask_restores_it(fake_llama: str, two_type_skb: Path,  # noqa: F811
                                                                   tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kb = make_kb(load_skb_dir(two_type_skb), tmp_path / "kb", source=two_type_skb)
    monkeypatch.setattr(runtime, "open_kb", lambda *args, **kw: kb)
    warm = cli("lm", "warm", "--skb", two_type_skb, "--lm", fake_llama, "--system", "afr:steps=1-7")
    assert warm.exit_code == 0 and "evaluated" in warm.text and "saved" in warm.text, warm.output
    servers.stop_all()
    servers._SERVERS.clear()  # as the next process finds it: no server, the prompt cache on disk
    question = "Which papers did Ada Lovelace write?"
    first = cli("ask", question, "--skb", two_type_skb, "--lm", fake_llama, "--system", "afr:steps=1-7",
                "--trace-json", tmp_path / "t.json")
    assert "Answers to" in first.text and "first run" not in first.text, first.output
    started = json.loads((tmp_path / "t.json").read_text())["data"]["startup"]["prompt_cache"]
    assert started["evaluated"] == 0 and started["restored"] >= 1
    again = cli("lm", "warm", "--skb", two_type_skb, "--lm", fake_llama, "--system", "afr:steps=1-7")
    assert again.exit_code == 0 and "already saved" in again.text, again.output


def test_warm_of_a_program_without_an_lm_says_so(two_type_skb: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    kb = make_kb(load_skb_dir(two_type_skb), tmp_path / "kb", source=two_type_skb)
    monkeypatch.setattr(runtime, "open_kb", lambda *args, **kw: kb)
    res = cli("lm", "warm", "--skb", two_type_skb, "--system", "vss")
    assert res.exit_code == 0 and "nothing to warm" in res.text, res.output
