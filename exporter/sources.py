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
    An attempt still running after ``timeout`` is reported down (reason
    ``timeout``) while it runs, and its late result is discarded, so a
    source need not police its own deadline to be safe (it should, to free
    its thread). ``close()`` is never called while a sample is running.
    """

    name: str
    interval: float
    timeout: float

    def sample(self) -> SampleResult: ...

    def close(self) -> None: ...
