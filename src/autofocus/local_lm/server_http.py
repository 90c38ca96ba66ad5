"""Requests to a local LM server on the loopback address: JSON in and out, past any HTTP(S)_PROXY setting."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class LocalServerError(RuntimeError):
    """The local LM server could not be started or stopped responding."""


def open_direct(request: str | urllib.request.Request, timeout: float) -> Any:
    """urlopen for the loopback server that ignores HTTP(S)_PROXY settings."""
    return _DIRECT.open(request, timeout=timeout)


def get_json(base_url: str, route: str, headers: dict[str, str], timeout: float) -> Any:
    """The JSON that ``GET`` of one of the server's routes answers."""
    with open_direct(urllib.request.Request(f"{base_url}/{route}", headers=headers), timeout) as resp:
        return json.load(resp)


def post_json(base_url: str, route: str, body: dict[str, Any], headers: dict[str, str], timeout: float) -> Any:
    """The JSON that POSTing ``body`` to one of the server's routes answers; an HTTP error is a
    ``LocalServerError`` naming the route."""
    req = urllib.request.Request(
        f"{base_url}/{route}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json", **headers}, method="POST",
    )  # fmt: skip
    try:
        with open_direct(req, timeout) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as exc:
        raise LocalServerError(f"{route} failed: HTTP {exc.code} {exc.read().decode(errors='replace')[:500]}") from exc
