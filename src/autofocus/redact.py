"""Keep credentials out of everything autofocus stores or prints.

An LM server may echo the request's API key in an error message or even in an answer. Every
error and event text (``autofocus.trace``), every line written to ``traces.jsonl`` and every text
shown on the terminal (``autofocus.console``) passes through ``redact``, which replaces

* the keys autofocus was given (``register_secret``: ``get_lm`` registers each ``api_key``), whatever
  their length: one of ``MIN_SECRET_CHARS`` characters or more wherever it occurs, a shorter one where
  it stands as a token of its own (a key ``abc`` is redacted in ``key=abc``, not inside ``abcdef``,
  which would garble text without protecting anything); a key under ``WARN_SECRET_CHARS`` characters
  is accepted with a warning, since it protects little,
* the values of environment variables whose names say they hold a credential (``*_API_KEY``,
  ``*_TOKEN``, ``*_SECRET``, ``*_PASSWORD``) from ``MIN_SECRET_CHARS`` characters on (the names are a
  guess: ``MAX_TOKEN=512`` must not redact every 512), and
* strings shaped like provider keys (``sk-...``, ``hf_...``, ``ghp_...``, ``AKIA...``,
  ``Bearer ...``) wherever they come from.

Nor may a cache keep a key: ``keep_secrets_out_of_cache`` makes DSPy's response cache (memory and
disk) refuse an answer in which a secret appears (a server that echoes the key in a successful answer).
"""

from __future__ import annotations

import functools
import logging
import os
import re
import threading
from typing import Any

import orjson

REDACTED = "[REDACTED]"
MIN_SECRET_CHARS = 8  # shorter keys are redacted as whole tokens only (module docstring)
WARN_SECRET_CHARS = 4
_TOKEN_CHAR = "A-Za-z0-9_\\-"  # what may stand next to a short key inside a longer token
log = logging.getLogger(__name__)

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
    """Redact ``value`` from now on (an API key handed to an LM client), whatever its length."""
    value = (value or "").strip()
    if not value:
        return
    if len(value) < WARN_SECRET_CHARS:
        log.warning("an API key of %d characters protects little; it is redacted only where it stands "
                    "as a word of its own", len(value))
    with _lock:
        _registered.add(value)


def _secrets() -> list[str]:
    with _lock:
        found = set(_registered)
    found.update(
        v for k, v in os.environ.items() if _SECRET_ENV.search(k) and len(v) >= MIN_SECRET_CHARS
    )
    return sorted(found, key=len, reverse=True)  # a key that contains another is replaced whole


@functools.lru_cache(maxsize=64)
def _as_token(secret: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![{_TOKEN_CHAR}]){re.escape(secret)}(?![{_TOKEN_CHAR}])")


def redact(text: str) -> str:
    """``text`` with configured secrets and key-like strings replaced by ``[REDACTED]``."""
    for secret in _secrets():
        if secret not in text:
            continue
        text = text.replace(secret, REDACTED) if len(secret) >= MIN_SECRET_CHARS else _as_token(secret).sub(REDACTED, text)
    text = _KEY_LIKE.sub(REDACTED, text)
    return _AUTH_VALUE.sub(lambda m: f"{m.group(1)} {REDACTED}", text)


def holds_secret(value: Any) -> bool:
    """Whether ``value`` (text, or data such as an LM response: as JSON, other objects as ``str``)
    contains something ``redact`` would replace."""
    text = value if isinstance(value, str) else orjson.dumps(value, default=str).decode("utf-8", "replace")
    return redact(text) != text


class SecretFreeCache:
    """DSPy's response cache, except that an answer holding a secret is never stored (in memory or on
    disk); it is asked again next time. Everything else is the wrapped cache's."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __contains__(self, key: str) -> bool:
        return key in self._inner

    def put(self, request: Any, value: Any, *args: Any, **kwargs: Any) -> None:
        try:
            secret = holds_secret(value)
        except (TypeError, ValueError):  # nothing we can read: nothing we may keep
            secret = True
        if not secret:
            self._inner.put(request, value, *args, **kwargs)


def keep_secrets_out_of_cache() -> None:
    """Put ``SecretFreeCache`` in front of ``dspy.cache`` (idempotent; call before LM calls are made)."""
    import dspy

    with _lock:
        if not isinstance(dspy.cache, SecretFreeCache):
            dspy.cache = SecretFreeCache(dspy.cache)
