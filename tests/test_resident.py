"""``ask`` answered by the worker of a running ``lm serve`` (``autofocus.resident``): the same output and
exit code as in its own process, programs kept open, declined where its settings or LM are not the
worker's, and the whole path through a detached ``lm serve``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from autofocus import resident, runtime
from autofocus.cli import app
from autofocus.local_lm import registry
from autofocus.skb.skbdir import load_skb_dir
from tests.test_lm_serve import _alive, _record, _wait_until, cli, fake_llama, home  # noqa: F401 (fixtures)
from tests.test_systems_common import make_kb

QUESTION = "Which papers did Ada Lovelace write?"


def _request(argv: list[str], **env: str) -> dict[str, Any]:
    return {"argv": argv, "cwd": os.getcwd(), "env": {**resident.relevant_env(), **env}, "tty": [False, False],
            "columns": 0}


@pytest.fixture
def worker(tmp_path: Path) -> Any:
    w = resident.Worker(tmp_path / "w.sock").start()
    yield w
    w.stop()
    assert not w.path.exists()


def test_the_worker_answers_as_the_command_would_and_keeps_the_program_open(
    worker: resident.Worker, two_type_skb: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    kb = make_kb(load_skb_dir(two_type_skb), tmp_path / "kb", source=two_type_skb)
    opened: list[int] = []
    monkeypatch.setattr(runtime, "open_kb", lambda *args, **kw: opened.append(1) or kb)
    argv = ["ask", QUESTION, "--skb", str(two_type_skb), "--system", "vss", "-k", "3"]
    own = CliRunner().invoke(app, argv, env={"COLUMNS": None})
    first = resident._ask_worker(worker.path, _request(argv))
    second = resident._ask_worker(worker.path, _request(argv))
    assert own.exit_code == first["code"] == second["code"] == 0, first
    assert first["stdout"] == second["stdout"] == own.stdout and "Answers to" in own.stdout
    assert len(opened) == 2  # this process's run, then the worker's first: the second found it open
    (two_type_skb / "qa.csv").touch()  # a file of the knowledge base changed: opened anew
    assert resident._ask_worker(worker.path, _request(argv))["code"] == 0 and len(opened) == 3

    monkeypatch.undo()
    missing = resident._ask_worker(worker.path, _request(["ask", QUESTION, "--skb", str(tmp_path / "none"), "--system", "vss"]))
    assert missing["code"] == 1 and "none" in missing["stderr"]  # the command's own error, as it prints it
    assert resident._ask_worker(worker.path, _request(argv, AUTOFOCUS_HOME="/elsewhere"))["declined"]
    assert resident._ask_worker(worker.path, _request(["eval", "--skb", "x"]))["declined"]


def test_a_question_for_an_lm_the_worker_does_not_serve_is_declined(
    fake_llama: str, worker: resident.Worker, two_type_skb: Path, tmp_path: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # the worker starts in the environment that names the fake server
    kb = make_kb(load_skb_dir(two_type_skb), tmp_path / "kb", source=two_type_skb)
    monkeypatch.setattr(runtime, "open_kb", lambda *args, **kw: kb)
    argv = ["ask", QUESTION, "--skb", str(two_type_skb), "--system", "afr:steps=1-7", "--lm", fake_llama]
    answer = resident._ask_worker(worker.path, _request(argv))
    assert answer == {"declined": "its LM is not the one served here"}  # no server started in the worker
    assert not resident.serving()


def test_forward_finds_the_worker_of_a_served_server_and_falls_back_without_one(
    home: Path, two_type_skb: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str],  # noqa: F811
) -> None:
    kb = make_kb(load_skb_dir(two_type_skb), tmp_path / "kb", source=two_type_skb)
    monkeypatch.setattr(runtime, "open_kb", lambda *args, **kw: kb)
    argv = ["ask", QUESTION, "--skb", str(two_type_skb), "--system", "vss"]
    assert resident.forward(argv) is None  # nothing served
    path = resident.socket_path(registry.record_path("m@1", "abc"))
    w = resident.Worker(path).start()
    try:
        with registry.serving("m@1", "abc") as publish:
            publish(registry.Record("m@1", "abc", os.getpid(), port=9, state="ready", worker=str(path)))
            assert resident.forward(argv) == 0
            assert "Answers to" in capfd.readouterr().out
            monkeypatch.setenv("AUTOFOCUS_RESIDENT", "0")
            assert resident.forward(argv) is None
    finally:
        w.stop()
    long = resident.socket_path(tmp_path / ("x" * 120) / "s.lock")  # too long for a socket: a private folder
    assert len(str(long)) <= resident.MAX_SOCKET_PATH and long.parent.stat().st_mode & 0o777 == 0o700


def test_a_detached_lm_serve_answers_ask_and_stops_its_worker(fake_llama: str, two_type_skb: Path) -> None:  # noqa: F811
    assert cli("lm", "serve", "--model", fake_llama, "--detach").exit_code == 0
    record = _record(fake_llama)
    assert record is not None and record.worker and Path(record.worker).exists()
    assert f"answers `ask` at {record.worker}" in cli("lm", "status").text
    ask = [sys.executable, "-m", "autofocus", "ask", QUESTION, "--skb", str(two_type_skb), "--lm", fake_llama,
           "--system", "afr:steps=1-7", "-k", "3"]
    done = subprocess.run(ask, capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert done.returncode in (0, 3) and "Answers to" in done.stdout, done.stderr
    assert cli("lm", "stop").exit_code == 0
    assert _wait_until(lambda: not _alive(record.pid), 15) and not Path(record.worker).exists()
