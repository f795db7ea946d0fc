"""A listening socket bound now, with one readable line when it cannot be: ``serve``'s main
socket and the OTLP receiver's (exporter/commands/serve.py, exporter/tracing/receiver.py).

Why bound here rather than by the server: a bad address fails before anything starts. The
protocol is named (IPPROTO_TCP, not 0) because asyncio switches Nagle off (TCP_NODELAY) only on
accepted sockets whose ``proto`` says TCP. With proto 0 every response after the first on a
keep-alive connection (every Prometheus scrape) waited ~40 ms for the client's delayed ACK:
/metrics and /healthz took 44 ms instead of 1-3 ms.
"""

from __future__ import annotations

import errno
import os
import socket


def reason(err: OSError) -> str:
    """Why a bind failed, in a few plain words."""
    if isinstance(err, socket.gaierror):
        return f"cannot resolve the host ({err.strerror or err})"
    known = {
        errno.EADDRINUSE: "address already in use",
        errno.EADDRNOTAVAIL: "address not available on this host",
        errno.EACCES: "permission denied",
    }
    if err.errno in known:
        return known[err.errno]
    return (os.strerror(err.errno) if err.errno else str(err)).lower()


def bind_tcp(host: str, port: int, shown: str) -> socket.socket:
    """A bound TCP socket on ``host:port``; OSError("cannot listen on SHOWN: reason") otherwise."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    except OSError as err:
        raise OSError(f"cannot listen on {shown}: {reason(err)}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise OSError(f"cannot listen on {shown}: {reason(err)}") from None
    return sock
