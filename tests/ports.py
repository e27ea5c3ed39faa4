"""Free TCP ports for the processes the tests start.

Ports come from below the kernel's ephemeral range (32768-60999 by default), where ``bind(0)``
and every outgoing connection take theirs: in the seconds a process needs to bind a port chosen
here, only a process asking for that very port could take it. 19xxx and 29xxx are left to the
end-to-end fleets' fixed ports.

Usage::

    vllm_port, paddlex_port = free_ports(2)
"""

from __future__ import annotations

import random
import socket

PORT_RANGE = (20000, 28999)


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports that nobody holds right now (all are held until all are
    chosen, so none is handed out twice)."""
    held: list[socket.socket] = []
    try:
        while len(held) < count:
            sock = socket.socket()
            try:
                sock.bind(("0.0.0.0", random.randint(*PORT_RANGE)))
            except OSError:  # in use: draw again
                sock.close()
                continue
            held.append(sock)
        return [int(sock.getsockname()[1]) for sock in held]
    finally:
        for sock in held:
            sock.close()


def free_port() -> int:
    """A TCP port nobody holds right now."""
    return free_ports(1)[0]
