"""The simulator's ``/metrics`` dialects: one module per engine (family and generation).

Each module exposes ``NAME``, ``BUCKETS`` (neutral histogram name -> the
engine's bounds, in seconds or tokens), ``render(snapshot) -> str`` and
optionally ``buckets_for(config)`` (bounds that depend on settings),
``headers(snapshot)`` (extra response headers), ``fit(config)`` (the settings as
the engine ties them together, e.g. llama.cpp's slots out of its context) and
``props(snapshot)`` / ``slots(snapshot)`` (llama.cpp's ``GET /props`` and ``GET
/slots`` bodies). Adding an engine is adding a module and a line below.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

from exporter.simulator.dialects import llamacpp, sglang, tgi, trtllm, vllm, vllm_legacy
from exporter.simulator.engine import EngineSnapshot
from exporter.simulator.settings import DIALECTS, SimConfig

REGISTRY: dict[str, ModuleType] = {m.NAME: m for m in (vllm, vllm_legacy, sglang, tgi, trtllm, llamacpp)}
assert tuple(REGISTRY) == DIALECTS, "settings.DIALECTS and the dialect modules disagree"

#: Prometheus text format 0.0.4, as every one of these engines serves it.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def get(name: str) -> ModuleType:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown dialect {name!r}; expected one of {', '.join(REGISTRY)}") from None


def buckets(name: str, config: SimConfig) -> dict[str, Iterable[float]]:
    module = get(name)
    if hasattr(module, "buckets_for"):
        buckets_for: Callable[[SimConfig], dict[str, Iterable[float]]] = module.buckets_for
        return buckets_for(config)
    return dict(module.BUCKETS)


def render(name: str, snapshot: EngineSnapshot) -> tuple[str, dict[str, str]]:
    """The exposition body and any extra headers of dialect ``name``."""
    module = get(name)
    extra = module.headers(snapshot) if hasattr(module, "headers") else {}
    return module.render(snapshot), extra


def fitted(name: str, config: SimConfig) -> SimConfig:
    """``config`` as dialect ``name``'s engine ties its settings together (unchanged where it does not)."""
    module = get(name)
    if hasattr(module, "fit"):
        fit: Callable[[SimConfig], SimConfig] = module.fit
        return fit(config)
    return config


def side_route(name: str, route: str) -> Callable[[EngineSnapshot], Any] | None:
    """The body maker of dialect ``name`` for ``route`` (``props``, ``slots``); None where the engine has no such route."""
    maker: Callable[[EngineSnapshot], Any] | None = getattr(get(name), route, None) if route in SIDE_ROUTES else None
    return maker


#: the JSON routes a dialect may serve beside /metrics (llama.cpp's GET /props and GET /slots)
SIDE_ROUTES: tuple[str, ...] = ("props", "slots")
