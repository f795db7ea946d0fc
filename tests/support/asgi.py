"""An ASGI app served by uvicorn on 127.0.0.1 in a thread, for tests that need real HTTP in-process."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import uvicorn

from tests.support.ports import free_port
from tests.support.waiting import wait_until

if TYPE_CHECKING:  # typing.Self is Python 3.11+; the project supports 3.10
    from typing_extensions import Self


class UvicornThread:
    """``with UvicornThread(app) as server: server.port`` - started within 10 s, stopped (joined) on exit."""

    def __init__(self, app: Any, port: int | None = None, **kwargs: Any) -> None:
        self.port = port or free_port()
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off", **kwargs)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        wait_until(lambda: self.server.started or not self.thread.is_alive(), 10, "uvicorn to start")
        assert self.server.started, f"uvicorn on 127.0.0.1:{self.port} stopped before it started"
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
