"""Bounded memory on a live `serve` under hostile engines and a hostile kubelet (issues 13 and 25): a benchmark.

    python3 -m bench.memory_attacks            # about 6.5 minutes; exit 1 if the contract does not hold

Why a benchmark and not a gate test (issue 31): the figures are RSS ceilings a few MiB
above what this host reads (peaks 111-115 MiB against the 150 MB bound), so the
answer depends on the host's allocator, load and timing, and the run takes minutes.

One `python -m exporter serve --kubernetes` subprocess (engine interval 1 s,
GPU source none, pod discovery every 1 s from a kubelet ``/pods`` URL, every
other setting at its default: a budget of 20 000 published series, a 10 MiB
body cap, an 8 MiB pod-list cap) scrapes one real local HTTP engine and reads
the pod list of one real local fake kubelet (tests/support/k8s.py), whose
answers the test switches, phase by phase. After the baseline the attacks run
in ``ROUNDS`` rounds (the kubelet phases K, then phases 2-4 for the engine), so
that a plateau is told from a slow leak; then the recovery:

1. ``baseline``: a normal vLLM exposition (the vllm-0.33-v1-2dp fixture) for
   15 s; the baseline RSS is the median of the last 5 s.
2. ``200k_series``: the fixture plus 200 000 ``vllm:num_requests_running``
   series, one per (per-request) ``engine`` value, for 60 s. The body (9 MB)
   is under the byte cap, so it is read, decoded and parsed; the family is over
   its share of the budget (20 000 lines) and dropped as it streams (issue 25:
   ``llm_exporter_series_dropped_total{reason="family_budget"}``), the fixture's
   other families publish and the engine stays up: the issue's case (RSS 1.2 GB
   before the fix).
2b. ``over_budget``: 57 000 series over three families the mapping reads
   (19 000 each of running, waiting and KV usage: each under its share) for
   30 s, under the input limit but almost three times the budget: the path where
   the budget cuts. Why an extra phase: "the published series never exceed the
   budget and ``llm_exporter_series_dropped_total{reason="budget"}`` counts the
   rest" is proven here.
3. ``50mb_chunked``: a 50 MB body with ``Transfer-Encoding: chunked`` for 60 s
   (refused as ``too_large`` at the cap).
4. ``rotating_19k``: the fixture plus 19 000 series whose label values change
   on every scrape (a new ``engine`` value per series per scrape, which the
   vLLM mapping publishes as ``rank``), 19 365 published, under the budget, for 60 s.
K. the kubelet phases, first in each round (the engine healthy; issue 25's inputs,
   ``KUBELET_PHASE_S`` each):
   ``k8s_31mib`` a 31 MiB list, chunked (``too_large`` at the cap); ``k8s_annotations_110``
   110 pods with 256 KiB of annotations each, chunked (28 MiB: ``too_large``);
   ``k8s_annotations_28`` 28 such pods (7 MiB, under the cap: each pod's annotations
   ignored, ``annotations_too_large`` counted); ``k8s_deep`` a pod nested a million
   levels deep (``parse``); ``k8s_bad_pods`` port annotations in non-ASCII digits and a
   malformed item among the good pods (``bad_annotation``, ``malformed`` counted,
   discovery up). Throughout, the good pod's engine (``engine:inference/llama-70b-0``,
   a second small local engine) stays discovered: the last good view is kept.
5. ``recovery``: the normal exposition and pod list again for 30 s.

RSS (psutil, the serve process) is sampled every 0.5 s, /metrics is scraped
every 0.25 s and /healthz probed every 0.25 s (5 s client timeout, so slow
answers are measured, not just counted as misses). The contract checked, all at
the end so one run reports every figure:

* the max RSS over phases 2-4 stays under ``MAX_RSS_MIB`` (150 MiB, issue 25's bound, with
  the default 20 000-series budget). Measured 2026-12-02 with other jobs on the 2 cores: round
  peaks 111, 112, 115 MiB from a 73 MiB baseline. What got it there from 210 MiB: the
  over-budget phase builds only the lines the budget can publish (exporter/engines/budget.py
  ``line_quotas``), a runaway family is skipped in bounded regex runs (exporter/engines/textparse.py),
  and serve pins glibc's mmap threshold so large bodies do not fragment the heap
  (exporter/memtrim.py; see docs/guide.md, "Faults and hostile inputs");
* after 30 s of recovery RSS has stopped growing: at most the hostile phases' peak, and
  not above where the recovery started (the most RSS of its first 3 s, +5 MiB slack). It does not return to the
  baseline: CPython's allocator keeps arenas that a few long-lived objects still use
  (measured: 124 MiB after 30 s against a 58 MiB baseline with the heap trimmed on every
  scrape for 90 s after a large one; 77 MiB with ``PYTHONMALLOC=malloc``), so "within
  10 % of the baseline" is not claimed;
* phase 2: ``family_budget`` counted; phase 2b: the engine's published
  series (the /metrics lines with its ``server`` label plus its
  ``llm_exporter_series_dropped_total`` lines, which the budget also covers)
  never exceed the budget in any scrape of phases 2 and 2b, and
  ``reason="budget"`` increased;
* phase 3: ``too_large`` counted and /metrics p99 under 1 s; phase 4: the
  rotating series reached /metrics and /metrics p99 under 1 s;
* the kubelet phases, which open each round: in round 1, where they start from the
  baseline, RSS under ``MAX_KUBELET_RSS_MIB`` (150 MiB, issue 25's bound); in the later
  rounds, which begin where the engine attacks left the heap, no kubelet phase above the
  RSS its block began with + ``KUBELET_SLACK_MIB``; /metrics and /healthz p99 under 1 s (a
  liveness probe's default timeout); the named reason counted; the good pod's engine
  source present on every /metrics (still discovered) and up;
* no growth over the rounds: each round's peak at most round 1's + ``PLATEAU_SLACK_MIB``.

The figures are printed and written to
``${LLM_EXPORTER_INTEGRATION_LOGS:-/tmp/llm-exporter-integration}/memory-figures.json``.
Everything binds 127.0.0.1, every loop and wait is bounded, and the engine,
the exporter and both sampler threads are stopped in ``finally`` blocks.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import requests

from exporter.engines.config import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_SERIES
from tests.engines.engine_helpers import fixture
from tests.reliability.rel_helpers import Serve
from tests.reliability.test_engine_hardening_memory import HUGE, huge_body
from tests.support.fake_engine import RawServer, whole
from tests.support.k8s import (
    LLAMA,
    NODE,
    NON_ASCII_PORTS,
    SGLANG,
    LocalHTTP,
    annotation_flood,
    big_pod_list,
    deep_pod_list,
    local_pods,
    tenant_pod,
    with_pods,
)

MIB = 1024 * 1024
#: the RSS ceiling over the hostile phases: issue 25's bound
MAX_RSS_MIB = 150.0
#: recovery: no growth beyond this absolute slack (allocator noise)
RECOVERY_SLACK_MIB = 5.0
BUDGET = DEFAULT_MAX_SERIES
LATENCY_P99_S = 1.0

INTERVAL = 1.0
#: the opening seconds of the recovery whose most RSS is "where it started" (three engine intervals)
RECOVERY_SETTLE_S = 3 * INTERVAL
#: the attacks run this many times in a row: the last round's peaks must not exceed the first's
ROUNDS = 3
BASELINE_S, PHASE_S, OVER_BUDGET_S, RECOVERY_S = 15.0, 20.0, 15.0, 30.0
#: a kubelet phase: discovery reads every 1 s (the shared list is reused for half an interval at
#: most: exporter/kubernetes/pods.py ``pod_list_min_age``), but a list that keeps failing is retried
#: every 4 s at most (exporter/runner.py ``BACKOFF_CAP``): 8 s hold a read, with time for its counter
KUBELET_PHASE_S = 8.0
#: issue 25: RSS within 150 MB while the kubelet sends any of its hostile inputs
MAX_KUBELET_RSS_MIB = 150.0
PLATEAU_SLACK_MIB = 10.0
#: rounds 2+: the most a kubelet phase may add to the RSS its block began with (allocator noise)
KUBELET_SLACK_MIB = 12.0
HEALTHZ_P99_S = 1.0
GOOD_POD_SOURCE = "engine:inference/llama-70b-0"
DISCOVERY = "kubernetes:discovery"
SKIPPED = "llm_exporter_kubernetes_pods_skipped_total"
#: the baseline and the recovered RSS are medians over the last this-many seconds of their phase
SETTLE_WINDOW_S = 5.0
RSS_PERIOD, SCRAPE_PERIOD, SCRAPE_TIMEOUT = 0.5, 0.25, 5.0
#: past this the exporter is stopped at once (a runaway must not take the machine with it)
ABORT_RSS_MIB = 3072.0
WAIT = 30.0

SERIES_200K, SERIES_OVER, SERIES_ROTATING = 200_000, 19_000, 19_000
LOG_DIR = Path(os.environ.get("LLM_EXPORTER_INTEGRATION_LOGS", "/tmp/llm-exporter-integration"))

VLLM_TEXT = fixture("vllm-0.33-v1-2dp.prom")
VLLM = VLLM_TEXT.encode()
_RUNNING = "vllm:num_requests_running{"


def _with_running_series(extra: str) -> bytes:
    """The fixture with ``extra`` sample lines inserted after its own num_requests_running lines."""
    at = VLLM_TEXT.rindex(_RUNNING)
    at = VLLM_TEXT.index("\n", at) + 1
    return (VLLM_TEXT[:at] + extra + VLLM_TEXT[at:]).encode()


def many_series(n: int, prefix: str) -> bytes:
    """The fixture plus ``n`` num_requests_running series, one per ``engine`` value (a label per request)."""
    return _with_running_series("".join(f'{_RUNNING}engine="{prefix}{i}"}} 1\n' for i in range(n)))


def over_budget_series(n: int) -> bytes:
    """The fixture plus ``n`` series of each of three mapped gauges (each family under its share of
    the budget, all three together over the budget)."""
    extra = "".join(
        f'{name}{{engine="o{i}",model_name="m"}} 1\n'
        for name in ("vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
        for i in range(n)
    )
    return many_series(n, "o") + extra.encode()


def rotating_series(scrape: int) -> bytes:
    """The fixture plus SERIES_ROTATING series whose label values are new on every scrape."""
    return _with_running_series("".join(f'{_RUNNING}engine="s{scrape}-{i}"}} 1\n' for i in range(SERIES_ROTATING)))


class Engine:
    """A RawServer whose answer follows ``mode`` (switched by the test between phases)."""

    def __init__(self) -> None:
        self.mode = "healthy"
        self.bodies: dict[str, bytes] = {"healthy": VLLM}
        self._rotation = itertools.count()
        self.answered: dict[str, int] = {}
        self.server = RawServer(self._handle)

    def _handle(self, conn: socket.socket, srv: RawServer) -> None:
        mode = self.mode
        self.answered[mode] = self.answered.get(mode, 0) + 1
        if mode == "50mb_chunked":
            huge_body("chunked")(conn, srv)
        elif mode == "rotating_19k":
            whole("content-length", rotating_series(next(self._rotation)), step=256 * 1024)(conn, srv)
        else:
            whole("content-length", self.bodies[mode], step=256 * 1024)(conn, srv)


# --------------------------------------------------------------------------- reading /metrics cheaply


def _has_labels(line: str, labels: dict[str, str]) -> bool:
    head = line[: line.rfind("}") + 1]
    return all(f'{k}="{v}"' in head for k, v in labels.items())


def value_of(text: str, name: str, default: float | None = 0.0, **labels: str) -> float | None:
    """The value of the first sample ``name{...labels...}`` in ``text`` (a line scan: bodies of 20k series)."""
    start = name + "{"
    for line in text.split("\n"):
        if line.startswith(start) and _has_labels(line, labels):
            return float(line.rsplit(" ", 1)[1])
    return default


def engine_series(text: str, server: str, source: str) -> int:
    """Series the engine's budget covers: its points and its dropped counter.

    An engine point carries ``server`` and ``engine`` labels; a derived source's
    series about that server (the capacity prediction) carries ``server`` only
    and is not the engine's to budget.
    """
    own = f'server="{server}"'
    dropped = "llm_exporter_series_dropped_total{"
    src = f'source="{source}"'
    n = 0
    for line in text.split("\n"):
        if not line or line[0] == "#":
            continue
        if (own in line and 'engine="' in line) or (line.startswith(dropped) and src in line):
            n += 1
    return n


@dataclass
class Scrape:
    t: float
    phase: str
    latency: float
    ok: bool
    engine_series: int = 0
    up: float | None = None
    #: llm_exporter_series_dropped_total{reason="budget"} (absent while the engine is down)
    dropped_budget: float | None = None
    #: the good pod's engine source and discovery, up or not
    good_up: float | None = None
    discovery_up: float | None = None


@dataclass
class Monitor:
    """Two bounded sampler threads: RSS every 0.5 s, /metrics every 0.25 s."""

    pid: int
    base: str
    server: str
    source: str
    phase: str = "start"
    rss: list[tuple[float, str, float]] = field(default_factory=list)
    scrapes: list[Scrape] = field(default_factory=list)
    #: (phase, latency or SCRAPE_TIMEOUT when it failed) of each /healthz probe
    health: list[tuple[str, float]] = field(default_factory=list)
    runaway: float | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        for target in (self._rss_loop, self._scrape_loop, self._health_loop):
            t = threading.Thread(target=target, daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(SCRAPE_TIMEOUT + 5)

    def _rss_loop(self) -> None:
        proc = psutil.Process(self.pid)
        t0 = time.monotonic()
        while not self._stop.is_set():
            try:
                mib = proc.memory_info().rss / MIB
            except psutil.Error:
                return
            self.rss.append((time.monotonic() - t0, self.phase, mib))
            if mib > ABORT_RSS_MIB and self.runaway is None:
                self.runaway = mib
            self._stop.wait(RSS_PERIOD)

    def _scrape_loop(self) -> None:
        session = requests.Session()
        session.trust_env = False
        t0 = time.monotonic()
        try:
            while not self._stop.is_set():
                phase, start = self.phase, time.perf_counter()
                try:
                    r = session.get(self.base + "/metrics", timeout=SCRAPE_TIMEOUT)
                    text = r.text
                    latency = time.perf_counter() - start
                    ok = r.status_code == 200
                    s = Scrape(time.monotonic() - t0, phase, latency, ok)
                    if ok:
                        s.engine_series = engine_series(text, self.server, self.source)
                        s.up = value_of(text, "llm_exporter_source_up", None, source=self.source)
                        s.dropped_budget = value_of(
                            text, "llm_exporter_series_dropped_total", None, source=self.source, reason="budget"
                        )
                        s.good_up = value_of(text, "llm_exporter_source_up", None, source=GOOD_POD_SOURCE)
                        s.discovery_up = value_of(text, "llm_exporter_source_up", None, source=DISCOVERY)
                except requests.RequestException:
                    s = Scrape(time.monotonic() - t0, phase, time.perf_counter() - start, False)
                self.scrapes.append(s)
                self._stop.wait(max(0.0, SCRAPE_PERIOD - s.latency))
        finally:
            session.close()

    def _health_loop(self) -> None:
        session = requests.Session()
        session.trust_env = False
        try:
            while not self._stop.is_set():
                phase, start = self.phase, time.perf_counter()
                try:
                    ok = session.get(self.base + "/healthz", timeout=SCRAPE_TIMEOUT).status_code == 200
                except requests.RequestException:
                    ok = False
                latency = time.perf_counter() - start if ok else SCRAPE_TIMEOUT
                self.health.append((phase, latency))
                self._stop.wait(max(0.0, SCRAPE_PERIOD - latency))
        finally:
            session.close()

    def rss_of(self, phase: str) -> list[float]:
        return [mib for _, p, mib in self.rss if p == phase]

    def scrapes_of(self, phase: str) -> list[Scrape]:
        return [s for s in self.scrapes if s.phase == phase]


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q * len(ordered) + 0.5)) - 1))]


#: counter -> (metric, reason label); an error counter absent from /metrics is 0 (never counted)
COUNTERS = {
    "dropped_budget": ("llm_exporter_series_dropped_total", "budget"),
    "dropped_label_too_long": ("llm_exporter_series_dropped_total", "label_too_long"),
    "dropped_family_budget": ("llm_exporter_series_dropped_total", "family_budget"),
    "errors_too_many_series": ("llm_exporter_source_errors_total", "too_many_series"),
    "errors_too_large": ("llm_exporter_source_errors_total", "too_large"),
    "errors_timeout": ("llm_exporter_source_errors_total", "timeout"),
    "errors_internal": ("llm_exporter_source_errors_total", "internal"),
}
#: the kubelet's counters: (metric, labels)
KUBELET_COUNTERS = {
    "discovery_too_large": ("llm_exporter_source_errors_total", {"source": DISCOVERY, "reason": "too_large"}),
    "discovery_parse": ("llm_exporter_source_errors_total", {"source": DISCOVERY, "reason": "parse"}),
    "discovery_internal": ("llm_exporter_source_errors_total", {"source": DISCOVERY, "reason": "internal"}),
    "skipped_annotations_too_large": (SKIPPED, {"reason": "annotations_too_large"}),
    "skipped_bad_annotation": (SKIPPED, {"reason": "bad_annotation"}),
    "skipped_malformed": (SKIPPED, {"reason": "malformed"}),
}


class Kubelet:
    """A fake kubelet ``/pods`` (tests/support/k8s.py ``LocalHTTP``) whose answer follows ``mode``.

    The good view: the fixture node's pods, llama-70b-0 annotated to scrape ``good_port``
    (a second, small engine), sglang's scrape annotation removed (nothing listens for it).
    """

    def __init__(self, good_port: int) -> None:
        good = local_pods({LLAMA: good_port})
        sg = next(i for i in good["items"] if i["metadata"]["uid"] == SGLANG)
        del sg["metadata"]["annotations"]["llm-layer-exporter.io/scrape"]
        bad = [
            tenant_pod(i, {"llm-layer-exporter.io/scrape": "true", "llm-layer-exporter.io/port": port})
            for i, port in enumerate(NON_ASCII_PORTS)
        ]
        self.bodies: dict[str, tuple[bytes, bool]] = {
            "healthy": (json.dumps(good).encode(), False),
            "k8s_31mib": (big_pod_list(good), True),
            "k8s_annotations_110": (annotation_flood(good), True),
            "k8s_annotations_28": (annotation_flood(good, pods=28), False),
            "k8s_deep": (deep_pod_list(good), False),
            "k8s_bad_pods": (json.dumps(with_pods(good, [*bad, 42])).encode(), False),  # type: ignore[list-item]
        }
        self.http = LocalHTTP()

    def serve(self, mode: str) -> None:
        body, chunked = self.bodies[mode]
        self.http.set("/pods", body, content_type="application/json", chunked=chunked)

    def reads(self) -> int:
        return sum(1 for path, _ in self.http.requests if path.startswith("/pods"))


#: kubelet phase -> the counter that must increase in it
KUBELET_PHASES = {
    "k8s_31mib": "discovery_too_large",
    "k8s_annotations_110": "discovery_too_large",
    "k8s_annotations_28": "skipped_annotations_too_large",
    "k8s_deep": "discovery_parse",
    "k8s_bad_pods": "skipped_bad_annotation",
}
ENGINE_PHASES = ("200k_series", "over_budget", "50mb_chunked", "rotating_19k")


def counters(serve: Serve, source: str, known: dict[str, float]) -> dict[str, float]:
    """The counters the phases check, from one /metrics (retried: the exporter may be busy).

    ``llm_exporter_series_dropped_total`` is published with the engine's own
    points, so it is absent while the engine is down: then its last value seen
    (in ``known``, updated here) stands in.
    """
    last: Exception | None = None
    for _ in range(5):
        try:
            r = serve.session.get(serve.base + "/metrics", timeout=SCRAPE_TIMEOUT)
            r.raise_for_status()
            text = r.text
            for key, (name, reason) in COUNTERS.items():
                default = None if name == "llm_exporter_series_dropped_total" else 0.0
                got = value_of(text, name, default, source=source, reason=reason)
                if got is not None:
                    known[key] = got
            for key, (name, labels) in KUBELET_COUNTERS.items():
                # the skipped counter is published with discovery's points: absent while it is down
                got = value_of(text, name, None if name == SKIPPED else 0.0, **labels)
                if got is not None:
                    known[key] = got
            return {key: known.get(key, 0.0) for key in (*COUNTERS, *KUBELET_COUNTERS)}
        except (requests.RequestException, ValueError) as exc:
            last = exc
            time.sleep(0.5)
    raise AssertionError(f"/metrics did not answer 5 times in a row: {last!r}")


def run(tmp_path: Path) -> dict[str, Any]:
    """Every phase, every round, then the recovery; prints the figures, raises if the contract does not hold."""
    bodies = {
        "200k_series": many_series(SERIES_200K, "q"),
        "over_budget": over_budget_series(SERIES_OVER),
    }
    # the 200k body must reach the parser (a body over the cap would test too_large instead)
    assert len(bodies["200k_series"]) < DEFAULT_MAX_BODY_BYTES, len(bodies["200k_series"])
    engine = Engine()
    engine.bodies.update(bodies)
    problems: list[str] = []
    figures: dict[str, Any] = {
        "ceiling_mib": MAX_RSS_MIB,
        "kubelet_ceiling_mib": MAX_KUBELET_RSS_MIB,
        "rounds": ROUNDS,
        "budget": BUDGET,
        "recovery_rule": f"recovered <= min(hostile peak, recovery start: the most RSS of its first {RECOVERY_SETTLE_S:g} s) + {RECOVERY_SLACK_MIB:g} MiB",
        "plateau_rule": f"each phase's peak in round {ROUNDS} <= its peak in round 1 + {PLATEAU_SLACK_MIB:g} MiB",
        "bodies_bytes": {k: len(v) for k, v in bodies.items()} | {"healthy": len(VLLM), "50mb_chunked": HUGE},
        "phases": {},
    }
    phases: dict[str, dict[str, Any]] = figures["phases"]
    serve: Serve | None = None
    monitor: Monitor | None = None
    known: dict[str, float] = {}
    with engine.server as srv, LocalHTTP() as good_engine:
        good_engine.set("/metrics", VLLM_TEXT)
        kubelet = Kubelet(good_engine.port)
        figures["bodies_bytes"].update({k: len(b) for k, (b, _) in kubelet.bodies.items()})
        kubelet.serve("healthy")
        server = f"127.0.0.1:{srv.port}"
        source = f"engine:{server}"
        with kubelet.http:
            try:
                serve = Serve(
                    [
                        *("--engine", srv.url, "--gpu-source", "none", "--engine-interval", str(INTERVAL)),
                        *("--kubernetes", "--kubernetes-node-name", NODE, "--kubernetes-pods-url", kubelet.http.url("/pods")),
                        *("--kubernetes-discovery-interval", "1", "--kubernetes-process-sampler", "false"),
                        *("--kubernetes-pod-resources-socket", str(tmp_path / "no-kubelet.sock")),
                    ]
                )
                serve.wait_metrics(
                    lambda m: m.up(source) == 1 and m.up(GOOD_POD_SOURCE) == 1, WAIT, "the engine and the good pod's engine up"
                )
                monitor = Monitor(serve.proc.pid, serve.base, server, source)
                monitor.start()

                def hold(seconds: float) -> None:
                    """Wait ``seconds``, bounded, leaving early only if the exporter died or ran away."""
                    end = time.monotonic() + seconds
                    while time.monotonic() < end:
                        assert serve is not None and monitor is not None
                        if serve.proc.poll() is not None:
                            raise AssertionError(f"the exporter exited with {serve.proc.returncode}:\n{serve.log_tail()}")
                        if monitor.runaway is not None:
                            raise AssertionError(
                                f"RSS reached {monitor.runaway:.0f} MiB (abort bound {ABORT_RSS_MIB:.0f}); exporter stopped"
                            )
                        time.sleep(min(0.25, max(0.0, end - time.monotonic())))

                def run_phase(name: str, mode: str, seconds: float, kubelet_mode: str = "healthy") -> dict[str, Any]:
                    assert serve is not None and monitor is not None
                    before = counters(serve, source, known)
                    reads = kubelet.reads()
                    monitor.phase = name
                    engine.mode = mode
                    kubelet.serve(kubelet_mode)
                    hold(seconds)
                    after = counters(serve, source, known)
                    rss = monitor.rss_of(name)
                    scrapes = monitor.scrapes_of(name)
                    # the engine may be down at the phase's last read: take the highest value any scrape saw
                    seen = [s.dropped_budget for s in scrapes if s.dropped_budget is not None]
                    if seen and max(seen) > after["dropped_budget"]:
                        after["dropped_budget"] = known["dropped_budget"] = max(seen)
                    latencies = [s.latency if s.ok else SCRAPE_TIMEOUT for s in scrapes]
                    health = [lat for p, lat in monitor.health if p == name]
                    phases[name] = {
                        "seconds": seconds,
                        "rss_first_mib": round(rss[0], 1) if rss else None,
                        "rss_max_mib": round(max(rss), 1) if rss else None,
                        "rss_last_mib": round(rss[-1], 1) if rss else None,
                        "rss_samples": len(rss),
                        "scrapes": len(scrapes),
                        "scrape_failures": sum(not s.ok for s in scrapes),
                        "scrape_p50_ms": round(percentile(latencies, 0.50) * 1e3, 1),
                        "scrape_p99_ms": round(percentile(latencies, 0.99) * 1e3, 1),
                        "scrape_max_ms": round(max(latencies) * 1e3, 1) if latencies else None,
                        "healthz_probes": len(health),
                        "healthz_p99_ms": round(percentile(health, 0.99) * 1e3, 1),
                        "healthz_max_ms": round(max(health) * 1e3, 1) if health else None,
                        "engine_series_max": max((s.engine_series for s in scrapes if s.ok), default=0),
                        "source_up_seen": sorted({s.up for s in scrapes if s.ok and s.up is not None}),
                        "good_pod_up_seen": sorted({s.good_up for s in scrapes if s.ok and s.good_up is not None}),
                        "discovery_up_seen": sorted({s.discovery_up for s in scrapes if s.ok and s.discovery_up is not None}),
                        "engine_answers": engine.answered.get(mode, 0),
                        "pod_list_reads": kubelet.reads() - reads,
                        "counter_delta": {k: after[k] - before[k] for k in after},
                    }
                    engine.answered[mode] = 0
                    return phases[name]

                # 1. baseline
                monitor.phase = "baseline"
                hold(BASELINE_S)
                base_samples = [mib for t, p, mib in monitor.rss if p == "baseline" and t >= monitor.rss[-1][0] - SETTLE_WINDOW_S]
                baseline = statistics.median(base_samples)
                figures["baseline_mib"] = round(baseline, 1)
                phases["baseline"] = {
                    "rss_max_mib": round(max(monitor.rss_of("baseline")), 1),
                    "rss_median_last_5s_mib": round(baseline, 1),
                }

                for rnd in range(1, ROUNDS + 1):
                    tag = f"r{rnd}/"
                    # K. the kubelet's hostile inputs first (the engine healthy): in round 1 they start
                    # from the baseline, so their own cost is seen before the engine attacks fill the heap
                    block_start = monitor.rss[-1][2]
                    for name, counter in KUBELET_PHASES.items():
                        got = run_phase(tag + name, "healthy", KUBELET_PHASE_S, kubelet_mode=name)
                        delta = got["counter_delta"]
                        if not delta[counter] > 0:
                            problems.append(
                                f"{tag}{name}: {counter} did not increase over {got['pod_list_reads']} reads: {delta}"
                            )
                        if delta["discovery_internal"]:
                            problems.append(f"{tag}{name}: discovery failed with reason internal")
                        # the good pod stays discovered (its source on every /metrics) and is scraped
                        scrapes = [sc for sc in monitor.scrapes_of(tag + name) if sc.ok]
                        if not scrapes or any(sc.good_up is None for sc in scrapes) or 1.0 not in got["good_pod_up_seen"]:
                            problems.append(
                                f"{tag}{name}: the good pod's engine was dropped or never up: {got['good_pod_up_seen']}"
                            )
                        if name == "k8s_bad_pods" and 1.0 not in got["discovery_up_seen"]:
                            problems.append(f"{tag}{name}: discovery never up beside the bad pods")
                        # round 1 starts from the baseline: the absolute bound; later rounds: what a phase adds
                        most = got["rss_max_mib"]
                        if most is None or (rnd == 1 and most >= MAX_KUBELET_RSS_MIB):
                            problems.append(f"{tag}{name}: RSS reached {most} MiB, ceiling {MAX_KUBELET_RSS_MIB:g} MiB")
                        elif rnd > 1 and most > block_start + KUBELET_SLACK_MIB:
                            problems.append(
                                f"{tag}{name}: RSS reached {most} MiB, {block_start:.1f} MiB when the kubelet phases "
                                f"began + {KUBELET_SLACK_MIB:g} MiB"
                            )
                        for what, bound in (("scrape_p99_ms", LATENCY_P99_S), ("healthz_p99_ms", HEALTHZ_P99_S)):
                            if not got[what] < bound * 1e3:
                                problems.append(f"{tag}{name}: {what} {got[what]} (bound {bound * 1e3:.0f} ms)")

                    # 2. 200 000 series of one family: the family dropped as it streams, the engine kept
                    got = run_phase(tag + "200k_series", "200k_series", PHASE_S)
                    if not got["counter_delta"]["dropped_family_budget"] > 0:
                        problems.append(f"{tag}200k_series: family_budget did not increase: {got['counter_delta']}")
                    if 1.0 not in got["source_up_seen"]:
                        problems.append(f"{tag}200k_series: the engine never read up (the family goes, not the engine)")
                    # 2b. 60 000 series: under the input limit, three times the budget
                    got = run_phase(tag + "over_budget", "over_budget", OVER_BUDGET_S)
                    if not got["counter_delta"]["dropped_budget"] > 0:
                        problems.append(
                            f'{tag}over_budget: series_dropped_total{{reason="budget"}} did not increase: {got["counter_delta"]}'
                        )
                    if 1.0 not in got["source_up_seen"]:
                        problems.append(f"{tag}over_budget: the engine never read up (the budget must cut, not drop the engine)")
                    for name in ("200k_series", "over_budget"):
                        most = phases[tag + name]["engine_series_max"]
                        if most > BUDGET:
                            problems.append(f"{tag}{name}: {most} engine series in one scrape, over the budget of {BUDGET}")
                    # 3. a 50 MB chunked body: refused at the byte cap
                    got = run_phase(tag + "50mb_chunked", "50mb_chunked", PHASE_S)
                    if not got["counter_delta"]["errors_too_large"] > 0:
                        problems.append(f"{tag}50mb_chunked: too_large did not increase: {got['counter_delta']}")
                    # 4. 19 000 series with label values that change on every scrape, under the budget
                    got = run_phase(tag + "rotating_19k", "rotating_19k", PHASE_S)
                    if got["engine_series_max"] < SERIES_ROTATING:
                        problems.append(
                            f"{tag}rotating_19k: at most {got['engine_series_max']} engine series, the {SERIES_ROTATING} rotating ones never came"
                        )
                    for name in ("50mb_chunked", "rotating_19k"):
                        p99 = phases[tag + name]["scrape_p99_ms"]
                        if not p99 < LATENCY_P99_S * 1e3:
                            problems.append(f"{tag}{name}: /metrics p99 {p99} ms (bound {LATENCY_P99_S * 1e3:.0f} ms)")
                    for name in ENGINE_PHASES:
                        most_rss = phases[tag + name]["rss_max_mib"]
                        if most_rss is None or most_rss >= MAX_RSS_MIB:
                            problems.append(f"{tag}{name}: RSS reached {most_rss} MiB, ceiling {MAX_RSS_MIB:g} MiB")

                hostile = [mib for _, p, mib in monitor.rss if p not in ("start", "baseline", "recovery")]
                figures["hostile_max_mib"] = round(max(hostile), 1)
                round_max = {r: max(mib for _, p, mib in monitor.rss if p.startswith(f"r{r}/")) for r in range(1, ROUNDS + 1)}
                figures["round_max_mib"] = {f"r{r}": round(v, 1) for r, v in round_max.items()}
                for r in range(2, ROUNDS + 1):
                    if round_max[r] > round_max[1] + PLATEAU_SLACK_MIB:
                        problems.append(
                            f"round {r}: peak {round_max[r]:.1f} MiB against {round_max[1]:.1f} MiB in round 1 "
                            f"(+{PLATEAU_SLACK_MIB:g} allowed): growing, not a plateau"
                        )

                # 5. recovery: the normal exposition again
                run_phase("recovery", "healthy", RECOVERY_S)
                rec = [mib for t, p, mib in monitor.rss if p == "recovery" and t >= monitor.rss[-1][0] - SETTLE_WINDOW_S]
                recovered = statistics.median(rec)
                figures["recovered_mib"] = round(recovered, 1)
                phases["recovery"]["rss_median_last_5s_mib"] = round(recovered, 1)
                hostile_peak = max(hostile)
                # where the recovery started: the most RSS of its first seconds, while the scrape that was in
                # flight at the switch (the last hostile body) and the first normal one are still handled;
                # a sample taken between the two (a dip) is not where the heap stands
                begun = next(t for t, p, mib in monitor.rss if p == "recovery")
                started = max(mib for t, p, mib in monitor.rss if p == "recovery" and t <= begun + RECOVERY_SETTLE_S)
                limit = min(hostile_peak, started) + RECOVERY_SLACK_MIB
                if recovered > limit:
                    problems.append(
                        f"recovery: RSS {recovered:.1f} MiB {RECOVERY_S:g} s after the engine turned normal, still growing: "
                        f"over min(hostile peak {hostile_peak:.1f}, recovery start {started:.1f}) + {RECOVERY_SLACK_MIB:g} MiB = {limit:.1f} MiB"
                    )
                if 1.0 not in phases["recovery"]["source_up_seen"]:
                    problems.append("recovery: the engine source never read up again")
                log = serve.log_path.read_text(errors="replace")
                internal = counters(serve, source, known)["errors_internal"]
                figures["tracebacks_in_log"] = log.count("Traceback")
                figures["internal_errors"] = internal
                if internal or "Traceback" in log:
                    problems.append(
                        f"an exception escaped (internal errors {internal:g}, tracebacks {log.count('Traceback')}):\n{log[-2000:]}"
                    )
            finally:
                if monitor is not None:
                    monitor.stop()
                    figures["rss_timeline"] = [(round(t, 1), p, round(mib, 1)) for t, p, mib in monitor.rss]
                if serve is not None:
                    figures["exporter_log_tail"] = serve.log_tail(2000)
                    serve.stop()
                figures["problems"] = problems
                figures["passed"] = not problems and "recovered_mib" in figures
                LOG_DIR.mkdir(parents=True, exist_ok=True)
                out = LOG_DIR / "memory-figures.json"
                out.write_text(json.dumps(figures, indent=1))
                summary = {k: v for k, v in figures.items() if k not in ("rss_timeline", "exporter_log_tail")}
                print("\nmemory figures (" + str(out) + "):\n" + json.dumps(summary, indent=1))
    assert not problems, "the memory contract does not hold:\n- " + "\n- ".join(problems)
    return figures


def main() -> int:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="memory-attacks-") as tmp:
        try:
            run(Path(tmp))
        except AssertionError as err:
            print(err)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
