"""Local TCP ports for the processes the embedded stack and the tests start."""

from __future__ import annotations

import random
import socket
from pathlib import Path

#: the ports ``dev up`` gives the Temporal dev server unless told otherwise (here, not in
#: ``devstack.stack``: the command line shows them in ``--help`` without importing the stack)
DEFAULT_TEMPORAL_PORT = 7233
DEFAULT_TEMPORAL_UI_PORT = 8233


#: where ``free_ports`` looks when the ephemeral range cannot be read (Linux's default range)
_EPHEMERAL_DEFAULT = (32768, 60999)
#: the lowest port ``free_ports`` picks (below it: well-known and registered services)
_LOWEST = 10000
_random = random.SystemRandom()


def ephemeral_range() -> tuple[int, int]:
    """The ports the OS hands out for port 0 and for outgoing connections' local ends."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return _EPHEMERAL_DEFAULT
    return low, high


def free_ports(count: int, host: str = "127.0.0.1", exclude: set[int] | None = None) -> list[int]:
    """``count`` distinct ports free on ``host`` now, for a server started next.

    Picked at random below the OS's ephemeral range, each checked by binding it: a port the OS
    handed out for port 0 was one it may hand, before the server binds it, to any process's
    outgoing connection or port-0 listener (a Temporal dev server picks its internal ports so),
    and two servers starting side by side (parallel tests) then failed with "address already in
    use". Where the range starts too low to leave room below it, the OS's port 0 is asked."""
    excluded = set(exclude or ())
    low, _ = ephemeral_range()
    ports: list[int] = []
    if low - _LOWEST >= 1000:
        for _ in range(100 * count):
            port = _random.randrange(_LOWEST, low)
            if port not in excluded and port not in ports and port_is_free(host, port):
                ports.append(port)
                if len(ports) == count:
                    return ports
    held: list[socket.socket] = []
    try:
        while len(ports) < count:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            held.append(sock)
            port = sock.getsockname()[1]
            if port not in excluded and port not in ports:
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
