"""Free loopback ports for the servers the tests start."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports, all held open while picking so none is handed out twice."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def is_listening(port: int, timeout_s: float = 1.0) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:``port``."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=timeout_s).close()
        return True
    except OSError:
        return False
