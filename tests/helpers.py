"""Test helpers shared across areas: free ports, a uvicorn server in a thread, waiting."""

from __future__ import annotations

import socket
import threading
import time
from typing import Callable

import uvicorn


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0, interval: float = 0.05) -> bool:
    """Poll until predicate() is true or the deadline passes; returns the last result."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True
        except Exception:
            pass
        time.sleep(interval)
    return False


class UvicornThread:
    """Runs an ASGI app on 127.0.0.1 in a background thread; stop() joins it."""

    def __init__(self, app, port: int | None = None, **kwargs) -> None:  # type: ignore[no-untyped-def]
        self.port = port or free_port()
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off", **kwargs)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> "UvicornThread":
        self.thread.start()
        if not wait_for(lambda: self.server.started, timeout=10):
            raise RuntimeError("uvicorn did not start within 10 s")
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
