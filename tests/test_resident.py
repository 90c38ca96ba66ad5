"""``ask`` answered by the worker of a running ``lm serve`` (``autofocus.resident``): the same output and
exit code as in its own process, programs kept open, declined where its settings or LM are not the
worker's, and the whole path through a detached ``lm serve``."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from autofocus import resident, runtime
from autofocus.cli import app
from autofocus.local_lm import registry, server_http
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


def test_requests_from_two_folders_read_their_own_relative_paths_and_leave_the_cwd_alone(
    worker: resident.Worker, two_type_skb: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    folders = [tmp_path / "a", tmp_path / "b"]
    for folder in folders:
        shutil.copytree(two_type_skb, folder / "kb")
    kb = make_kb(load_skb_dir(two_type_skb), tmp_path / "index", source=two_type_skb)
    seen: list[tuple[str, str]] = []
    monkeypatch.setattr(runtime, "open_kb", lambda path, *a, **kw: seen.append((str(path), os.getcwd())) or kb)
    here = os.getcwd()
    argv = ["ask", QUESTION, "--skb", "kb", "--system", "vss", "--trace-json", "trace.json"]
    answers: list[dict[str, Any]] = [{}, {}]

    def ask(i: int) -> None:
        answers[i] = resident._ask_worker(worker.path, {**_request(argv), "cwd": str(folders[i])})

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [a.get("code") for a in answers] == [0, 0], answers
    assert sorted(seen) == [(str(f / "kb"), here) for f in folders]  # each its own folder's; the cwd never moved
    assert all((f / "trace.json").is_file() for f in folders) and not Path(here, "trace.json").exists()
    assert os.getcwd() == here


def test_the_worker_keeps_a_bounded_number_of_programs_open(
    two_type_skb: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from autofocus import api

    monkeypatch.setattr(resident, "_OPENED", type(resident._OPENED)(resident.MAX_OPEN))
    made: list[str] = []
    monkeypatch.setattr(api, "open", lambda skb, system, **kw: made.append(system) or object())
    systems = [f"system{i}" for i in range(resident.MAX_OPEN + 1)]
    with resident._in_worker({"tty": [False, False], "cwd": str(tmp_path)}):
        for system in [*systems[:-1], systems[0], systems[-1]]:  # the first asked again: the second is the oldest
            resident.opened(two_type_skb, system, None, None)
        assert len(resident._OPENED) == resident.MAX_OPEN
        resident.opened(two_type_skb, systems[0], None, None)  # still open
        resident.opened(two_type_skb, systems[1], None, None)  # closed beyond the bound: opened again
    assert made == [*systems, systems[1]]


def test_a_configs_relative_trained_folder_is_the_clients(two_type_skb: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from autofocus import api
    from autofocus.config import AutofocusConfig

    monkeypatch.setattr(resident, "_OPENED", type(resident._OPENED)(resident.MAX_OPEN))
    given: list[str | None] = []
    monkeypatch.setattr(api, "open", lambda *a, config, **kw: given.append(config.trained) or object())
    for folder in ("a", "b"):  # the same config file's words from two folders: two programs
        with resident._in_worker({"tty": [False, False], "cwd": str(tmp_path / folder)}):
            resident.opened(two_type_skb, "vss", AutofocusConfig(trained="p.trained"), None)
    assert given == [str(tmp_path / "a" / "p.trained"), str(tmp_path / "b" / "p.trained")]


def test_a_knowledge_base_folder_is_listed_again_only_where_it_changed(two_type_skb: Path) -> None:
    first = resident._skb_stamp(two_type_skb)
    listed = resident._LISTED[two_type_skb.resolve()]
    assert first is not None and resident._skb_stamp(two_type_skb) == first
    assert resident._LISTED[two_type_skb.resolve()] is listed  # the same listing, its files stat'ed again
    (two_type_skb / "qa.csv").write_text((two_type_skb / "qa.csv").read_text() + "\n")  # changed in place
    assert resident._skb_stamp(two_type_skb) != first and resident._LISTED[two_type_skb.resolve()] is listed
    (two_type_skb / "splits" / "extra.json").write_text("[]")  # a file added: the folder listed anew
    assert any(s.startswith("splits/extra.json:") for s in resident._skb_stamp(two_type_skb) or ())
    (two_type_skb / "edges.csv").unlink()
    assert resident._skb_stamp(two_type_skb) is None  # no knowledge base now


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


# --- another local user, and requests that would stall or starve the worker ------------------------------


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_a_socket_folder_another_user_made_first_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    folder = tmp_path / f"autofocus-{os.getuid()}"
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)
    os.chown(folder, 65534, 65534)  # nobody made it first, open to all
    long = tmp_path / ("x" * 120) / "s.lock"
    with pytest.raises(PermissionError, match=r"belongs to another user \(uid 65534\)"):
        resident.socket_path(long)
    os.chown(folder, os.getuid(), os.getgid())  # the user's own, but others may write into it
    with pytest.raises(PermissionError, match="may be written by other users"):
        resident.socket_path(long)
    folder.rmdir()
    folder.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(PermissionError, match="symbolic link"):
        resident.socket_path(long)


def _forger(path: Path, ready: Any) -> int:
    """A process of another user (uid 65534) answering at ``path`` as a worker would, with a forged answer."""
    pid = os.fork()
    if pid == 0:  # the child: another local user
        try:
            os.setgid(65534)
            os.setuid(65534)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as srv:
                srv.bind(str(path))
                srv.listen()
                os.write(ready, b"x")
                conn, _ = srv.accept()
                conn.settimeout(5)
                with contextlib.suppress(OSError):
                    conn.recv(1 << 20)
                conn.sendall(json.dumps({"stdout": "FORGED ANSWER\n", "stderr": "", "code": 0}).encode() + b"\n")
                conn.close()
        finally:
            os._exit(0)
    return pid


@pytest.mark.skipif(os.geteuid() != 0, reason="a process of another user needs root")
def test_a_socket_another_user_put_in_place_gets_nothing(home: Path, capfd: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    shared = Path(tempfile.mkdtemp(dir="/tmp"))  # a folder both users reach
    shared.chmod(0o777)
    path = shared / "w.sock"
    said = None
    read_end, write_end = os.pipe()
    pid = _forger(path, write_end)
    try:
        assert os.read(read_end, 1) == b"x"
        with registry.serving("m@1", "abc") as publish:
            publish(registry.Record("m@1", "abc", os.getpid(), port=9, state="ready", worker=str(path)))
            said = resident.forward(["ask", QUESTION, "--skb", "x"])
        assert said is None and "FORGED" not in capfd.readouterr().out  # not its answer: this process answers
    finally:
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as poke:
            poke.connect(str(path))  # lets a forger still waiting end
        os.waitpid(pid, 0)
        shutil.rmtree(shared)


def _held(path: Path, data: bytes = b'{"argv": ["ask"') -> socket.socket:
    """A connection to the worker that sends part of a request and then holds on, never ending it."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(str(path))
    conn.sendall(data)
    return conn


def _within(seconds: float, fn: Any) -> Any:
    """``fn()``'s result, or a test failure where it takes over ``seconds`` (it is left to finish)."""
    done: list[Any] = []
    thread = threading.Thread(target=lambda: done.append(fn()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert done, f"no answer within {seconds} s"
    return done[0]


def test_a_connection_held_open_neither_blocks_others_nor_stays(worker: resident.Worker,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resident, "READ_TIMEOUT_S", 1.0, raising=False)
    held = _held(worker.path)
    try:
        answer = _within(5, lambda: resident._ask_worker(worker.path, _request(["eval", "--skb", "x"])))
        assert answer == {"declined": "not a command the worker answers"}  # answered while the other is held
        held.settimeout(5)
        dropped = json.loads(held.makefile("rb").readline())
        assert "not sent whole within 1 s" in dropped["declined"]  # and the held one was let go
    finally:
        held.close()


def test_a_client_hears_when_its_worker_falls_silent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resident, "SILENCE_S", 0.5, raising=False)
    path = tmp_path / "silent.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent:  # takes requests and never answers
        silent.bind(str(path))
        silent.listen()
        failed = _within(5, lambda: _raised(lambda: resident._ask_worker(path, _request(["ask", QUESTION]))))
    assert isinstance(failed, resident.NotTaken) and "said nothing for 0 s" in str(failed)


def _raised(fn: Any) -> Any:
    try:
        return fn()
    except Exception as exc:  # handed to the test's thread, raised there
        return exc


def test_a_request_over_the_size_cap_is_refused_unread(worker: resident.Worker) -> None:
    request = _request(["ask", "x" * (5 << 20), "--skb", "x"])  # a 5 MB question
    answer = _within(30, lambda: resident._ask_worker(worker.path, request))
    assert answer == {"declined": "the request is over 4 MiB"}


def test_a_folder_that_is_no_knowledge_base_is_not_looked_through(
    worker: resident.Worker, tmp_path: Path, two_type_skb: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    big = tmp_path / "big"
    for i in range(50):
        (big / f"d{i}").mkdir(parents=True)
        (big / f"d{i}" / "f").write_text("x")
    walked: list[str] = []
    real_walk, real_rglob = os.walk, Path.rglob
    monkeypatch.setattr(os, "walk", lambda top, *a, **k: walked.append(str(top)) or real_walk(top, *a, **k))
    monkeypatch.setattr(Path, "rglob", lambda self, *a, **k: walked.append(str(self)) or real_rglob(self, *a, **k))
    answer = resident._ask_worker(worker.path, _request(["ask", QUESTION, "--skb", str(big), "--system", "vss"]))
    assert answer["code"] == 1 and "is not an SKB" in answer["stderr"]  # the command's own words, at once
    assert not any(w.startswith(str(big)) for w in walked)  # no file under it looked at first


def test_settings_the_worker_sets_itself_do_not_turn_clients_away(
    home: Path, worker: resident.Worker, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str],  # noqa: F811
) -> None:
    plain = _request(["eval", "--skb", "x"])  # a plain shell's settings
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # what loading the embedder sets in the worker's process
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    assert resident._ask_worker(worker.path, plain) == {"declined": "not a command the worker answers"}  # taken
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-of-the-client")
    request = _request(["ask", QUESTION])
    assert "sk-secret" not in json.dumps(request)  # digests of the settings, never their values
    answer = resident._ask_worker(worker.path, request)
    assert "OPENAI_API_KEY" in answer["declined"]  # says which setting differs
    with registry.serving("m@1", "abc") as publish:  # and the command says it in one line
        publish(registry.Record("m@1", "abc", os.getpid(), port=9, state="ready", worker=str(worker.path)))
        assert resident.forward(["ask", QUESTION, "--skb", "x"]) is None
    err = capfd.readouterr().err
    assert f"worker (process {os.getpid()}) did not take this ask: its environment differs" in err
    assert "OPENAI_API_KEY" in err and len(err.strip().splitlines()) == 1


def test_a_worker_killed_during_an_ask_leaves_the_ask_to_its_own_process(fake_llama: str, two_type_skb: Path) -> None:  # noqa: F811
    script = Path(os.environ["AUTOFOCUS_LLAMA_SERVER"])
    script.write_text(script.read_text().replace('"$@"', '--latency 1 "$@"'))  # each request takes a second
    assert cli("lm", "serve", "--model", fake_llama, "--detach").exit_code == 0
    record = _record(fake_llama)
    assert record is not None
    ask = [sys.executable, "-m", "autofocus", "ask", QUESTION, "--skb", str(two_type_skb), "--lm", fake_llama,
           "--system", "afr:steps=1-7", "-k", "3"]
    run = subprocess.Popen(ask, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env={**os.environ, "COLUMNS": "200"})
    stats = f"http://127.0.0.1:{record.port}/fake/stats"

    def asked() -> bool:
        with server_http.open_direct(stats, 5.0) as resp:
            return json.load(resp)["requests"] > 0

    assert _wait_until(asked, 120), "the worker never reached its server"
    os.kill(record.pid, signal.SIGKILL)
    out, err = run.communicate(timeout=300)
    assert run.returncode in (0, 3) and "Answers to" in out, err
    assert f"the `lm serve` worker (process {record.pid}) ended before answering; answering in this process" in err
    assert "Traceback" not in err
