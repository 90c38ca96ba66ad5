"""Credentials never reach a stored or printed text (``autofocus.redact``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autofocus.evaluation.traces import TraceWriter
from autofocus.redact import REDACTED, redact, register_secret


def test_registered_keys_and_credential_variables_are_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    register_secret("plain-secret-value-42")
    monkeypatch.setenv("MY_SERVICE_API_KEY", "env-held-credential")
    monkeypatch.setenv("SOME_TOKEN", "tok")  # too short to be told from ordinary words: kept
    text = "echo: plain-secret-value-42 and env-held-credential and tok"
    assert redact(text) == f"echo: {REDACTED} and {REDACTED} and tok"


@pytest.mark.parametrize("key", [
    "sk-proj-AbCdEf0123456789xyzXYZ", "sk-ant-api03-abcdefghijklmnop", "hf_abcdefghijklmnopqrstuv",
    "ghp_abcdefghijklmnopqrstuvwxyz", "AKIAABCDEFGHIJKLMNOP", "gsk_abcdefghijklmnopqrstuv",
])
def test_key_shaped_strings_are_replaced_wherever_they_come_from(key: str) -> None:
    assert redact(f"Incorrect API key provided: {key}.") == f"Incorrect API key provided: {REDACTED}."


def test_authorization_values_are_replaced_but_ordinary_text_is_not() -> None:
    assert redact("headers: Authorization: Bearer abc.def-ghi_12345") == f"headers: Authorization: Bearer {REDACTED}"
    ordinary = "sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08, node 12345, task-force"
    assert redact(ordinary) == ordinary


def test_trace_lines_are_written_redacted(tmp_path: Path) -> None:
    register_secret("written-secret-123")
    with TraceWriter(tmp_path / "t.jsonl") as writer:
        writer.append({"id": 1, "status": "error", "error": "server said written-secret-123"})
    line = (tmp_path / "t.jsonl").read_text()
    assert "written-secret-123" not in line and json.loads(line)["error"] == f"server said {REDACTED}"
