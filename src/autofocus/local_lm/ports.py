"""Which port a server process listens on, read from the kernel's sockets rather than from its log.

A server is started on port 0 and binds whichever port the kernel gives it (llama-server, uvicorn and
Python's ``http.server`` all do so), so no port is chosen free and then lost to another listener before
the server binds it; the port it got is then found among the listening sockets of its processes.
"""

from __future__ import annotations

import socket

import psutil

ANY_ADDRESS = ("0.0.0.0", "::")


def listening_port(pid: int, host: str) -> int | None:
    """The TCP port that process ``pid`` or one of its descendants listens on at ``host`` (None while none
    does, or where the process is gone)."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    for process in processes:
        try:
            sockets = process.net_connections(kind="tcp")
        except psutil.Error:
            continue
        for sock in sockets:
            if sock.status == psutil.CONN_LISTEN and sock.laddr and sock.laddr.ip in (host, *ANY_ADDRESS):
                return sock.laddr.port
    return None


def port_held(host: str, port: int) -> bool:
    """Whether another socket holds ``port`` on ``host``: binding it fails as it does for a server, which
    sets ``SO_REUSEADDR`` (connections of an ended server waiting out TIME_WAIT do not hold it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False
