"""Running a simulator: the engine + dialect bundle, and uvicorn on a thread.

Why a thread with port 0: tests, the demo and the CLI all need a real HTTP
server they can start, find (the bound port) and stop cleanly; uvicorn on a
background thread does that without signal-handler fights, and the scheduler
thread lives beside it in the same process, as in a real engine.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import uvicorn

from exporter.simulator import dialects, scenarios
from exporter.simulator.engine import Engine

#: Open HTTP connections the simulator accepts at once.
MAX_CONNECTIONS = 4096


class Simulator:
    """One simulated server's engine, dialect and the explicit settings that survive scenario switches."""

    def __init__(self, scenario: str = "healthy", dialect: str = "vllm", overrides: dict[str, Any] | None = None) -> None:
        dialects.get(dialect)
        self.dialect = dialect
        self.overrides = dict(overrides or {})
        config = scenarios.get(scenario).config(overrides=self.overrides)
        self.engine = Engine(config, scenario, buckets=dialects.buckets(dialect, config))

    def switch(self, scenario: str) -> None:
        """Apply another scenario's settings live (explicit overrides still win; GPU count stays)."""
        config = scenarios.get(scenario).config(overrides=self.overrides)
        self.engine.reconfigure(config, scenario)

    def start(self) -> Simulator:
        self.engine.start()
        return self

    def stop(self) -> None:
        self.engine.stop()


class SimulatorServer:
    """A :class:`Simulator` served by uvicorn on a background thread (``port=0`` picks a free port)."""

    def __init__(self, simulator: Simulator, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning") -> None:
        from exporter.simulator.api import create_app

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
