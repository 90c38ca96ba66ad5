"""The offline LM servers of this process, one per model file, and where each is found: the shared server
``AUTOFOCUS_LLM_SERVER`` names, else the one ``autofocus lm serve`` runs with the same model and settings
(``local_lm.registry``), else one this process starts (``LocalServer``) and stops at exit."""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from autofocus import paths
from autofocus.local_lm import registry, startup
from autofocus.local_lm.server import LocalServer
from autofocus.local_lm.server_http import LocalServerError

_SERVERS: dict[Path, LocalServer] = {}
_REGISTRY_LOCK = threading.Lock()
_REFUSING = threading.local()


class NotServed(RuntimeError):
    """A server the settings ask for that nobody serves, where this thread may start none
    (``own_servers_refused``)."""


def get_server(model_path: Path, alias: str, **kwargs: object) -> LocalServer:
    """The process-wide server for ``model_path``, started (or restarted) if needed: with
    ``AUTOFOCUS_LLM_SERVER`` set, the shared server at that address; else one that ``autofocus lm serve``
    runs with this model and these settings (``local_lm.registry``), else one of this process's own."""
    key = Path(model_path).resolve()
    shared = os.environ.get("AUTOFOCUS_LLM_SERVER")
    with _REGISTRY_LOCK:
        server = _SERVERS.get(key)
        if server is None:
            if not _SERVERS:
                atexit.register(stop_all)
            server = attach_at(shared, key, alias) if shared else served_or_own(key, alias, **kwargs)
            _SERVERS[key] = server
    return server.start()


def attach_at(url: str, model_path: Path, alias: str) -> LocalServer:
    """The server at ``url`` (``host:port``), found by address, not by its record: it is asked the key of
    the served server at that address, or of this process's own there, where one is."""
    server = LocalServer.attach(url, model_path, alias)
    server.api_key = key_at_address(server.host, server.port)
    return server


def key_at_address(host: str, port: int | None) -> str | None:
    """The key of the server at ``host:port``: a served one's (its record) or this process's own."""
    served = next((r.api_key for r in registry.live() if (r.host, r.port) == (host, port)), None)
    own = next((s.api_key for s in list(_SERVERS.values()) if not s.external and (s.host, s.port) == (host, port)), None)
    return served or own


@contextlib.contextmanager
def own_servers_refused() -> Iterator[None]:
    """While the block runs, this thread starts no LM server of its own: a server the settings ask for
    that nobody serves is ``NotServed`` (``lm serve``'s worker, ``autofocus.resident``, answers only
    questions for the LM it serves)."""
    _REFUSING.on = True
    try:
        yield
    finally:
        _REFUSING.on = False


def served_or_own(model_path: Path, alias: str, **kwargs: object) -> LocalServer:
    """The server ``autofocus lm serve`` runs with these settings, attached (waiting a while for one that
    is starting); else a new one for this process, unless ``own_servers_refused``."""
    own = LocalServer(model_path, alias, **kwargs)  # type: ignore[arg-type]
    fingerprint = own.fingerprint()
    try:
        record = registry.find(alias, fingerprint)
        if record is None and registry.read(registry.record_path(alias, fingerprint))[0]:  # alive, not ready yet
            with startup.phase("lm_server", "waiting for `autofocus lm serve` to finish starting the offline LM"):
                record = registry.find(alias, fingerprint, wait_s=own.startup_timeout)
    except paths.NotPrivate as exc:
        raise LocalServerError(f"the offline LM servers' registry: {exc}") from None
    if record is None and getattr(_REFUSING, "on", False):
        raise NotServed(f"{alias} with these settings is not served here")
    return own if record is None else LocalServer.attach(record.url, model_path, alias, record)


def server_for_api_base(api_base: str | None) -> LocalServer | None:
    """The managed server behind an LM's ``api_base``, or None for any other endpoint."""
    if not api_base:
        return None
    with _REGISTRY_LOCK:
        servers = list(_SERVERS.values())
    return next((s for s in servers if s.port is not None and s.api_base == api_base.rstrip("/")), None)


def stop_all() -> None:
    with _REGISTRY_LOCK:
        servers = list(_SERVERS.values())
    for server in servers:
        server.stop()
