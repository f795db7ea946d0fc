"""One simulated server: its engine, its dialect and the settings that survive scenario switches.

Why a module of its own: the HTTP surface (exporter/simulator/api.py) serves it and the
runner (exporter/simulator/server.py) starts it; both import it from here, so neither
imports the other back.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from exporter.simulator import dialects, scenarios
from exporter.simulator.engine import Engine


class Simulator:
    """One simulated server's engine, dialect and the explicit settings that survive scenario switches."""

    def __init__(self, scenario: str = "healthy", dialect: str = "vllm", overrides: dict[str, Any] | None = None) -> None:
        dialects.get(dialect)
        self.dialect = dialect
        self.overrides = dict(overrides or {})
        config = dialects.fitted(dialect, scenarios.get(scenario).config(overrides=self.overrides))
        self.engine = Engine(config, scenario, buckets=dialects.buckets(dialect, config))

    def switch(self, scenario: str) -> None:
        """Apply another scenario's settings live (explicit overrides still win; GPU count stays)."""
        config = dialects.fitted(self.dialect, scenarios.get(scenario).config(overrides=self.overrides))
        self.engine.reconfigure(config, scenario)

    def share_prefixes(self, shared: bool) -> None:
        """Break (or restore) prefix sharing live, in the running scenario: from now on every request
        carries a cache salt of its own (``cache_salt_per_request``), so the engine still looks each
        prompt up and finds no other request's blocks, as after a deployment that switched prefix
        caching off or a router that lost session affinity. A scenario switch resets it."""
        config = dataclasses.replace(self.engine.config, cache_salt_per_request=not shared)
        self.engine.reconfigure(config, self.engine.scenario)

    def enable_prefix_caching(self, enabled: bool) -> None:
        """Switch prefix caching off (or on) live, as a restart with ``--no-enable-prefix-caching``
        would: from now on no prompt is looked up, so the engine counts no lookup and no hit (vLLM's
        prefix-cache counters stand still), and ``cache_config_info`` says so. A scenario switch resets it."""
        config = dataclasses.replace(self.engine.config, enable_prefix_caching=enabled)
        self.engine.reconfigure(config, self.engine.scenario)

    def start(self) -> Simulator:
        self.engine.start()
        return self

    def stop(self) -> None:
        self.engine.stop()
