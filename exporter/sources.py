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


def attempt_bound(source: Source) -> float:
    """The most one attempt of ``source`` may run in all before it counts as a ``timeout``.

    ``timeout`` by default. A source whose ``timeout`` is the deadline of what another
    party controls (an engine's answer: exporter/engines/fetch.py enforces it on the
    wire) and whose own work after it is bounded by size, not time, declares an
    ``attempt_bound`` beyond it: on a starved node (50 scrapers rendering a 2 MB
    exposition hold the GIL) parsing a capped body may outlast the engine's deadline,
    and that is not the engine answering late. A hang is still failed at the bound.
    """
    return float(getattr(source, "attempt_bound", None) or source.timeout)
