"""Keep credentials out of everything autofocus stores or prints.

An LM server may echo the request's API key in an error message or even in an answer. Every
error and event text (``autofocus.trace``), every line written to ``traces.jsonl`` and every text
shown on the terminal (``autofocus.console``) passes through ``redact``, which replaces

* the keys autofocus was given (``register_secret``: ``get_lm`` registers each ``api_key``),
* the values of environment variables whose names say they hold a credential (``*_API_KEY``,
  ``*_TOKEN``, ``*_SECRET``, ``*_PASSWORD``), and
* strings shaped like provider keys (``sk-...``, ``hf_...``, ``ghp_...``, ``AKIA...``,
  ``Bearer ...``) wherever they come from.
"""

from __future__ import annotations

import os
import re
import threading

REDACTED = "[REDACTED]"
MIN_SECRET_CHARS = 8  # shorter values ("EMPTY", "local") are placeholders, and would redact common words

_SECRET_ENV = re.compile(r"(API_?KEY|TOKEN|SECRET|PASSWORD)$", re.IGNORECASE)
_KEY_LIKE = re.compile(
    r"\b(?:sk|pk|rk)-[A-Za-z0-9_\-]{16,}"  # OpenAI / Anthropic / Stripe style: sk-..., sk-proj-..., sk-ant-...
    r"|\bhf_[A-Za-z0-9]{20,}"  # Hugging Face
    r"|\b(?:gh[pousr]_|github_pat_)[A-Za-z0-9_]{20,}"  # GitHub
    r"|\b(?:gsk|xai)_[A-Za-z0-9]{20,}"  # Groq, xAI
    r"|\bAKIA[0-9A-Z]{16}\b"  # AWS access key id
    r"|\bAIza[0-9A-Za-z_\-]{35}"  # Google API key
    r"|\bxox[abprs]-[A-Za-z0-9\-]{10,}"  # Slack
)
_AUTH_VALUE = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=\-]{8,}")

_registered: set[str] = set()
_lock = threading.Lock()


def register_secret(value: str | None) -> None:
    """Redact ``value`` from now on (an API key handed to an LM client)."""
    if value and len(value) >= MIN_SECRET_CHARS:
        with _lock:
            _registered.add(value)


def _secrets() -> list[str]:
    with _lock:
        found = set(_registered)
    found.update(
        v for k, v in os.environ.items() if _SECRET_ENV.search(k) and len(v) >= MIN_SECRET_CHARS
    )
    return sorted(found, key=len, reverse=True)  # a key that contains another is replaced whole


def redact(text: str) -> str:
    """``text`` with configured secrets and key-like strings replaced by ``[REDACTED]``."""
    for secret in _secrets():
        if secret in text:
            text = text.replace(secret, REDACTED)
    text = _KEY_LIKE.sub(REDACTED, text)
    return _AUTH_VALUE.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
