"""The prefix cache's hit ratio now against earlier in the window: did prefix sharing break?

Why a module of its own: every other signal is a figure over the whole window or
its recent seconds; this one compares the two halves of the window with each other
(the recent seconds against what came before them), so a deployment change that
broke prefix sharing (prefix caching switched off, a router that lost session
affinity, a system prompt that now starts with a timestamp) reads as a *fall* of
the engine's own hit ratio, not as a low ratio, which many workloads have
legitimately. ``signals.py`` calls ``prefix_signals`` for the service view.

* ``HIT_RECENT`` / ``HIT_EARLIER`` — prompt tokens found in the prefix cache over
  prompt tokens looked up (``llm_prefix_cache_hit_tokens_total`` over
  ``llm_prefix_cache_queried_tokens_total``), over the last ``recent_seconds`` and
  over the rest of the window before them.
* ``QUERIED_PER_REQUEST_RECENT`` / ``_EARLIER`` — tokens looked up per request (a
  request counted at its first token, ``llm_request_ttft_seconds``: right after its
  prompt was looked up) in the same two spans: comparable figures mean the same
  prompts, so a fall of the ratio is the cache's, not a new workload's.
* ``REQUESTS_RECENT`` / ``_EARLIER`` — the requests each span holds (a ratio over a
  handful of requests is which prompts happened to arrive).

* ``PROMPT_PER_REQUEST_RECENT`` / ``_EARLIER`` — prompt tokens per request
  (``llm_prompt_tokens_total``): the same comparison where the recent span looked
  nothing up.
* ``LOOKUPS_STOPPED`` — 1 where the engine looked prompts up before the recent seconds
  and stopped while requests kept coming: prefix caching switched off (a restart
  with ``--no-enable-prefix-caching``; vLLM and the simulator then count no lookup at
  all). The recent ratio then reads 0: no prompt token is found in a cache nobody
  asks, and the fall is the whole earlier level. Not where the engine's config says
  prefix caching is on (``llm_engine_config_info{prefix_caching="true"}``) throughout
  the recent seconds: there no lookup means admissions stalled, not the cache.

Absent, never 0, where a span has no lookups or no requests (but for
``LOOKUPS_STOPPED``), or the window does not yet reach past the recent seconds
(nothing earlier to compare with). Engines without a TTFT histogram (llama.cpp) are
therefore not judged: their lookups cannot be put per request. Once no span of the
window holds a lookup, a server whose caching was switched off reads as one that
never had it (nothing left to compare with): the fall is named while the window holds
it, and ``llm_engine_config_info{prefix_caching}`` says so from then on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from exporter.diagnosis.window import Window
from exporter.samples import Sample
from exporter.store import Snapshot

QUERIED_METRIC = "llm_prefix_cache_queried_tokens_total"
HIT_METRIC = "llm_prefix_cache_hit_tokens_total"
#: the families these signals read (the diagnosis window keeps them; the TTFT histogram it keeps anyway)
PREFIX = "llm_prefix_cache_"
REQUESTS_METRIC = "llm_request_ttft_seconds"
CONFIG_METRIC = "llm_engine_config_info"

HIT_RECENT = f"increase_over_recent({HIT_METRIC}) / increase_over_recent({QUERIED_METRIC})"
HIT_EARLIER = f"increase_before_recent({HIT_METRIC}) / increase_before_recent({QUERIED_METRIC})"
QUERIED_PER_REQUEST_RECENT = f"increase_over_recent({QUERIED_METRIC}) / increase_over_recent({REQUESTS_METRIC}_count)"
QUERIED_PER_REQUEST_EARLIER = f"increase_before_recent({QUERIED_METRIC}) / increase_before_recent({REQUESTS_METRIC}_count)"
REQUESTS_RECENT = f"increase_over_recent({REQUESTS_METRIC}_count)"
REQUESTS_EARLIER = f"increase_before_recent({REQUESTS_METRIC}_count)"
PROMPT_METRIC = "llm_prompt_tokens_total"
PROMPT_PER_REQUEST_RECENT = f"increase_over_recent({PROMPT_METRIC}) / increase_over_recent({REQUESTS_METRIC}_count)"
PROMPT_PER_REQUEST_EARLIER = f"increase_before_recent({PROMPT_METRIC}) / increase_before_recent({REQUESTS_METRIC}_count)"
LOOKUPS_STOPPED = f"increase_over_recent({QUERIED_METRIC}) == 0 while requests arrive"

Read = Callable[[Snapshot], dict[tuple[tuple[str, str], ...], float]]


def prefix_signals(window: Window, v: dict[str, float], recent_seconds: float) -> None:
    """Add the prefix-cache signals the window supports to the service view ``v``."""
    snaps = window.snapshots
    if len(snaps) < 3:
        return
    cutoff = snaps[-1].monotonic - recent_seconds
    # the recent span starts at the last snapshot at or before its start, as every delta over the
    # recent seconds does (Window._since); the earlier span is everything before that snapshot
    cut = max((i for i, s in enumerate(snaps) if s.monotonic <= cutoff), default=0)
    if cut == 0:
        return  # the window does not reach past the recent seconds yet
    looked_up: float | None = None
    for span, (hit_key, per_key, count_key, prompt_key) in (
        (snaps[: cut + 1], (HIT_EARLIER, QUERIED_PER_REQUEST_EARLIER, REQUESTS_EARLIER, PROMPT_PER_REQUEST_EARLIER)),
        (snaps[cut:], (HIT_RECENT, QUERIED_PER_REQUEST_RECENT, REQUESTS_RECENT, PROMPT_PER_REQUEST_RECENT)),
    ):
        looked_up = _increase(span, _counter(QUERIED_METRIC))
        hits = _increase(span, _counter(HIT_METRIC))
        requests = _increase(span, _histogram_count(REQUESTS_METRIC))
        prompts = _increase(span, _counter(PROMPT_METRIC))
        if looked_up and hits is not None:
            v[hit_key] = min(1.0, hits / looked_up)
        if requests is not None:
            v[count_key] = requests
            if looked_up and requests > 0:
                v[per_key] = looked_up / requests
            if prompts and requests > 0:
                v[prompt_key] = prompts / requests
    # the recent span (the loop's last): its counter still read, nothing looked up, requests served; before it, lookups.
    # An engine that says its prefix caching is on has not switched it off: its admissions stalled
    # (requests whose prompts were looked up earlier reaching their first token), not its cache
    # (on throughout the recent span: a span in which it was switched back on held no lookup yet
    # either, and that is still the switch-off's evidence)
    stopped = looked_up == 0.0 and HIT_EARLIER in v and v.get(REQUESTS_RECENT, 0.0) > 0
    if stopped and not _said_on_throughout(snaps[cut:]):
        v[HIT_RECENT] = 0.0
        v[LOOKUPS_STOPPED] = 1.0


def _said_on_throughout(span: Sequence[Snapshot]) -> bool:
    """Whether every snapshot of ``span`` has the engine's config say prefix caching is on
    (``llm_engine_config_info{prefix_caching="true"}``); False where one says off or none says."""
    for snap in span:
        said = {p.labels.get("prefix_caching") for p in snap.samples(CONFIG_METRIC)} - {None, ""}
        if said != {"true"}:
            return False
    return bool(span)


def _counter(name: str) -> Read:
    return lambda snap: {_key(p.labels): p.value for p in snap.samples(name) if isinstance(p, Sample)}


def _histogram_count(name: str) -> Read:
    return lambda snap: {_key(h.labels): h.count for h in snap.histograms(name)}


def _key(labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def _increase(span: Sequence[Snapshot], read: Read) -> float | None:
    """Increase over ``span`` (oldest first), summed over series: each series from the first
    snapshot of the span that holds it (a source sampled late must not blind the span); a series
    that went down was reset, and its increase is its latest value. None when no series is seen twice."""
    latest = read(span[-1])
    first: dict[tuple[tuple[str, str], ...], float] = {}
    for snap in span[:-1]:
        if len(first) == len(latest):
            break
        for k, value in read(snap).items():
            if k in latest and k not in first:
                first[k] = value
    if not first:
        return None
    return sum(latest[k] - old if latest[k] >= old else latest[k] for k, old in first.items())
