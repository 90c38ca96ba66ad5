"""get_lm over real HTTP against the scripted fake server: Predict, retries, concurrency, per-step LMs."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import dspy
import pytest

from autofocus.config import LMConfig
from autofocus.lm import (
    DEFAULT_RETRIES,
    HOSTED_TIMEOUT_S,
    LOCAL_TIMEOUT_S,
    RETRIES_ENV,
    STEPS,
    TIMEOUT_ENV,
    get_lm,
    lm_for_step,
    lms_for_config,
    wait_settings,
    yes_probability,
)
from tests.fake_openai_server import FakeOpenAIServer, chat_adapter_reply, last_user_text


def _echo(body: dict) -> str:
    question = last_user_text(body).split("[[ ## question ## ]]")[1].split("\n\n")[0].strip()
    return chat_adapter_reply(answer=f"echo {question}")


def _model() -> str:
    """A model name no earlier run has cached."""
    return f"openai/fake-{uuid.uuid4().hex[:12]}"


def test_predict_end_to_end_through_chat_adapter() -> None:
    with FakeOpenAIServer(_echo) as srv:
        lm = get_lm(_model(), api_base=srv.api_base, api_key="sk-test", cache=False, max_tokens=77)
        with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
            pred = dspy.Predict("question -> answer")(question="capital of France?")
    assert pred.answer == "echo capital of France?"
    assert srv.request_count == 1 and srv.paths == ["/v1/chat/completions"]
    body = srv.requests[0]
    assert body["model"] == lm.model.split("/", 1)[1]
    assert body["temperature"] == 0.0 and body["max_completion_tokens"] == 77
    assert srv.headers[0]["Authorization"] == "Bearer sk-test"
    assert lm.history[-1]["usage"]["completion_tokens"] > 0


def test_prompt_tokens_a_server_took_from_its_cache_are_counted_apart() -> None:
    """A server that reports ``prompt_tokens_details.cached_tokens`` (the local one does, as OpenAI):
    the step's usage keeps the prompt size and says how much of it was not evaluated again."""
    from autofocus.trace import Trace
    from autofocus.usage import install_usage_callback

    install_usage_callback()
    reply = {"content": chat_adapter_reply(answer="a"),
             "usage": {"prompt_tokens": 120, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 100}}}
    with FakeOpenAIServer(lambda body: reply) as srv:
        lm = get_lm(_model(), api_base=srv.api_base, api_key="k", cache=False)
        trace = Trace()
        with dspy.context(lm=lm), trace.step("2_query") as rec:
            dspy.Predict("question -> answer")(question="q")
    assert rec.lm_calls == 1 and rec.cached_tokens == 100 and rec.input_tokens > 0


def test_api_base_and_key_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeOpenAIServer(_echo) as srv:
        monkeypatch.setenv("AUTOFOCUS_LM_API_BASE", srv.api_base)
        monkeypatch.setenv("AUTOFOCUS_LM_API_KEY", "sk-env")
        lm = get_lm(_model(), cache=False)
        with dspy.context(lm=lm):
            assert dspy.Predict("question -> answer")(question="q").answer == "echo q"
    assert srv.headers[0]["Authorization"] == "Bearer sk-env"


@pytest.mark.parametrize("spec", ["gpt-4o-mini", "", "openai/", "/model"])
def test_bad_spec_is_explained(spec: str) -> None:
    with pytest.raises(ValueError, match="provider/model"):
        get_lm(spec)


def test_configured_retries_reach_the_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    """AUTOFOCUS_LM_RETRIES is what a rate-limited or failing request gets, not DSPy's default."""
    monkeypatch.setenv("AUTOFOCUS_LM_RETRIES", "0")
    with FakeOpenAIServer(_echo, fail_429=1) as srv:
        lm = get_lm(_model(), api_base=srv.api_base, api_key="k", cache=False)
        with dspy.context(lm=lm), pytest.raises(dspy.LMRateLimitError):
            dspy.Predict("question -> answer")(question="q")
    assert srv.request_count == 1


def test_yes_probability_is_none_for_hosted_lms() -> None:
    with FakeOpenAIServer(_echo, p_yes=lambda messages: 0.9) as srv:
        lm = get_lm(_model(), api_base=srv.api_base, api_key="k", cache=False)
        assert yes_probability(lm, [{"role": "user", "content": "Is it? Yes or No."}]) is None
    assert srv.request_count == 0


def test_per_step_lms_share_objects_per_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOFOCUS_LM_API_BASE", "http://127.0.0.1:9/v1")
    cfg = LMConfig(default="openai/base-model", rerank="openai/rerank-model", temperature=0.3, max_tokens=99)
    lms = lms_for_config(cfg)
    assert set(lms) == set(STEPS)
    assert lms["target_type"] is lms["cypher"] and lms["rerank"] is not lms["cypher"]
    assert lms["rerank"].model == "openai/rerank-model" and lms["cypher"].model == "openai/base-model"
    assert lms["cypher"].kwargs["temperature"] == 0.3 and lms["cypher"].kwargs["max_tokens"] == 99
    assert lm_for_step(cfg, "rerank").model == "openai/rerank-model"
    with pytest.raises(ValueError, match="unknown LLM step"):
        lm_for_step(cfg, "grounding")


def test_env_points_dspy_cache_under_autofocus_home(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in {"DSPY_CACHEDIR", "LITELLM_LOCAL_MODEL_COST_MAP"}}
    env["AUTOFOCUS_HOME"] = str(tmp_path)
    code = "import autofocus, dspy, os; print(dspy.cache.disk_cache.directory); print(os.environ['LITELLM_LOCAL_MODEL_COST_MAP'])"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(tmp_path / "dspy_cache"), "True"]
    env["DSPY_CACHEDIR"] = str(tmp_path / "mine")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == str(tmp_path / "mine")


def test_cli_lm_list_and_check(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from autofocus.cli import app

    runner = CliRunner()
    listed = runner.invoke(app, ["lm", "list"], env={"COLUMNS": "200"})
    assert listed.exit_code == 0, listed.output
    assert "local-small" in listed.output and "not set up" in listed.output and "Apache-2.0" in listed.output
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("AUTOFOCUS_LM_API_KEY", raising=False)
    with FakeOpenAIServer(_echo) as srv:
        monkeypatch.setenv("AUTOFOCUS_LM_API_BASE", srv.api_base)
        checked = runner.invoke(app, ["lm", "check", "--lm", _model(), "--question", "q?", "--repeat", "2"],
                                env={"COLUMNS": "200"})  # fmt: skip
    assert checked.exit_code == 0, checked.output
    assert "Predict: 'echo q?'" in checked.output and "not available" in checked.output
    assert srv.request_count == 2 and srv.headers[0]["Authorization"] == "Bearer EMPTY"  # keyless server
    missing = runner.invoke(app, ["lm", "check", "--lm", "local"])
    assert missing.exit_code == 1 and "autofocus lm setup" in " ".join(missing.output.split())


def test_lm_serve_prints_a_bad_model_path_as_text() -> None:
    from typer.testing import CliRunner

    from autofocus.cli import app

    res = CliRunner().invoke(app, ["lm", "serve", "--model", "local:/nowhere/[b]x[/b].gguf"])
    assert res.exit_code == 1 and "/nowhere/[b]x[/b].gguf: no such GGUF file" in " ".join(res.output.split())


def test_timeout_and_retries_come_from_arguments_then_environment_then_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(TIMEOUT_ENV, raising=False)
    monkeypatch.delenv(RETRIES_ENV, raising=False)
    lm = get_lm("openai/x", api_base="http://127.0.0.1:9/v1")
    assert (lm.kwargs["timeout"], lm.num_retries) == (HOSTED_TIMEOUT_S, DEFAULT_RETRIES)
    assert wait_settings(None, None, local=True) == (LOCAL_TIMEOUT_S, DEFAULT_RETRIES)
    monkeypatch.setenv(TIMEOUT_ENV, "7.5")
    monkeypatch.setenv(RETRIES_ENV, "0")
    lm = get_lm("openai/x", api_base="http://127.0.0.1:9/v1")
    assert (lm.kwargs["timeout"], lm.num_retries) == (7.5, 0)
    assert wait_settings(None, None, local=True) == (7.5, 0)
    lm = get_lm("openai/x", api_base="http://127.0.0.1:9/v1", timeout=3, num_retries=1)
    assert (lm.kwargs["timeout"], lm.num_retries) == (3, 1)
    monkeypatch.setenv(TIMEOUT_ENV, "soon")
    with pytest.raises(ValueError, match="AUTOFOCUS_LM_TIMEOUT='soon'"):
        get_lm("openai/x")


def test_the_configs_timeout_and_retries_reach_every_lm() -> None:
    config = LMConfig(default="openai/x", rerank="openai/y", timeout_s=4.0, num_retries=0)
    lms = lms_for_config(config, api_base="http://127.0.0.1:9/v1")
    assert {(lm.kwargs["timeout"], lm.num_retries) for lm in lms.values()} == {(4.0, 0)}
