"""The engine's own account of the probe's window: time outside the engine, and a frozen engine.

Both questions compare the probe with what the engine's ``/metrics`` said
around it, read from the store (the engine source's latest points), never by
scraping the engine a second time.

Time outside the engine (``llm_probe_outside_engine_seconds``) is the probe's
client-seen TTFT minus the engine's own TTFT for the same request, taken, in
this order:

1. ``engine_reported`` — the engine's own timing of *this* request, where the
   stream carries it (llama.cpp's ``timings.prompt_ms``: its prefill; llama.cpp
   has no TTFT histogram);
2. ``histogram`` — the engine's TTFT histogram (``llm_request_ttft_seconds``)
   between the scrape the store held when the probe started and the first
   scrape that *started* after the probe's stream ended: sum delta over count
   delta. On an idle engine that is the probe's own TTFT as the engine measured
   it; under traffic it is the mean engine TTFT of every request whose first
   token came in that window (the probe is one of them).

A frozen engine (``llm_probe_engine_frozen``): between the scrape before the
probe and the latest scrape at its end — one that started at least half the
probe's timeout after the probe did — none of the engine's progress series
moved (every counter and every histogram count the engine source publishes).
A live engine serving anything, the probe included, moves them; one whose core
is hung while its HTTP front end still serves ``/metrics`` does not. Unknown
(None) when the engine source is down or no scrape was late enough.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from exporter.samples import HistogramSample, Sample
from exporter.schema import SPECS
from exporter.store import SnapshotStore

TTFT = "llm_request_ttft_seconds"
#: how often a wait for the engine's next scrape looks at the store
POLL_S = 0.05


@dataclass(frozen=True)
class EngineView:
    """What the engine source last published, as far as the probe needs it."""

    #: monotonic start of that scrape (its success time minus its duration)
    scraped_at: float
    #: (name, labels) -> value of every counter and count of every histogram
    progress: Mapping[tuple[str, tuple[tuple[str, str], ...]], float]
    ttft_sum: float | None
    ttft_count: float | None
    #: engine family and model from llm_engine_info ("" when not published)
    family: str = ""
    model: str = ""


def _progress_name(name: str) -> bool:
    """A counter or histogram the engine itself moves: not our own bookkeeping, and not a series
    the exporter derives at each scrape (``llm_scheduler_batch_size`` samples the running gauge of
    every scrape, so it moved while a hung engine's front end served the same text)."""
    spec = SPECS.get(name)
    return (
        spec is not None
        and spec.type in ("counter", "histogram")
        and spec.origin != "derived"
        and not name.startswith("llm_exporter_")
    )


def engine_view(store: SnapshotStore, source: str) -> EngineView | None:
    """The engine source's latest points as an ``EngineView``; None while it is down or stale."""
    st = store.states().get(source)
    if st is None or not st.up or st.last_success_mono is None or not st.fresh(store.monotonic()):
        return None
    progress: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    ttft_sum = ttft_count = None
    family = model = ""
    for p in st.points:
        if p.name == "llm_engine_info" and not family:
            family, model = p.labels.get("engine", ""), p.labels.get("model", "")
        if not _progress_name(p.name):
            continue
        key = (p.name, tuple(sorted(p.labels.items())))
        if isinstance(p, HistogramSample):
            progress[key] = p.count
            if p.name == TTFT:
                ttft_sum = (ttft_sum or 0.0) + p.sum
                ttft_count = (ttft_count or 0.0) + p.count
        elif isinstance(p, Sample):
            progress[key] = p.value
    return EngineView(st.last_success_mono - st.last_duration, progress, ttft_sum, ttft_count, family, model)


def await_scrape_after(
    store: SnapshotStore,
    source: str,
    after: float,
    until: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> EngineView | None:
    """The first engine view from a scrape that started at or after ``after``; None if none by ``until``."""
    version = -1
    while True:
        if store.version != version:
            version = store.version
            # cheap first: only a new scrape that started late enough is worth reading whole
            st = store.states().get(source)
            if st is not None and st.up and st.last_success_mono is not None and st.last_success_mono - st.last_duration >= after:
                view = engine_view(store, source)
                if view is not None and view.scraped_at >= after:
                    return view
        now = clock()
        if now >= until:
            return None
        sleep(min(POLL_S, until - now))


def histogram_ttft(before: EngineView | None, after: EngineView | None) -> float | None:
    """Mean engine TTFT of the requests observed between two views (None: none, or a reset)."""
    if before is None or after is None or before.ttft_count is None or after.ttft_count is None:
        return None
    if before.ttft_sum is None or after.ttft_sum is None:
        return None
    count = after.ttft_count - before.ttft_count
    total = after.ttft_sum - before.ttft_sum
    if count <= 0 or total < 0:
        return None
    return total / count


def engine_ttft(engine_reported: float | None, before: EngineView | None, after: EngineView | None) -> tuple[float, str] | None:
    """The engine's TTFT for the probe and how it was found (``engine_reported`` or ``histogram``)."""
    if engine_reported is not None:
        return engine_reported, "engine_reported"
    mean = histogram_ttft(before, after)
    return (mean, "histogram") if mean is not None else None


def frozen(before: EngineView | None, after: EngineView | None, probe_started: float, min_gap: float) -> bool | None:
    """Whether no progress series moved over the probe's window (None: cannot tell)."""
    if before is None or after is None or after.scraped_at < probe_started + min_gap:
        return None
    if after.scraped_at <= before.scraped_at or not before.progress:
        return None
    return dict(before.progress) == dict(after.progress)
