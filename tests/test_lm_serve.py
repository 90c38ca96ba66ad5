"""The offline LM server's lifecycle without a model: ``lm serve``/``status``/``stop`` and the registry that
lets runs find a served server of their settings, the prompt cache on disk, start-up reported apart from
the steps, and the failures of issue 47 item 6 (a taken port, a server that ignores SIGTERM, one that
never answers or never starts, slot folders left behind). The server is ``tests/fake_openai_server.py``,
run as llama-server would be (``AUTOFOCUS_LLAMA_SERVER``) or as a given command; its slot actions write
and read files as llama-server's do."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import dspy
import pytest
from typer.testing import CliRunner

from autofocus import runtime
from autofocus.cli import app
from autofocus.lm import get_lm
from autofocus.local_lm import models, registry, servers, slots, startup
from autofocus.local_lm import server as server_module
from autofocus.local_lm.server import LocalServer
from autofocus.local_lm.server_http import LocalServerError, open_direct
from autofocus.local_lm.server_log import failure_reason
from autofocus.local_lm.servers import get_server
from autofocus.local_lm.slots import share_prompt_starts, start_file
from autofocus.skb.skbdir import load_skb_dir
from tests.test_systems_common import make_kb

FAKE_SERVER = str(Path(__file__).with_name("fake_openai_server.py"))
RULES = "Sort things into kinds.\n" + "A kind has a one-word name.\n" * 12


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text().split("State:")[1].split("\n")[0]
    except (OSError, IndexError):
        return False
    return "zombie" not in state


def _wait_until(condition: Any, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _conv(thing: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": RULES}, {"role": "user", "content": f"Which kind is {thing}?"}]


def cli(*args: Any) -> Any:
    res = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "300"})
    res.text = " ".join(res.output.split())
    return res


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AUTOFOCUS_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("AUTOFOCUS_LLM_CTX", raising=False)
    monkeypatch.setattr(servers, "_SERVERS", {})  # this test's servers only
    yield tmp_path / "home"
    servers.stop_all()
    for record in registry.live():  # a test that failed half-way leaves no served server running
        registry.stop(record, timeout=10.0)


@pytest.fixture
def fake_llama(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, home: Path) -> str:
    """A llama-server stand-in (the fake server, scoring and saving slots) and a GGUF file: the spec."""
    script = tmp_path / "llama-server"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE_SERVER} --p_yes 0.8 --choices '{{}}' \"$@\"\n")
    script.chmod(0o755)
    monkeypatch.setenv("AUTOFOCUS_LLAMA_SERVER", str(script))
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF" + uuid.uuid4().bytes)
    return f"local:{gguf}"


def _record(spec: str) -> registry.Record | None:
    model = models.resolve_local(spec)
    return registry.find(model.alias, LocalServer(model.path, model.alias).fingerprint())


# --- lm serve, status, stop: runs find the server of their settings ----------------------------------


def test_a_served_server_is_used_by_runs_of_its_settings_only_and_stopped(fake_llama: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    res = cli("lm", "serve", "--model", fake_llama, "--detach", "--parallel", "3")
    assert res.exit_code == 0 and "serving tiny@" in res.text and "in the background" in res.text, res.output
    record = _record(fake_llama)
    assert record is not None and record.slots == 3 and _alive(record.pid)
    assert "already serving" in cli("lm", "serve", "--model", fake_llama, "--detach").text  # not a second one
    status = cli("lm", "status")
    assert record.alias in status.text and "answering" in status.text and str(record.pid) in status.text

    lm = get_lm(fake_llama, cache=False)
    assert lm.kwargs["api_base"] == f"http://127.0.0.1:{record.port}/v1"  # attached, not started
    served = servers._SERVERS[Path(fake_llama.removeprefix("local:")).resolve()]
    assert served.external and served.process is None and served.n_parallel == 3
    assert str(served.slot_dir) == record.slot_dir  # the served server's prompt cache
    with dspy.context(lm=lm):
        assert dspy.Predict("question -> answer")(question="q").answer == "fake"

    monkeypatch.setattr(servers, "_SERVERS", {})
    monkeypatch.setenv("AUTOFOCUS_LLM_CTX", "2048")  # other settings: never the served server
    other = get_lm(fake_llama, cache=False)
    assert other.kwargs["api_base"] != lm.kwargs["api_base"]
    servers.stop_all()

    res = cli("lm", "stop")
    assert res.exit_code == 0 and "stopped" in res.text
    assert _wait_until(lambda: not _alive(record.pid), 10) and registry.live() == []
    assert "no offline LM server is running" in cli("lm", "status").text


def test_a_killed_lm_serve_leaves_nothing_behind(fake_llama: str) -> None:
    slot_folders = set(Path(tempfile.gettempdir()).glob("autofocus-slots-*"))
    assert cli("lm", "serve", "--model", fake_llama, "--detach").exit_code == 0
    record = _record(fake_llama)
    assert record is not None
    watchdog = next(pid for pid in _children(record.pid) if _alive(pid))
    fake = _children(watchdog)
    assert fake, "the watchdog runs the server"
    os.kill(record.pid, signal.SIGKILL)
    assert _wait_until(lambda: not any(map(_alive, [watchdog, *fake])), 20), "the server outlived lm serve"
    path = registry.record_path(record.alias, record.fingerprint)
    assert _wait_until(lambda: path.read_text() == "", 5)  # its watchdog emptied the record
    assert registry.live() == [] and _record(fake_llama) is None
    assert set(Path(tempfile.gettempdir()).glob("autofocus-slots-*")) == slot_folders
    assert get_lm(fake_llama, cache=False)  # a run now starts its own


def test_a_stale_record_is_not_used_and_is_replaced(home: Path) -> None:
    path = registry.record_path("m@1", "abc")
    path.write_text(json.dumps({"alias": "m@1", "fingerprint": "abc", "pid": 1, "port": 9, "state": "ready"}))
    assert registry.read(path) == (False, None) and registry.find("m@1", "abc") is None  # nobody holds its lock
    with registry.serving("m@1", "abc") as publish:
        publish(registry.Record("m@1", "abc", os.getpid(), port=1234, state="ready"))
        found = registry.find("m@1", "abc")
        assert found is not None and found.port == 1234 and found.pid == os.getpid()
        with pytest.raises(registry.AlreadyServing, match=r"at 127\.0\.0\.1:1234"), registry.serving("m@1", "abc"):
            pass
    assert registry.find("m@1", "abc") is None and path.read_text() == ""


def test_a_run_waits_for_a_served_server_that_is_starting(fake_llama: str) -> None:
    model = models.resolve_local(fake_llama)
    fingerprint = LocalServer(model.path, model.alias).fingerprint()
    ready = threading.Event()

    def serve_soon() -> None:
        with registry.serving(model.alias, fingerprint) as publish:
            publish(registry.Record(model.alias, fingerprint, os.getpid()))  # starting
            time.sleep(1.0)
            publish(registry.Record(model.alias, fingerprint, os.getpid(), port=4321, state="ready", slots=2))
            ready.wait(10)

    thread = threading.Thread(target=serve_soon)
    thread.start()
    try:
        time.sleep(0.3)
        heard: list[tuple[str, str]] = []
        with startup.listening(lambda kind, text: heard.append((kind, text))):
            found = servers.served_or_own(model.path, model.alias)
        assert found.external and found.port == 4321 and found.n_parallel == 2
        assert ("wait", "waiting for `autofocus lm serve` to finish starting the offline LM") in heard
    finally:
        ready.set()
        thread.join()


def test_lm_serve_refuses_a_taken_port_in_one_line(fake_llama: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        res = cli("lm", "serve", "--model", fake_llama, "--port", taken.getsockname()[1])
    assert res.exit_code == 1 and "is taken" in res.text and "Traceback" not in res.output


# --- the prompt cache on disk -------------------------------------------------------------------------


def _cached_server(spec: str, tmp_path: Path) -> LocalServer:
    model = models.resolve_local(spec)
    return get_server(model.path, model.alias, log_path=tmp_path / "s.log", n_parallel=4)


def test_the_prompt_start_is_restored_from_disk_by_the_next_server(fake_llama: str, tmp_path: Path) -> None:
    families = [(_conv("a banana"), _conv("a hammer")), ([{"role": "user", "content": "Q: " + RULES + "x"}],
                                                         [{"role": "user", "content": "Q: " + RULES + "y"}])]
    first = _cached_server(fake_llama, tmp_path)
    assert first.slot_dir is not None and first.slot_dir.is_relative_to(Path(os.environ["AUTOFOCUS_HOME"]))
    heard: list[tuple[str, str]] = []
    with startup.listening(lambda kind, text: heard.append((kind, text))):
        evaluated = share_prompt_starts(get_lm(fake_llama, cache=False), families)
    assert len(evaluated) == 2 and min(evaluated) > 20  # each start evaluated once ...
    assert sorted(p.name for p in first.slot_dir.iterdir()) == sorted(start_file(s) for s in set(first.slots.slot_starts.values()))
    assert heard[0][0] == "wait" and "first run" in heard[0][1] and any(k == "note" for k, _ in heard)
    assert startup.claim()["prompt_cache"]["evaluated"] == sum(evaluated)

    servers.stop_all()
    servers._SERVERS.clear()
    second = _cached_server(fake_llama, tmp_path)  # a new server of the same settings: the same folder
    assert second.slot_dir == first.slot_dir and second.process is not None
    before = len(_stats(second)["paths"])
    with startup.listening(lambda kind, text: heard.append((kind, text))):
        assert share_prompt_starts(get_lm(fake_llama, cache=False), families) == [0, 0]  # ... and restored after
    paths = _stats(second)["paths"][before:]
    assert "/completion" not in paths and paths.count("/slots/0?action=restore") == 1
    assert sorted(second.slots.slot_starts) == [0, 1, 2, 3]
    assert ("wait", "restoring the prompt cache") in heard
    phase = startup.claim()["prompt_cache"]
    assert phase["restored"] == 2 and phase["evaluated"] == 0


def test_a_damaged_prompt_cache_file_is_evaluated_again(fake_llama: str, tmp_path: Path) -> None:
    server = _cached_server(fake_llama, tmp_path)
    lm = get_lm(fake_llama, cache=False)
    family = [(_conv("a banana"), _conv("a hammer"))]
    share_prompt_starts(lm, family)
    (saved,) = server.slot_dir.iterdir()  # type: ignore[union-attr]
    saved.write_bytes(b"\x00 half a file")
    assert share_prompt_starts(lm, family)[0] > 0  # not restored: evaluated and saved again
    assert json.loads(saved.read_text())  # a good file in its place


def test_the_prompt_cache_keeps_to_its_size_newest_first(tmp_path: Path) -> None:
    for i in range(5):
        path = tmp_path / f"start-{i}.bin"
        path.write_bytes(b"x" * 100)
        os.utime(path, (1000 + i, 1000 + i))
    (tmp_path / "start-9.bin.1-2.part").write_bytes(b"half")
    os.utime(tmp_path / "start-9.bin.1-2.part", (1000, 1000))  # a writer that died long ago
    slots.prune(tmp_path, limit=250)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["start-3.bin", "start-4.bin"]


def _stats(server: LocalServer) -> dict[str, Any]:
    with open_direct(f"{server.base_url}/fake/stats", 5) as resp:
        return json.load(resp)


# --- start-up reported apart from the steps --------------------------------------------------------------


def test_ask_says_why_the_first_run_is_slower_and_traces_its_start_up(fake_llama: str, two_type_skb: Path,
                                                                      tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kb = make_kb(load_skb_dir(two_type_skb), tmp_path / "kb", source=two_type_skb)
    monkeypatch.setattr(runtime, "open_kb", lambda *args, **kw: kb)
    question = "Which papers did Ada Lovelace write?"
    first = cli("ask", question, "--skb", two_type_skb, "--lm", fake_llama, "--system", "afr:steps=1-7", "--trace",
                "--trace-json", tmp_path / "t1.json")
    assert "Traceback" not in first.output and "Answers to" in first.text, first.output
    assert "first run with these prompts" in first.text and "offline LM started" in first.text
    startup_1 = json.loads((tmp_path / "t1.json").read_text())["data"]["startup"]
    assert startup_1["lm_server"]["how"] == "started" and startup_1["prompt_cache"]["evaluated"] > 0
    servers.stop_all()
    servers._SERVERS.clear()  # as a new process finds it: no server, the prompt cache on disk
    second = cli("ask", question, "--skb", two_type_skb, "--lm", fake_llama, "--system", "afr:steps=1-7", "--trace",
                 "--trace-json", tmp_path / "t2.json")
    assert "first run" not in second.text and "prompt cache restored" in second.text, second.output
    startup_2 = json.loads((tmp_path / "t2.json").read_text())["data"]["startup"]
    assert startup_2["prompt_cache"]["evaluated"] == 0 and startup_2["prompt_cache"]["restored"] >= 1
    assert "startup" not in json.loads((tmp_path / "t2.json").read_text())["steps"]  # apart from the steps


def test_a_phase_tells_its_listeners_and_is_claimed_once() -> None:
    heard: list[tuple[str, str]] = []
    with startup.listening(lambda kind, text: heard.append((kind, text))), startup.phase("x", "waiting for x") as detail:
        detail["how"] = "done"
    with startup.phase("y", "not heard"):
        pass
    assert heard == [("wait", "waiting for x"), ("done", "waiting for x")]
    taken = startup.claim()
    assert taken["x"]["how"] == "done" and taken["x"]["seconds"] >= 0 and "y" in taken
    assert startup.claim() == {}


# --- issue 47 item 6: failures of the server's life, each a clear line ---------------------------------------


def _fake(alias: str, *extra: str) -> list[str]:
    return [sys.executable, FAKE_SERVER, "--port", "{port}", "--model_alias", alias, *extra]


def test_a_port_another_listener_holds_is_retried(tmp_path: Path, home: Path) -> None:
    """A former port another listener holds (llama-server exits 1, saying "couldn't bind HTTP server
    socket"): the server is started again on the port the kernel gives it, and its words stay in its log."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        srv = LocalServer(tmp_path / "m.gguf", "m", command=_fake("m"), log_path=tmp_path / "s.log")
        srv.port = taken.getsockname()[1]
        with srv:
            assert srv.health() and srv.port != taken.getsockname()[1]
    assert "couldn't bind HTTP server socket" in (tmp_path / "s.log").read_text()


def test_a_taken_former_port_is_left_whatever_the_server_says_of_it(tmp_path: Path, home: Path) -> None:
    """A restart asks for the server's former port; where another listener holds it now, the server takes
    another, however it words its failure to bind (here: not at all, exiting 1 as llama-server does)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        srv = LocalServer(tmp_path / "m.gguf", "m", command=_fake("m", "--quiet_bind_failure"), log_path=tmp_path / "s.log")
        srv.port = taken.getsockname()[1]
        with srv:
            assert srv.health() and srv.port != taken.getsockname()[1]


def test_a_new_server_binds_the_port_the_kernel_gives_it(tmp_path: Path, home: Path) -> None:
    """No port is chosen for a new server (one found free can be taken before the server binds it): it is
    started on port 0 and found on the port it bound, its requests go there."""
    srv = LocalServer(tmp_path / "m.gguf", "m", command=_fake("m"), log_path=tmp_path / "s.log")
    with srv:
        assert srv.process is not None
        argv = list(srv.process.args)  # type: ignore[arg-type]
        assert argv[argv.index("--port") + 1] == "0"
        assert srv.port and srv.health() and srv.models() == ["m"]
        assert f"listening on http://127.0.0.1:{srv.port}" in (tmp_path / "s.log").read_text()


def test_a_server_that_fails_on_its_free_former_port_is_not_retried(tmp_path: Path, home: Path) -> None:
    """Only a former port another listener holds is left for another: a server that fails for any other
    reason is reported at once, in its own words."""
    srv = LocalServer(tmp_path / "m.gguf", "m", command=[sys.executable, "-c", "print('model file is corrupt'); exit(3)"],
                      log_path=tmp_path / "s.log")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        srv.port = probe.getsockname()[1]
    with pytest.raises(LocalServerError, match="model file is corrupt"):
        srv.start()
    assert (tmp_path / "s.log").read_text().count("starting on") == 1


def test_a_server_that_ignores_sigterm_is_killed_not_orphaned(tmp_path: Path, home: Path) -> None:
    srv = LocalServer(tmp_path / "m.gguf", "m", command=_fake("m", "--ignore_sigterm"), log_path=tmp_path / "s.log")
    srv.start()
    assert srv.process is not None
    (server_pid,) = _children(srv.process.pid)
    assert _wait_until(lambda: "ignores SIGTERM" in (tmp_path / "s.log").read_text(), 10)
    t0 = time.monotonic()
    srv.stop()
    assert _wait_until(lambda: not _alive(server_pid), 5), "a server that ignores SIGTERM was left running"
    assert time.monotonic() - t0 < server_module.STOP_WAIT_S + 5


def test_a_server_program_that_fails_gives_one_line(fake_llama: str, two_type_skb: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOFOCUS_LLAMA_SERVER", "/bin/false")
    kb = make_kb(load_skb_dir(two_type_skb), tmp_path / "kb", source=two_type_skb)
    monkeypatch.setattr(runtime, "open_kb", lambda *args, **kw: kb)
    res = cli("ask", "Which papers did Ada Lovelace write?", "--skb", two_type_skb, "--lm", fake_llama)
    assert res.exit_code == 1 and "Traceback" not in res.output, res.output
    (line,) = [line for line in res.output.splitlines() if line.strip()]
    assert "did not start: it exited with code 1 before serving, writing nothing" in res.text and "log:" in line


@pytest.mark.parametrize(("log", "reason"), [
    ("gguf_init_from_file_impl: failed to read magic\nllama_model_load: error loading model: llama_model_loader: "
     "failed to load model from /m.gguf\nmain: exiting due to model loading error", "failed to read magic"),
    ("llama_model_load: error loading model: error loading model architecture: unknown model architecture: 'mamba9'\n"
     "srv    load_model: failed to load model, '/m.gguf'", "error loading model: error loading model architecture: unknown model architecture: 'mamba9'"),
    ("main: loading model\nbuild: 1 (abc) with cc\nSegmentation fault", "it exited with code 139 before serving; its last "
     "words: Segmentation fault"),
])  # fmt: skip
def test_the_reason_a_server_did_not_start_is_its_first_error_line(log: str, reason: str) -> None:
    assert failure_reason(log, 139, None).startswith(reason)


def test_a_server_that_never_answers_is_named_within_the_attach_timeout(home: Path, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        monkeypatch.setenv("AUTOFOCUS_LLM_SERVER", f"127.0.0.1:{silent.getsockname()[1]}")
        monkeypatch.setattr(server_module, "ATTACH_TIMEOUT_S", 1.0)
        t0 = time.monotonic()
        with pytest.raises(LocalServerError, match=r"does not answer within 1 s"):
            get_server(tmp_path / "m.gguf", "m")
        assert time.monotonic() - t0 < 10
    srv = LocalServer(tmp_path / "m.gguf", "m", command=_fake("m", "--startup_delay", "30"), log_path=tmp_path / "s.log",
                      startup_timeout=1.0)
    with pytest.raises(LocalServerError, match="did not start: it did not answer within 1 s"):
        srv.start()
    assert srv.process is None


def test_no_slot_folder_is_made_outside_the_prompt_cache(tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    monkeypatch.setenv("AUTOFOCUS_LLAMA_SERVER", str(binary))
    tmp = tmp_path / "tmp"  # this test's own temporary folder: tests running in parallel write to theirs
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    argv = LocalServer(tmp_path / "m.gguf", "m@1", n_parallel=2).argv(1234)
    folder = Path(argv[argv.index("--slot-save-path") + 1])
    assert folder.parent.parent == home / "prompt-cache" and folder.name == "2-slots" and folder.is_dir()
    assert list(tmp.iterdir()) == []


def test_a_killed_run_leaves_no_server_and_no_folder(fake_llama: str, tmp_path: Path) -> None:
    """A run killed with SIGKILL (no atexit): its server goes with its watchdog; its slots were saved in
    the prompt cache, not in a folder of its own (its own temporary folder, which other tests running in
    parallel do not write to, stays empty)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    script = (f"import json, time\nfrom autofocus.lm import get_lm\nfrom autofocus.local_lm.servers import _SERVERS\n"
              f"get_lm({fake_llama!r})\nprint(json.dumps([s.process.pid for s in _SERVERS.values()]), flush=True)\n"
              "time.sleep(600)\n")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(Path(server_module.__file__).parents[2]), "TMPDIR": str(tmp)}
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=env, text=True)
    (watchdog,) = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
    fake = _children(watchdog)
    proc.kill()
    proc.wait()
    assert _wait_until(lambda: not any(map(_alive, [watchdog, *fake])), 20)
    assert list(tmp.iterdir()) == []


# --- another local user: the server's key, private folders and files ------------------------------------


def _http(url: str, key: str | None = None, body: dict[str, Any] | None = None) -> int:
    """The HTTP status of a GET (or, with ``body``, a POST) to ``url``, with ``key`` as its bearer token."""
    import urllib.error
    import urllib.request

    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    data = json.dumps(body).encode() if body is not None else None
    try:
        with open_direct(urllib.request.Request(url, data=data, headers=headers), 10.0) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_a_served_server_answers_its_owner_only_and_keeps_its_files_private(fake_llama: str, home: Path) -> None:
    (home / "servers").mkdir(parents=True, mode=0o755)  # as an earlier version left it: others could read it
    (home / "servers").chmod(0o755)
    assert cli("lm", "serve", "--model", fake_llama, "--detach").exit_code == 0
    record = _record(fake_llama)
    assert record is not None and record.api_key and record.api_key not in repr(record)
    base = f"http://127.0.0.1:{record.port}"
    save = {"filename": start_file("another user's start")}
    # another local user knows the port, not the key: llama-server's routes refuse them (its health check aside)
    assert [_http(f"{base}/props"), _http(f"{base}/slots/0?action=save", body=save)] == [401, 401]
    assert _http(f"{base}/health") == 200 and not (Path(record.slot_dir) / save["filename"]).exists()
    assert _http(f"{base}/props", record.api_key) == 200
    server_pid = next(p for w in _children(record.pid) for p in _children(w))
    assert record.api_key not in Path(f"/proc/{server_pid}/cmdline").read_text()  # readable by every user there
    lm = get_lm(fake_llama, cache=False)  # a run of the owner's sends the key the record keeps
    with dspy.context(lm=lm):
        assert dspy.Predict("question -> answer")(question="q").answer == "fake"
    served = servers._SERVERS[Path(fake_llama.removeprefix("local:")).resolve()]
    assert served.external and served.api_key == record.api_key and served.native()
    named = servers.attach_at(f"127.0.0.1:{record.port}", served.model_path, record.alias)  # AUTOFOCUS_LLM_SERVER
    assert named.api_key == record.api_key and named.native()  # its key found in the registry by its address
    assert share_prompt_starts(lm, [(_conv("a cat"), _conv("a dog"))]) != []  # slots saved with the key

    def mode(path: Path) -> int:
        return path.stat().st_mode & 0o777

    record_file = registry.record_path(record.alias, record.fingerprint)
    assert mode(home / "servers") == 0o700 and mode(record_file) == 0o600 and mode(Path(record.worker)) == 0o600
    folder = Path(record.slot_dir)
    assert [mode(p) for p in (folder, folder.parent, folder.parent.parent)] == [0o700] * 3
    saved = list(folder.glob("*.bin"))
    assert saved and {mode(p) for p in saved} == {0o600}
    assert cli("lm", "stop").exit_code == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_a_servers_folder_another_user_made_is_refused_in_one_line(fake_llama: str, home: Path) -> None:
    (home / "servers").mkdir(parents=True, mode=0o777)
    os.chown(home / "servers", 65534, 65534)  # made first by another local user (nobody)
    try:
        res = cli("lm", "serve", "--model", fake_llama, "--detach")
        assert res.exit_code == 1 and "belongs to another user (uid 65534)" in res.text, res.output
        assert "Traceback" not in res.output and list((home / "servers").iterdir()) == []
        assert cli("lm", "status").exit_code == 1
    finally:
        os.chown(home / "servers", os.getuid(), os.getgid())
        (home / "servers").chmod(0o700)


def test_an_ask_whose_served_server_is_killed_degrades_and_answers(fake_llama: str, tmp_path: Path,
                                                                   two_type_skb: Path) -> None:
    """``lm serve`` killed while a run of its own process (not its worker's) waits on its server: the
    question degrades as any LM outage does, without a traceback."""
    script = Path(os.environ["AUTOFOCUS_LLAMA_SERVER"])
    script.write_text(script.read_text().replace('"$@"', '--latency 1 "$@"'))  # each request takes a second
    assert cli("lm", "serve", "--model", fake_llama, "--detach").exit_code == 0
    record = _record(fake_llama)
    assert record is not None
    ask = [sys.executable, "-m", "autofocus", "ask", "Which papers did Ada Lovelace write?", "--skb", str(two_type_skb),
           "--lm", fake_llama, "--system", "afr:steps=1-7", "-k", "3", "--lm-retries", "0"]
    run = subprocess.Popen(ask, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env={**os.environ, "COLUMNS": "200", "AUTOFOCUS_RESIDENT": "0"})
    stats = f"http://127.0.0.1:{record.port}/fake/stats"

    def asked() -> bool:
        with open_direct(stats, 5.0) as resp:
            return json.load(resp)["requests"] > 0

    assert _wait_until(asked, 120), "the run never reached the served server"
    os.kill(record.pid, signal.SIGKILL)  # the watchdog then stops the server under the run
    out, err = run.communicate(timeout=300)
    assert run.returncode in (3, 4) and "Answers to" in out, err
    assert "degraded:" in err and "Traceback" not in err and "URLError" not in err
