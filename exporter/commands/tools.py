"""Whether the tools extra is installed: the packages only the tool commands use.

Why a check and not an ImportError: ``pip install llm-layer-exporter`` (and the
production image) carries the runtime only; ``demo``, ``simulate``, ``ramp`` and
``report`` need ``pip install 'llm-layer-exporter[tools]'``, and saying so in one
line (exit status 2) beats a traceback from deep inside the simulator.
"""

from __future__ import annotations

import importlib.util

#: the distributions of pyproject.toml's `tools` extra, by the module each provides
TOOLS_MODULES = ("rich", "httpx", "matplotlib")
HINT = "needs the tools extra: pip install 'llm-layer-exporter[tools]'"


def missing() -> list[str]:
    """The tools modules that cannot be imported here (found without importing them)."""
    out = []
    for name in TOOLS_MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(name)
    return out


__all__ = ["HINT", "TOOLS_MODULES", "missing"]
