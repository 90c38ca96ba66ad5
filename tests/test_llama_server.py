"""llama.cpp's server: which one runs and the build's bookkeeping without a compiler, then the real
server with a real model, once from the prebuilt wheel and once from a source build.

The second half is opt-in, as every run with the real offline model is (``AUTOFOCUS_E2E=1``: minutes of
model time on 2 cores), and needs what `make setup-lm` leaves (the wheel, or a source build in the
user's autofocus home, and a GGUF model: no test downloads weights); it skips, saying why, where either
is missing.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import dspy
import pytest

from autofocus.local_lm import server_build
from autofocus.local_lm.server_build import ServerBuildError

_USER_HOME = os.environ.get("AUTOFOCUS_HOME")  # captured before conftest points it at an empty folder


def test_server_command_prefers_the_configured_then_the_built_then_the_wheel(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOFOCUS_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(server_build.ENV, raising=False)
    monkeypatch.setattr(server_build, "wheel_installed", lambda: False)
    assert server_build.server_command() is None  # nothing built in this home, no wheel
    monkeypatch.setattr(server_build, "wheel_installed", lambda: True)
    assert server_build.server_command() == [sys.executable, "-m", "autofocus.local_lm.wheel_server"]
    built = server_build.cached_binary()
    assert built.name == f"llama-server-{server_build.LLAMA_CPP_VERSION}-{server_build.cpu_key()}"
    built.write_text("#!/bin/sh\necho version: 1\n")
    built.chmod(0o755)
    assert server_build.server_command() == [str(built)]  # a source build, once made, is preferred
    assert server_build.ensure_server(log=lambda m: None) == [str(built)]  # and not rebuilt
    monkeypatch.setenv(server_build.ENV, server_build.USE_WHEEL)
    assert server_build.server_command() == server_build.wheel_command()
    other = tmp_path / "my-llama-server"
    other.write_text("#!/bin/sh\nexit 1\n")
    other.chmod(0o755)
    monkeypatch.setenv(server_build.ENV, str(other))
    assert server_build.server_command() == [str(other)]
    with pytest.raises(ServerBuildError, match="does not start"):
        server_build.ensure_server(log=lambda m: None)


def test_where_no_wheel_fits_setup_compiles_and_says_why_and_for_how_long(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOFOCUS_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(server_build.ENV, raising=False)
    monkeypatch.setattr(server_build, "install_wheel", lambda log: "no xllamacpp wheel installs on this platform (x)")
    built = tmp_path / "llama-server"
    monkeypatch.setattr(server_build, "build_server", lambda log: built)
    said: list[str] = []
    assert server_build.ensure_server(log=said.append) == [str(built)]
    assert "no xllamacpp wheel installs on this platform (x); so llama-server is compiled from source" in said[-1]
    assert f"{server_build.BUILD_MINUTES} min on 2 cores" in said[-1]
    said.clear()
    monkeypatch.setattr(server_build, "install_wheel", lambda log: None)
    monkeypatch.setattr(server_build, "wheel_misfit", lambda: None)
    assert server_build.ensure_server(log=said.append) == server_build.wheel_command()  # the wheel fits: no compile
    assert server_build.ensure_server(log=said.append, native=True) == [str(built)]  # unless asked


def test_the_wheel_is_refused_on_a_cpu_without_its_instruction_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip(server_build.WHEEL, reason="the llama.cpp wheel is installed by `make setup-lm`")
    if server_build.platform.machine() != "x86_64":
        pytest.skip("the instruction sets are compared on x86-64")
    every = set(server_build._ISA_FLAGS.values())
    monkeypatch.setattr(server_build, "cpu_flags", lambda: every)
    assert server_build.wheel_misfit() is None  # a CPU with every instruction set runs it
    monkeypatch.setattr(server_build, "cpu_flags", lambda: every - {"avx2", "fma"})
    assert "AVX2, FMA, which this CPU lacks" in (server_build.wheel_misfit() or "")


def test_a_build_without_tools_says_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_build.shutil, "which", lambda name, path=None: None)
    monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(ServerBuildError, match=r"cmake and a C\+\+ compiler .* not found.*pip install cmake"):
        server_build.build_tools()


def test_cpu_key_is_stable() -> None:
    assert server_build.cpu_key() == server_build.cpu_key() and len(server_build.cpu_key()) == 12


def test_the_wheel_server_takes_every_option_the_server_is_started_with(tmp_path: Path) -> None:
    """The launcher maps each llama-server option ``LocalServer`` writes (an unknown one would stop it)."""
    pytest.importorskip(server_build.WHEEL, reason="the llama.cpp wheel is installed by `make setup-lm`")
    from autofocus.local_lm import wheel_server
    from autofocus.local_lm.server import LocalServer

    srv = LocalServer(tmp_path / "m.gguf", "m@abab", n_ctx=1024, n_parallel=3, n_threads=2, draft_model=tmp_path / "d.gguf")
    args = wheel_server.parser().parse_args(srv.llama_server_args([], 4321))
    p = wheel_server.params(args)
    assert p.model.path == str(tmp_path / "m.gguf") and p.model_alias == {"m@abab"} and p.port == 4321
    assert p.n_parallel == 3 and p.n_ctx == 3 * 1024 and not p.kv_unified and p.cpuparams.n_threads == 2
    assert p.slot_save_path == f"{srv.slot_dir}/" and p.endpoint_slots and not p.ui and not p.fit_params
    assert p.speculative.draft.mparams.path == str(tmp_path / "d.gguf")
    with pytest.raises(SystemExit):
        wheel_server.parser().parse_args(["--model", "m.gguf", "--flash-attn", "on"])


def _user_launcher(kind: str) -> tuple[str | None, str]:
    """The ``AUTOFOCUS_LLAMA_SERVER`` that runs ``kind`` as the user's setup left it, or None with the
    reason to skip."""
    if kind == "wheel":
        if not server_build.wheel_installed():
            return None, "the llama.cpp wheel is not installed: `make setup-lm` installs it"
        why = server_build.wheel_misfit()
        return (None, why) if why else (server_build.USE_WHEEL, "")
    saved = os.environ.get("AUTOFOCUS_HOME")
    try:
        if _USER_HOME:
            os.environ["AUTOFOCUS_HOME"] = _USER_HOME
        else:
            os.environ.pop("AUTOFOCUS_HOME", None)
        binary = server_build.cached_binary()
        if binary.is_file() and server_build.runs(binary):
            return str(binary), ""
        return None, "llama-server is not built from source here: `autofocus lm setup --native` builds it"
    finally:
        if saved is None:
            os.environ.pop("AUTOFOCUS_HOME", None)
        else:
            os.environ["AUTOFOCUS_HOME"] = saved


def _user_model() -> Path | None:
    from autofocus.local_lm.models import CATALOG

    home = Path(_USER_HOME) if _USER_HOME else Path.home() / ".cache" / "autofocus"
    for key in ("local-small", "local"):  # the smaller loads faster
        path = home / "models" / CATALOG[key].filename
        if path.is_file() and path.stat().st_size == CATALOG[key].size:
            return path
    return None


@pytest.fixture(scope="module", params=["wheel", "source build"])
def real_server(request: pytest.FixtureRequest) -> Iterator[tuple[dspy.LM, Path]]:
    if os.environ.get("AUTOFOCUS_E2E") != "1":
        pytest.skip("the real server with the real model is opt-in: set AUTOFOCUS_E2E=1")
    launcher, why = _user_launcher(request.param)
    if launcher is None:
        pytest.skip(why)
    model = _user_model()
    if model is None:
        pytest.skip("no offline model provisioned: `make setup-lm` (tests never download weights)")
    from autofocus.local_lm.server import LocalServer
    from autofocus.local_lm.servers import _SERVERS

    mp = pytest.MonkeyPatch()
    mp.setenv(server_build.ENV, launcher)
    srv = LocalServer(model, "real@test", n_ctx=2048, n_parallel=4)
    srv.start()
    _SERVERS[model.resolve()] = srv  # as get_server registers it, so scoring finds it by api_base
    lm = dspy.LM(f"openai/{srv.alias}", api_base=srv.api_base, api_key=srv.api_key, temperature=0.0, max_tokens=48,
                 cache=False)
    yield lm, model
    srv.stop()
    _SERVERS.pop(model.resolve(), None)
    mp.undo()


def test_real_server_scores_yes_no_and_choices(real_server: tuple[dspy.LM, Path]) -> None:
    from autofocus.local_lm.scoring import choice_probabilities, yes_probabilities

    lm, _ = real_server

    def conv(thing: str) -> list[dict[str, str]]:
        return [{"role": "system", "content": "You judge candidates. Answer Yes or No."},
                {"role": "user", "content": f"Is the following a fruit? {thing}"}]  # fmt: skip

    p = yes_probabilities(lm, [conv(c) for c in ("banana", "hammer", "apple", "granite")])
    assert p is not None and all(x is not None for x in p)
    assert min(p[0], p[2]) > max(p[1], p[3])  # type: ignore[type-var]
    messages = [{"role": "user", "content": "Which animal barks? Answer with one word."}]
    q = choice_probabilities(lm, messages, ["dog", "cat", "spreadsheet"])
    assert q is not None and abs(sum(q) - 1) < 1e-6 and q[0] == max(q)


def test_real_server_takes_a_shared_prompt_start_into_every_slot_once(real_server: tuple[dspy.LM, Path]) -> None:
    from autofocus.local_lm.scoring import render, scoring_server
    from autofocus.local_lm.slots import share_prompt_starts

    lm, _ = real_server
    server = scoring_server(lm)
    assert server is not None and server.slot_dir is not None
    rules = "You sort things into kinds. " + " ".join(f"Rule {i}: a kind has a name of one word." for i in range(12))

    def conv(thing: str) -> list[dict[str, str]]:
        return [{"role": "system", "content": rules}, {"role": "user", "content": f"Which kind is {thing}?"}]

    evaluated = share_prompt_starts(lm, [(conv("a banana"), conv("a hammer"))])
    assert len(evaluated) == 1 and evaluated[0] > 100  # the start, evaluated once
    assert [p.name[:6] for p in server.slot_dir.iterdir()] == ["start-"]
    for slot in range(1, server.n_parallel):  # restored: a question's prompt evaluates only its own part
        done = server.post("completion", {"prompt": render(server, conv(f"thing {slot}"), "", 60), "n_predict": 1,
                                          "id_slot": slot, "cache_prompt": True}, 120)  # fmt: skip
        assert done["timings"]["cache_n"] >= evaluated[0] - 2 and done["tokens_evaluated"] - done["timings"]["cache_n"] < 30


def test_real_server_follows_a_grammar_and_answers_alike_twice(real_server: tuple[dspy.LM, Path]) -> None:
    lm, _ = real_server
    grammar = 'root ::= "[[ ## answer ## ]]\\n" ("red" | "green" | "blue") "\\n\\n[[ ## completed ## ]]"'
    with dspy.context(lm=lm):
        first = dspy.Predict("question -> answer")(question="Name a colour of the sky.", config={"extra_body": {"grammar": grammar}})
        again = dspy.Predict("question -> answer")(question="Name a colour of the sky.", config={"extra_body": {"grammar": grammar}})
    assert first.answer in ("red", "green", "blue") and again.answer == first.answer


def test_real_server_continues_the_answer_header_under_a_grammar(real_server: tuple[dspy.LM, Path]) -> None:
    from autofocus.program.steps.llm_call import ANSWER_START, ServerChatAdapter, call_adapter, prefills

    lm, _ = real_server
    assert prefills(lm) and isinstance(call_adapter(lm), ServerChatAdapter)
    chat = lm.copy()
    chat.prompt_layout = "chat"  # LMConfig.prompt_layout: ChatAdapter's own layout, everything generated
    assert not prefills(chat) and not isinstance(call_adapter(chat), ServerChatAdapter)
    grammar = 'root ::= ("red" | "green" | "blue")'  # the header is the prompt's: the grammar starts after it
    with dspy.context(lm=lm, adapter=call_adapter(lm)):
        pred = dspy.Predict("question -> answer")(question="Name a colour of the sky.", config={"extra_body": {"grammar": grammar}})
    assert pred.answer in ("red", "green", "blue")
    opened = {"extra_body": {"grammar": 'root ::= ("red" | "green" | "blue") " sky\\nEND"'}, "stop": ["\nEND"],
              ANSWER_START: "The "}  # fmt: skip
    with dspy.context(lm=lm, adapter=call_adapter(lm)):
        pred = dspy.Predict("question -> answer")(question="Name a colour of the sky.", config=opened)
    assert pred.answer in ("The red sky", "The green sky", "The blue sky")  # given start, generated middle, stopped


def test_real_server_loses_no_request_of_eight_at_once(real_server: tuple[dspy.LM, Path]) -> None:
    lm, _ = real_server
    questions = [f"What is {i} plus {i}? Answer with the number." for i in range(8)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda q: lm(q, max_tokens=8)[0], questions))
    assert len(answers) == 8 and all(isinstance(a, str) and a.strip() for a in answers)


def test_real_server_binds_a_port_of_its_own(real_server: tuple[dspy.LM, Path], tmp_path: Path) -> None:
    """llama-server started on port 0 binds the one the kernel gives it, found from its sockets; asked for
    a former port that another listener holds now, it is started again on another."""
    _, model = real_server
    from autofocus.local_lm.server import LocalServer

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        srv = LocalServer(model, "port@test", n_ctx=512, n_parallel=1, log_path=tmp_path / "s.log")
        srv.port = taken.getsockname()[1]
        try:
            srv.start()
            assert srv.port not in (None, taken.getsockname()[1]) and srv.health()
        finally:
            srv.stop()
    assert "starting on a port the kernel gives it" in (tmp_path / "s.log").read_text()


def test_real_server_exits_with_its_parent(real_server: tuple[dspy.LM, Path], tmp_path: Path) -> None:
    """A process that starts the server and is then killed (SIGKILL: no atexit) leaves no server behind."""
    _, model = real_server
    script = f"""
import json, os, sys, time
from autofocus.local_lm.server import LocalServer
srv = LocalServer({str(model)!r}, "orphan@test", n_ctx=512, n_parallel=1).start()
print(json.dumps({{"watchdog": srv.process.pid, "port": srv.port}}), flush=True)
time.sleep(600)
"""
    env = {**os.environ, "PYTHONPATH": str(Path(server_build.__file__).parents[2])}
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=env, text=True)
    info = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
    children = Path(f"/proc/{info['watchdog']}/task/{info['watchdog']}/children").read_text().split()
    assert children, "the watchdog runs the server"
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 30
    alive = [int(pid) for pid in [info["watchdog"], *children]]
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if Path(f"/proc/{pid}").exists() and "zombie" not in _state(pid)]
        time.sleep(0.2)
    assert not alive


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split("\n")[0].lower()
    except (OSError, IndexError):
        return "zombie"


def test_real_server_decodes_a_grammar_beside_it_as_its_own_grammar_path_does(real_server: tuple[dspy.LM, Path]) -> None:
    from autofocus.local_lm.decoding import decode, model_tokenizer
    from autofocus.local_lm.scoring import render, scoring_server

    lm, model = real_server
    tokenizer = model_tokenizer(model)
    if tokenizer is None:
        pytest.skip("the model's tokenizer cannot be read here (`make setup-lm` installs the gguf package)")
    server = scoring_server(lm)
    assert server is not None
    grammar = 'root ::= "The capital of " country " is " city "."\ncountry ::= "France" | "Spain"\ncity ::= [A-Z] [a-z]+\n'
    prompt = render(server, [{"role": "user", "content": "What is the capital of France? One sentence."}], "", 60)
    out = decode(server, tokenizer, prompt, grammar, max_tokens=32)
    own = server.post("completion", {"prompt": prompt, "grammar": grammar, "temperature": 0.0, "n_predict": 32}, 60)
    assert out.text == own["content"] == "The capital of France is Paris."
    assert out.forced >= 4 and out.forced < out.tokens  # "The capital of", " is": forced; "France", "Paris": chosen


def test_real_server_reads_the_query_grammar_of_step_2(real_server: tuple[dspy.LM, Path]) -> None:
    """llama.cpp's own GBNF reader takes step 2's grammar (a sampled answer goes to the server's grammar path)."""
    from autofocus.local_lm.scoring import scoring_server
    from autofocus.program.steps.constrain import cypher_grammar
    from autofocus.skb.schema_graph import schema_graph
    from tests.skb_factory import make_skb
    from tests.test_repair import EDGE_TYPES, EDGES, NAMES, NODE_TYPE, TYPES

    server = scoring_server(real_server[0])
    assert server is not None
    graph = schema_graph(make_skb(TYPES, NODE_TYPE, EDGES, EDGE_TYPES, names=NAMES))
    grammar = cypher_grammar(graph, ["num_params"], targets=["class"], header=False, opened=False)
    done = server.post("completion", {"prompt": "A Cypher query for: which classes raise errors?\n", "grammar": grammar,
                                      "n_predict": 6, "temperature": 0.0}, 300)  # fmt: skip
    assert done["content"].startswith("MATCH (y:")


def test_real_server_restores_a_saved_start_exactly_as_it_evaluated_it(real_server: tuple[dspy.LM, Path],
                                                                       tmp_path: Path) -> None:
    """The prompt cache's promise: a start restored from the file another server saved gives the next
    token the probabilities a freshly evaluated start gives (the KV cache is the same, bit for bit)."""
    from autofocus.local_lm.scoring import render, scoring_server
    from autofocus.local_lm.server import LocalServer

    lm, model = real_server
    first = scoring_server(lm)
    assert first is not None and first.slot_dir is not None
    rules = f"Probe {uuid.uuid4()}: sort things into kinds. " + " ".join(f"Rule {i}: a kind has a one-word name." for i in range(12))
    start = render(first, [{"role": "system", "content": rules}], "", 60)
    asked = render(first, [{"role": "system", "content": rules}, {"role": "user", "content": "Which kind is a banana?"}], "", 60)

    def evaluate(server: LocalServer, slot: int, name: str) -> None:
        server.post("completion", {"prompt": start, "n_predict": 0, "id_slot": slot, "cache_prompt": False}, 120)
        server.post(f"slots/{slot}?action=save", {"filename": name}, 120)

    def next_token(server: LocalServer, slot: int) -> list[tuple[int, float]]:
        done = server.post("completion", {"prompt": asked, "n_predict": 1, "n_probs": 10, "id_slot": slot,
                                          "cache_prompt": True, "temperature": 0.0}, 120)  # fmt: skip
        assert done["timings"]["cache_n"] > 0  # the start came from the slot, not evaluated again
        return [(t["id"], t["logprob"]) for t in done["completion_probabilities"][0]["top_logprobs"]]

    evaluate(first, 0, "probe-a.bin")
    second = LocalServer(model, "real@test2", n_ctx=2048, n_parallel=first.n_parallel, log_path=tmp_path / "s2.log").start()
    try:
        assert second.slot_dir is not None
        evaluate(second, 0, "probe-b.bin")  # another process evaluates the same start afresh
        a, b = (first.slot_dir / "probe-a.bin").read_bytes(), (second.slot_dir / "probe-b.bin").read_bytes()  # type: ignore[operator]
        assert a == b, "two evaluations of one start saved different KV caches"
        restored = second.post("slots/1?action=restore", {"filename": "probe-b.bin"}, 120)
        assert restored["n_restored"] > 100 and restored["timings"]["restore_ms"] < 5000
        assert next_token(second, 1) == next_token(second, 0)  # restored start == freshly evaluated start
    finally:
        second.stop()
        for name in ("probe-a.bin", "probe-b.bin"):
            (first.slot_dir / name).unlink(missing_ok=True)


def _gguf_with_architecture(path: Path, architecture: str) -> Path:
    """A GGUF file (version 3) whose only metadata is its architecture, and no tensors."""
    import struct

    key, value = b"general.architecture", architecture.encode()
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key
                     + struct.pack("<IQ", 8, len(value)) + value)  # fmt: skip
    return path


def test_real_server_says_in_one_line_why_a_model_file_does_not_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 47 item 6: an empty, a truncated and a wrong-architecture GGUF file each give their reason in
    one line, not the server's log."""
    from autofocus.local_lm.server import LocalServer
    from autofocus.local_lm.server_http import LocalServerError

    launcher, why = _user_launcher("source build")
    if launcher is None:
        pytest.skip(why)
    model = _user_model()
    monkeypatch.setenv(server_build.ENV, launcher)
    truncated = tmp_path / "truncated.gguf"
    if model is not None:
        with model.open("rb") as fh:
            truncated.write_bytes(fh.read(8 << 20))
    cases = {"empty": (tmp_path / "empty.gguf", r"magic|read|file"),
             "architecture": (_gguf_with_architecture(tmp_path / "arch.gguf", "mamba9"), r"architecture.*mamba9"),
             **({"truncated": (truncated, r"tensor|data|bounds|read|size")} if model is not None else {})}  # fmt: skip
    cases["empty"][0].write_bytes(b"")
    for name, (path, reason) in cases.items():
        server = LocalServer(path, f"{name}@test", n_ctx=512, n_parallel=1, log_path=tmp_path / f"{name}.log")
        with pytest.raises(LocalServerError) as caught:
            server.start()
        message = str(caught.value)
        assert "\n" not in message and "did not start" in message and re.search(reason, message, re.I), message
        assert server.process is None
