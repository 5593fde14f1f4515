"""The accept-and-fork loop of the tests' warm servers (tests/warm_orch.py, tests/warm_torch.py).

Each server is one of them run as a script (``python tests/warm_orch.py SOCKET PARENT``), so it
imports this module as ``fork_server`` while ``sys.path[0]`` is still this folder.
"""

from __future__ import annotations

import os
import signal
import socket


def accept_forked(path: str, parent: int) -> socket.socket | None:
    """Listen on ``path`` and fork a handler per connection while ``parent`` (the pytest process
    that started the server) lives. Returns the connection in each forked handler, and None in the
    server once the parent is gone (the caller removes the socket: the handlers return here too)."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the handlers are reaped by the kernel
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    listener.settimeout(1.0)
    print("ready", flush=True)
    while os.getppid() == parent:
        try:
            conn, _ = listener.accept()
        except socket.timeout:
            continue
        if os.fork() == 0:
            listener.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            return conn
        conn.close()
    listener.close()
    return None
