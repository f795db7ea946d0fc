"""Serving-pod discovery: annotated pods on this node become engine sources, no per-pod config.

A pod is scraped when it carries::

    metadata:
      annotations:
        llm-layer-exporter.io/scrape: "true"     # required
        llm-layer-exporter.io/port: "8000"       # default: the first containerPort declared
        llm-layer-exporter.io/path: /metrics     # default /metrics
        llm-layer-exporter.io/engine: vllm       # auto (default), vllm, sglang, tgi, trtllm, llamacpp

and is Running with a pod IP (not terminating). Each becomes ``EngineSource``
``engine:<namespace>/<pod>`` (``server`` label ``<namespace>/<pod>``) scraping
``http://<pod IP>:<port><path>``, its series labelled ``namespace`` and ``pod``
(``PodLabelled``); with the process sampler on, also ``process:<namespace>/<pod>``,
whose PID is found through the pod's cgroup (the root process of the container
that declares the port, else the first container; needs ``hostPID: true``).

Why a source: the refresh (every 30 s by default) runs on its own runner thread
like any sample, with its timeout, and its health is ``llm_exporter_source_up
{source="kubernetes:discovery"}``; it publishes no series of its own. The
engine sources are added to and removed from the running ``RunnerGroup``
(``bind_runner_group``, called by ``RunnerGroup.add``): a new pod starts
scraping at once, a pod gone or an annotation removed stops its sources and
drops their series, a changed annotation replaces them.

Faults: a failed pod list (unreachable, over the byte cap: ``too_large``, not
a PodList: ``parse``) fails this source and keeps the engines found before: a
blip of the API server must not blank every engine. One bad pod is never the
node's discovery: annotations are tenant input, so a bad one (a port that is
not 1-65535 in ASCII digits, a relative path, an unknown engine), or a pod the
list reader left out or read in part (``exporter/kubernetes/pods.py``), is one
warning line per pod and problem, logged again only after it changed; the pod
is skipped, counted in ``llm_exporter_kubernetes_pods_skipped_total{reason}``
once per pod list read, and every other pod is still added and removed. At most
``MAX_TARGETS`` pods are scraped.

Log lines are bounded by time, never by pods x refreshes (``LogDigest``): pods
flapping in and out of the list once wrote 96 lines a second (a pod started, a
pod stopped, its bad annotation again, its new engine source down: each per pod
per refresh). Each kind of event (pods added, pods removed, pods skipped for a
bad annotation, the list's left-out items changing, a discovered source going
down or recovering) writes its first ``LOG_DETAIL_LINES`` lines of a window as
they happen (a new pod is in the log at once, as before); the rest of the window
is counted and written as one line when the window ends, with the count and a few
examples ("scraping 37 more pod(s) in the last 10s, not logged one by one; e.g.
..."). While a kind keeps overflowing, each further window is that one line only;
after a quiet window the first lines are written as they happen again. A window
is the discovery interval, at least ``LOG_WINDOW_S``. The discovered sources'
up/down lines take this path because a pod that comes back gets a new runner,
whose first failure the runner would log afresh (``exporter/runner.py`` keeps
one line per ``LOG_EVERY_S`` per runner, which still holds). A failing pod list
is this source's own state and is logged by its runner, once per ``LOG_EVERY_S``
at most. The counters are unchanged: the log is for people, the metrics count
everything.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from exporter.engines.config import ENGINE_TYPES, EngineConfig
from exporter.kubernetes.cgroup import container_root_pid
from exporter.kubernetes.pods import ANNOTATION_PREFIX, MAX_ANNOTATION_BYTES, Pod, PodDirectory
from exporter.runner import LOG_EVERY_S, SourceRunner, TransitionLog
from exporter.samples import HistogramSample, Point, Sample, SampleResult, SourceError
from exporter.schema import KUBERNETES_POD_SKIP_REASONS
from exporter.store import SnapshotStore

log = logging.getLogger(__name__)

SCRAPE = ANNOTATION_PREFIX + "scrape"
PORT = ANNOTATION_PREFIX + "port"
PATH = ANNOTATION_PREFIX + "path"
ENGINE = ANNOTATION_PREFIX + "engine"
DEFAULT_INTERVAL_S = 30.0
MAX_TARGETS = 64
#: seconds between two scans of /proc for a discovered pod's process while it is not found
FIND_EVERY_S = 10.0
SKIPPED = "llm_exporter_kubernetes_pods_skipped_total"
_TOO_LARGE = f"its annotations are over {MAX_ANNOTATION_BYTES // 1024} KiB and are ignored"
_NOT_AN_IP = "is not an IP address"
#: discovery's log lines are counted in windows of the discovery interval, this long at least
LOG_WINDOW_S = 10.0
#: lines of one kind written as they happen in a window; the rest are counted into one line
LOG_DETAIL_LINES = 5
#: examples one counted line names (each cut to ``LOG_EXAMPLE_CHARS``)
LOG_EXAMPLES = 3
LOG_EXAMPLE_CHARS = 160
#: kind of event -> (level, what the counted line says; ``{n}``: how many were not logged one by one)
LOG_KINDS: dict[str, tuple[int, str]] = {
    "added": (logging.INFO, "scraping {n} more pod(s)"),
    "removed": (logging.INFO, "stopped scraping {n} more pod(s)"),
    "skipped": (logging.WARNING, "{n} more pod(s) skipped for a bad annotation"),
    "left_out": (logging.WARNING, "the pod list's left-out items changed {n} more time(s)"),
    "down": (logging.WARNING, "{n} more discovered source(s) went down"),
    "recovered": (logging.INFO, "{n} more discovered source(s) recovered"),
}


@dataclass
class _Window:
    """One kind's current window: its start (None: no window open), the lines it may still write
    as they happen, and what it counted instead."""

    start: float | None = None
    budget: int = 0
    counted: int = 0
    examples: list[str] = field(default_factory=list)


class LogDigest:
    """Discovery's log lines: at most ``detail`` of a kind per window as they happen, then one
    counted line per window (module docstring). Thread-safe: discovered sources' runners report
    their transitions from their own threads."""

    def __init__(self, window: float, clock: Callable[[], float] = time.monotonic, detail: int = LOG_DETAIL_LINES) -> None:
        self.window = window
        self.clock = clock
        self.detail = detail
        self._lock = threading.Lock()
        self._windows = {kind: _Window() for kind in LOG_KINDS}

    def event(self, kind: str, line: str, example: str) -> None:
        """One event of ``kind``: ``line`` is written now if its window allows, else counted
        (``example`` may be named in the counted line)."""
        now = self.clock()
        out: list[tuple[int, str]] = []
        with self._lock:
            w = self._windows[kind]
            self._close(kind, w, now, out, force=False)
            if w.start is None:
                w.start, w.budget = now, self.detail
            if w.budget > 0:
                w.budget -= 1
                out.append((LOG_KINDS[kind][0], line))
            else:
                w.counted += 1
                example = example[:LOG_EXAMPLE_CHARS]
                if len(w.examples) < LOG_EXAMPLES and example not in w.examples:
                    w.examples.append(example)
        _write(out)

    def flush(self, force: bool = False) -> None:
        """Write the counted line of every window that is over (``force``: of every window, now)."""
        now = self.clock()
        out: list[tuple[int, str]] = []
        with self._lock:
            for kind, w in self._windows.items():
                self._close(kind, w, now, out, force)
        _write(out)

    def _close(self, kind: str, w: _Window, now: float, out: list[tuple[int, str]], force: bool) -> None:
        if w.start is None or (not force and now - w.start < self.window):
            return
        if not w.counted:
            w.start = None  # a quiet window: the next event opens one, its lines written as they happen
            return
        level, what = LOG_KINDS[kind]
        line = f"discovery: {what.format(n=w.counted)} in the last {now - w.start:.0f}s, not logged one by one"
        out.append((level, f"{line}; e.g. {'; '.join(w.examples)}"))
        # it overflowed: the next window only counts, so a flood is one line a window
        w.start, w.budget, w.counted, w.examples = now, 0, 0, []


def _write(lines: list[tuple[int, str]]) -> None:
    for level, line in lines:
        log.log(level, "%s", line)


class _DigestTransitions(TransitionLog):
    """A discovered source's up/down lines, through discovery's ``LogDigest`` (module docstring);
    still at most one per ``LOG_EVERY_S`` for the source itself, as ``TransitionLog`` decides."""

    def __init__(self, name: str, digest: LogDigest) -> None:
        super().__init__(name, LOG_EVERY_S, clock=digest.clock)
        self.digest = digest

    def _emit(self, now: float) -> None:
        extra = ""
        if self.suppressed:
            extra = f" ({self.suppressed} transition(s) not logged in the last {now - (self._logged_at or now):.0f}s)"
        if self._up:
            self.digest.event("recovered", f"source {self.name} recovered{extra}", self.name)
        else:
            self.digest.event("down", f"source {self.name} down: {self._detail}{extra}", f"{self.name}: {self._detail}")
        self._logged_at = now
        self.suppressed = 0


class _Discovered:
    """What discovery hands the runner group: a discovered source, run by a ``SourceRunner`` whose
    up/down lines go through the digest."""

    def __init__(self, source: Any, digest: LogDigest) -> None:
        self.source = source
        self.name: str = source.name
        self.digest = digest

    def make_runner(self, store: SnapshotStore) -> SourceRunner:
        runner = SourceRunner(self.source, store)
        runner.transitions = _DigestTransitions(self.source.name, self.digest)
        return runner


@dataclass(frozen=True)
class Target:
    """One annotated, running pod to scrape."""

    uid: str
    namespace: str
    pod: str
    url: str
    engine: str
    #: the container whose root process the process sampler follows
    container: str

    @property
    def server(self) -> str:
        return f"{self.namespace}/{self.pod}"


def _truthy(value: str) -> bool:
    return value.strip().lower() in ("true", "1", "yes", "on")


def _port(text: str) -> int | None:
    """A port number written in ASCII digits (``str.isdigit`` also takes '８０８０', '٨٠' and '²')."""
    if not (0 < len(text) <= 5 and text.isascii() and text.isdigit()):
        return None
    port = int(text)
    return port if 0 < port < 65536 else None


def _url_path(text: str) -> bool:
    """An absolute URL path of printable ASCII, with no space and no fragment."""
    return text.startswith("/") and len(text) <= 1024 and all(33 <= ord(ch) < 127 and ch != "#" for ch in text)


def target_of(pod: Pod) -> Target | str | None:
    """The target an annotated pod asks for, a problem (one line) when its annotations are bad,
    or None when it does not ask (no ``scrape: "true"``) or is not running."""
    ann = pod.annotations
    if not _truthy(ann.get(SCRAPE, "")):
        return None
    if pod.phase != "Running" or not pod.ip or pod.terminating:
        return None
    where = f"pod {pod.namespace}/{pod.name}"
    try:
        ip = ipaddress.ip_address(pod.ip)
    except ValueError:
        return f"{where}: pod IP {pod.ip[:60]!r} {_NOT_AN_IP}"
    raw_port = ann.get(PORT, "").strip()
    container = next((c for c in pod.containers if c.ports), pod.containers[0] if pod.containers else None)
    if raw_port:
        found_port = _port(raw_port)
        if found_port is None:
            return f"{where}: annotation {PORT}={raw_port[:40]!r} is not a port number 1-65535 in ASCII digits"
        port = found_port
        container = next((c for c in pod.containers if port in c.ports), container)
    elif container is not None and container.ports:
        port = container.ports[0]
    else:
        return f"{where}: no {PORT} annotation and no containerPort declared"
    path = ann.get(PATH, "/metrics").strip() or "/metrics"
    if not _url_path(path):
        return f"{where}: annotation {PATH}={path[:80]!r} is not an absolute URL path"
    engine = ann.get(ENGINE, "auto").strip().lower() or "auto"
    if engine not in ENGINE_TYPES:
        return f"{where}: annotation {ENGINE}={engine[:40]!r} is not one of {', '.join(ENGINE_TYPES)}"
    host = f"[{ip}]" if ip.version == 6 else str(ip)
    return Target(pod.uid, pod.namespace, pod.name, f"http://{host}:{port}{path}", engine, container.name if container else "")


class PodLabelled:
    """A source whose points get ``namespace`` and ``pod`` labels (declared for engine and
    process metrics in --kubernetes mode: ``exporter.schema.KUBERNETES_ENGINE_LABELS``)."""

    def __init__(self, inner: Any, namespace: str, pod: str) -> None:
        self.inner = inner
        self.name = inner.name
        self.interval = inner.interval
        self.timeout = inner.timeout
        self.extra = {"namespace": namespace, "pod": pod}

    def sample(self) -> SampleResult:
        result = self.inner.sample()
        extra = self.extra
        points: list[Point] = []
        for p in result.points:
            if isinstance(p, HistogramSample):
                points.append(replace(p, labels={**p.labels, **extra}))
            elif isinstance(p, Sample):
                points.append(Sample(p.name, {**p.labels, **extra}, p.value))
        return SampleResult(points, result.partial_errors)

    def close(self) -> None:
        self.inner.close()


class PodProcessFinder:
    """The root PID of a discovered pod's container, found through the cgroups under ``proc_root``.

    The container's runtime ID is looked up in the latest pod list on every
    search, so a restarted container is followed; a search that found nothing
    is not repeated for ``FIND_EVERY_S`` seconds (one search reads every
    process's cgroup file on the node).
    """

    def __init__(
        self,
        directory: PodDirectory,
        uid: str,
        container: str,
        proc_root: str = "/proc",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.directory = directory
        self.uid = uid
        self.container = container
        self.proc_root = proc_root
        self._clock = clock
        self._missed_at: float | None = None

    def __call__(self) -> int | None:
        now = self._clock()
        if self._missed_at is not None and now - self._missed_at < FIND_EVERY_S:
            return None
        latest = self.directory.latest()
        pod = latest.by_uid.get(self.uid) if latest is not None else None
        runtime = next((c.runtime_id for c in pod.containers if c.name == self.container), "") if pod else ""
        pid = container_root_pid(self.uid, runtime, self.proc_root) if runtime else None
        self._missed_at = None if pid is not None else now
        return pid


class DiscoverySource:
    """Source ``kubernetes:discovery``: keeps one engine (and process) source per annotated pod."""

    name = "kubernetes:discovery"

    def __init__(
        self,
        directory: PodDirectory,
        *,
        engine_interval: float = 5.0,
        engine_timeout: float = 3.0,
        engine_max_series: int = 20_000,
        process_sampler: bool = True,
        process_interval: float = 1.0,
        proc_root: str = "/proc",
        interval: float = DEFAULT_INTERVAL_S,
        timeout: float = 10.0,
        remove_wait: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.directory = directory
        self.engine_interval = engine_interval
        self.engine_timeout = engine_timeout
        self.engine_max_series = engine_max_series
        self.process_sampler = process_sampler
        self.process_interval = process_interval
        self.proc_root = proc_root
        self.interval = interval
        self.timeout = timeout
        self.remove_wait = remove_wait
        self._group: Any = None
        #: uid -> (target, names of the sources made for it)
        self._active: dict[str, tuple[Target, list[str]]] = {}
        #: uid -> the problem last logged for it
        self._problems: dict[str, str] = {}
        #: llm_exporter_kubernetes_pods_skipped_total, by reason
        self.skipped: dict[str, int] = dict.fromkeys(KUBERNETES_POD_SKIP_REASONS, 0)
        #: when the pod list last counted was fetched (a list is counted once, however often it is read)
        self._counted: float | None = None
        #: pods left out of the last list, by reason (logged when it changes)
        self._left_out: dict[str, int] = {}
        #: every line discovery writes goes through it: bounded by windows, never pods x refreshes
        self.digest = LogDigest(max(interval, LOG_WINDOW_S), clock)

    def bind_runner_group(self, group: Any) -> None:
        """Called by ``RunnerGroup.add``: where discovered sources are started and stopped."""
        self._group = group

    @property
    def targets(self) -> dict[str, Target]:
        return {uid: t for uid, (t, _) in self._active.items()}

    def sample(self) -> SampleResult:
        if self._group is None:
            raise SourceError("internal", "discovery is not attached to a runner group")
        self.digest.flush()  # the windows that ended, even when this refresh fails
        listed = self.directory.refresh()
        wanted: dict[str, Target] = {}
        problems: dict[str, str] = {}
        skipped = dict(listed.skipped)
        for pod in listed.pods:
            found = target_of(pod)
            if isinstance(found, str):
                problems[pod.uid] = found
                reason = "malformed" if found.endswith(_NOT_AN_IP) else "bad_annotation"
                skipped[reason] = skipped.get(reason, 0) + 1
            elif found is not None:
                wanted[found.uid] = found
            elif "annotations_too_large" in pod.problems:
                problems[pod.uid] = f"pod {pod.namespace}/{pod.name}: {_TOO_LARGE}"
        for uid, problem in problems.items():
            if self._problems.get(uid) != problem:
                self.digest.event("skipped", f"discovery: {problem}; pod skipped", problem)
        self._problems = problems
        if listed.fetched_at != self._counted:
            self._counted = listed.fetched_at
            for reason, n in skipped.items():
                if reason in self.skipped:
                    self.skipped[reason] += n
            left_out = {r: n for r, n in listed.skipped.items() if r in ("malformed", "too_many_pods")}
            if left_out and left_out != self._left_out:
                which = ", ".join(f"{r}: {n}" for r, n in left_out.items())
                self.digest.event("left_out", f"discovery: pod list: items left out ({which}); the other pods are used", which)
            self._left_out = left_out
        partial: list[SourceError] = []
        if len(wanted) > MAX_TARGETS:
            partial.append(SourceError("too_many_series", f"{len(wanted)} annotated pods, scraping the first {MAX_TARGETS}"))
            wanted = dict(sorted(wanted.items(), key=lambda kv: kv[1].server)[:MAX_TARGETS])
        for uid in [u for u, (t, _) in self._active.items() if wanted.get(u) != t]:
            self._remove(uid)
        for uid, target in wanted.items():
            if uid not in self._active:
                self._add(target)
        self.digest.flush()
        points: list[Point] = [Sample(SKIPPED, {"reason": r}, float(n)) for r, n in self.skipped.items()]
        return SampleResult(points, partial)

    def _add(self, target: Target) -> None:
        from exporter.engines.source import EngineSource

        cfg = EngineConfig(
            url=target.url,
            name=target.server,
            type=target.engine,
            interval=self.engine_interval,
            timeout=self.engine_timeout,
            max_series=self.engine_max_series,
        )
        sources: list[Any] = [PodLabelled(EngineSource(cfg), target.namespace, target.pod)]
        if self.process_sampler and target.container:
            from exporter.process.sampler import ProcessSource

            finder = PodProcessFinder(self.directory, target.uid, target.container, self.proc_root)
            process = ProcessSource(
                target.server, finder=finder, interval=self.process_interval, timeout=max(1.0, self.process_interval)
            )
            sources.append(PodLabelled(process, target.namespace, target.pod))
        for source in sources:
            self._group.add(_Discovered(source, self.digest))
        self._active[target.uid] = (target, [s.name for s in sources])
        self.digest.event("added", f"discovery: scraping {target.server} ({target.url}, engine {target.engine})", target.server)

    def _remove(self, uid: str) -> None:
        target, names = self._active.pop(uid)
        for name in names:
            self._group.remove(name, timeout=self.remove_wait)
        self.digest.event("removed", f"discovery: stopped scraping {target.server}", target.server)

    def close(self) -> None:
        """Forgets the discovered sources (the group that ran them stops them with the rest) and
        writes what the log windows still counted."""
        self._active.clear()
        self.digest.flush(force=True)


__all__ = [
    "ENGINE",
    "LOG_DETAIL_LINES",
    "LOG_KINDS",
    "LOG_WINDOW_S",
    "PATH",
    "PORT",
    "SCRAPE",
    "DiscoverySource",
    "LogDigest",
    "PodLabelled",
    "PodProcessFinder",
    "Target",
    "target_of",
]
