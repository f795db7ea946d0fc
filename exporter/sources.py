"""The one small interface every source implements (GPU, engine, process, derived)."""

from __future__ import annotations

from typing import Protocol

from exporter.samples import SampleResult


class Source(Protocol):
    """A thing sampled on its own background loop.

    ``name`` is the ``source`` label value: ``gpu``, ``engine:<name>``,
    ``process:<server>``, ``parallel``, ``diagnosis``.
    ``sample()`` may block up to about ``timeout`` seconds; it raises
    :class:`exporter.samples.SourceError` on failure. A scrape never calls it.
    """

    name: str
    interval: float
    timeout: float

    def sample(self) -> SampleResult: ...

    def close(self) -> None: ...
