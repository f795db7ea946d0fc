"""Free TCP ports on 127.0.0.1, for servers the tests start."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on right now (bound to 127.0.0.1, then released).

    Racy by nature (another process may take it before the caller binds), which
    is why every server the kit starts itself binds port 0 where it can.
    """
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def closed_port_url(path: str = "/metrics") -> str:
    """A URL on a 127.0.0.1 port nothing listens on: a connection there is refused."""
    return f"http://127.0.0.1:{free_port()}{path}"
