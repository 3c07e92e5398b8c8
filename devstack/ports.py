"""Local TCP ports for the processes the embedded stack and the tests start."""

from __future__ import annotations

import socket

#: the ports ``dev up`` gives the Temporal dev server unless told otherwise (here, not in
#: ``devstack.stack``: the command line shows them in ``--help`` without importing the stack)
DEFAULT_TEMPORAL_PORT = 7233
DEFAULT_TEMPORAL_UI_PORT = 8233


def free_ports(count: int, host: str = "127.0.0.1", exclude: set[int] | None = None) -> list[int]:
    """``count`` distinct ports the OS reports free on ``host`` (bound to port 0, then released)."""
    held: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < count:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            held.append(sock)
            port = sock.getsockname()[1]
            if not exclude or port not in exclude:
                ports.append(port)
    finally:
        for sock in held:
            sock.close()
    return ports


def port_is_free(host: str, port: int) -> bool:
    """Whether a listener could bind ``host:port`` now.

    ``SO_REUSEADDR`` as Go's listeners set it: connections of a server that just stopped,
    lingering in ``TIME_WAIT``, do not make its port look taken.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True
