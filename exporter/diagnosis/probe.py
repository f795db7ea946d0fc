"""The canary probe's signals (exporter/probe): what clients see, beside what the engine says.

Why a module of its own: the probe publishes per-engine, last-probe gauges and
its own histograms (``llm_probe_*``, exporter/probe/source.py); turning them
into the few service-wide figures the rules judge is a job of its own, kept
out of the engine and GPU arithmetic of ``signals.py``.

* ``PROBE_TTFT`` — the mean client-seen TTFT of the probes that got their first
  token during the window (histogram sum delta over count delta: exact, since a
  probe runs every 15 s by default and a p95 of two observations would only be
  the bucket they fell in). Absent when no probe got a token in the window.
* ``PROBE_OUTSIDE`` — the largest time outside the engine over the probed
  engines (their last probe); ``PROBE_ENGINE_TTFT`` and ``PROBE_CLIENT_TTFT`` are
  the engine's own TTFT and the client-seen TTFT of that same probe.
* ``PROBE_FAILING`` — engines whose last probe timed out or broke off
  (``timeout``, ``bad_stream``): requests a client could not complete.
  ``http_error`` and ``refused`` are not counted, and such engines are left out
  of both probe counts (absent when no probe reached an engine that answered):
  a route that does not exist or an engine that is down are told by the probe's
  counter and the engine source's own health, and must not make a service with
  no other data read ``healthy``.
* ``PROBE_HUNG`` — engines whose last probe timed out while the engine's
  ``/metrics`` answered with every counter frozen (``llm_probe_engine_frozen``):
  a hung engine core.
"""

from __future__ import annotations

from exporter.diagnosis.window import Window

PROBE_TTFT = "mean_over_window(llm_probe_ttft_seconds)"
PROBE_OUTSIDE = "max(llm_probe_outside_engine_seconds)"
PROBE_ENGINE_TTFT = "llm_probe_engine_ttft_seconds"
PROBE_CLIENT_TTFT = "llm_probe_engine_ttft_seconds + llm_probe_outside_engine_seconds"
PROBE_FAILING = 'count(llm_probe_last_result{result=~"timeout|bad_stream"} == 1)'
PROBE_HUNG = 'count(llm_probe_last_result{result="timeout"} == 1 and llm_probe_engine_frozen == 1)'
#: every probe signal, in the order the evidence shows them
SIGNALS: tuple[str, ...] = (PROBE_TTFT, PROBE_CLIENT_TTFT, PROBE_ENGINE_TTFT, PROBE_OUTSIDE, PROBE_FAILING, PROBE_HUNG)
#: the metric families these signals read (the diagnosis window keeps them)
PREFIX = "llm_probe_"
_FAILING = ("timeout", "bad_stream")
_JUDGING = ("ok",) + _FAILING


def probe_signals(window: Window, v: dict[str, float]) -> None:
    """Add the probe signals the window supports to the service view ``v`` (none without a probe)."""
    snap = window.latest
    if snap is None:
        return
    last = {p.labels.get("server", ""): p.labels.get("result", "") for p in snap.samples("llm_probe_last_result") if p.value == 1}
    # only probes that reached an engine answering HTTP judge it: a refused connection or a missing
    # route must not make a service with no other data read "healthy" (nor "failing")
    last = {server: r for server, r in last.items() if r in _JUDGING}
    if last:
        frozen = {p.labels.get("server", ""): p.value for p in snap.samples("llm_probe_engine_frozen")}
        v[PROBE_FAILING] = float(sum(1 for r in last.values() if r in _FAILING))
        v[PROBE_HUNG] = float(sum(1 for server, r in last.items() if r == "timeout" and frozen.get(server) == 1.0))
    outside = {p.labels.get("server", ""): p.value for p in snap.samples("llm_probe_outside_engine_seconds")}
    engine = {p.labels.get("server", ""): p.value for p in snap.samples("llm_probe_engine_ttft_seconds")}
    pairs = [(o, engine[s]) for s, o in outside.items() if s in engine]
    if pairs:
        worst, own = max(pairs)
        v[PROBE_OUTSIDE] = worst
        v[PROBE_ENGINE_TTFT] = own
        v[PROBE_CLIENT_TTFT] = worst + own
    count = window.histogram_delta_count("llm_probe_ttft_seconds")
    total = window.histogram_delta_sum("llm_probe_ttft_seconds")
    if count and total is not None and count > 0:
        v[PROBE_TTFT] = total / count
