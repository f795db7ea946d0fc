"""Running a simulator (exporter/simulator/instance.py): uvicorn on a thread.

Why a thread with port 0: tests, the demo and the CLI all need a real HTTP
server they can start, find (the bound port) and stop cleanly; uvicorn on a
background thread does that without signal-handler fights, and the scheduler
thread lives beside it in the same process, as in a real engine.
"""

from __future__ import annotations

import threading
import time

import uvicorn

from exporter.simulator.api import create_app
from exporter.simulator.instance import Simulator

#: Open HTTP connections the simulator accepts at once.
MAX_CONNECTIONS = 4096


class SimulatorServer:
    """A :class:`Simulator` served by uvicorn on a background thread (``port=0`` picks a free port)."""

    def __init__(self, simulator: Simulator, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning") -> None:
        self.simulator = simulator
        self.host = host
        # limit_concurrency bounds open connections (503 beyond), the queue limit bounds admitted requests
        config = uvicorn.Config(
            create_app(simulator),
            host=host,
            port=port,
            log_level=log_level,
            lifespan="off",
            access_log=False,
            timeout_graceful_shutdown=2,
            limit_concurrency=MAX_CONNECTIONS,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="sim-http", daemon=True)
        self.port = port

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self, timeout: float = 15.0) -> SimulatorServer:
        self.simulator.start()
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.simulator.stop()
                raise RuntimeError(f"simulator HTTP server did not start on {self.host}:{self.port}")
            time.sleep(0.02)
        sockets = [s for server in self._server.servers for s in server.sockets]
        if sockets:
            self.port = int(sockets[0].getsockname()[1])
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout)
        self.simulator.stop()

    def wait(self, stop: threading.Event) -> None:
        """Block until ``stop`` is set or the HTTP thread ends."""
        while not stop.is_set() and self._thread.is_alive():
            stop.wait(0.2)

    def __enter__(self) -> SimulatorServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
