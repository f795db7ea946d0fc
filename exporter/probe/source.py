"""``ProbeSource``: the black-box canary of one engine, as a Source like any other.

Why a source: the runner gives it its own thread and interval, so there is
never more than one probe in flight per engine (the runner samples a source
serially; a lock refuses a second concurrent ``sample()`` all the same), and
its results land in the store beside the engine's own metrics, which the
outside-engine computation and the diagnosis read.

One ``sample()`` is one probe: it resolves the model once (``model: auto``),
sends one small streaming completion under one deadline (``probe.timeout``),
then, where needed, waits (bounded by the engine's interval plus its timeout)
for the engine's next scrape to read the engine's own TTFT for the same window
(``exporter/probe/outside.py``). A probe that fails is a *successful* sample
whose result is counted (``llm_probe_requests_total{result}``): the source is
down only when it cannot probe at all (a credentials file that cannot be read).

Published (labels: the engine's ``server``, ``engine``, ``model``, ``rank``):
cumulative histograms ``llm_probe_ttft_seconds``, ``llm_probe_inter_token_seconds``,
``llm_probe_duration_seconds``; counters ``llm_probe_requests_total{result}``
(every result value from the start, so rates work) and
``llm_probe_tokens_total{kind}`` (``prompt``, ``generation``: the probe's own load,
for dashboards to subtract); last-probe gauges ``llm_probe_last_result{result}``,
``llm_probe_engine_ttft_seconds``, ``llm_probe_outside_engine_seconds`` and
``llm_probe_engine_frozen``. The model label is the model the probe asks for
(cut to ``MAX_LABEL``); the engine label the family the engine source detected.

Logging: one line when the result changes (``http_error`` from an engine without
the OpenAI routes is one warning, then silence until it changes), never a
header, token or password.
"""

from __future__ import annotations

import base64
import logging
import math
import ssl
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from exporter.engines.urls import host_port, origin, safe_url, split_userinfo
from exporter.probe.client import Deadline, ProbeFailure
from exporter.probe.config import ProbeConfig
from exporter.probe.outside import (
    EngineView,
    await_scrape_after,
    engine_ttft,
    engine_view,
    frozen,
)
from exporter.probe.stream import (
    PATHS,
    RESULTS,
    Outcome,
    first_model,
    request_body,
    run_probe,
)
from exporter.samples import HistogramSample, Point, Sample, SampleResult
from exporter.secretfile import read_secret_file
from exporter.store import SnapshotStore
from exporter.tlsclient import ClientTLS, TLSFiles

if TYPE_CHECKING:
    from exporter.engines.config import EngineConfig

log = logging.getLogger(__name__)

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
INTER_TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0)
DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0)
TOKEN_KINDS = ("prompt", "generation")
#: longest model label value (a llama.cpp model id is a file path)
MAX_LABEL = 200
#: room in the runner's timeout beyond the probe, the settle wait and the first wait
_SLACK_S = 1.0


def engine_server(cfg: EngineConfig) -> str:
    """The ``server`` label the engine source uses for ``cfg`` (``EngineSource.server``)."""
    _, auth = split_userinfo(cfg.url)
    server = cfg.name
    if auth is not None and ("@" in server or (auth[1] and auth[1] in server)):
        server = host_port(cfg.url)
    return server


def engine_base(cfg: EngineConfig) -> str:
    """The engine's origin (``scheme://host:port``), without user info: where its OpenAI routes are."""
    parts = urlsplit(split_userinfo(cfg.url)[0])
    return urlunsplit((parts.scheme, parts.netloc, "", "", ""))


class _Histogram:
    """A cumulative histogram kept by the source for its whole life."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds + (math.inf,)
        self.counts = [0] * len(self.bounds)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        value = max(0.0, value)
        for i, le in enumerate(self.bounds):
            if value <= le:
                self.counts[i] += 1
                break
        self.sum += value
        self.count += 1

    def point(self, name: str, labels: dict[str, str]) -> HistogramSample:
        running, buckets = 0, []
        for le, n in zip(self.bounds, self.counts):
            running += n
            buckets.append((le, float(running)))
        return HistogramSample(name, labels, tuple(buckets), self.sum, float(self.count))


class ProbeSource:
    """The Source ``probe:<server>``: one canary completion per interval."""

    def __init__(
        self,
        engine: EngineConfig,
        store: SnapshotStore,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if engine.probe is None:
            raise ValueError("ProbeSource needs an engine with probe settings")
        self.engine = engine
        self.cfg: ProbeConfig = engine.probe
        self.store = store
        self._clock = clock
        self._sleep = sleep
        self.server = engine_server(engine)
        self.engine_source = f"engine:{self.server}"
        self.name = f"probe:{self.server}"
        self.interval = self.cfg.interval
        #: how long a probe waits for the engine's next scrape (its own TTFT for the window)
        self.settle_s = engine.interval + engine.timeout + 0.5
        #: the first sample waits at most this for the engine source's first scrape (stable labels)
        self.first_wait_s = engine.timeout + 0.5
        self.timeout = self.first_wait_s + self.cfg.timeout + self.settle_s + _SLACK_S
        self.base = self.cfg.url or engine_base(engine)
        self.url = self.base + PATHS[self.cfg.api]
        engine_url, self._url_auth = split_userinfo(engine.url)
        #: the engine's credentials go to its own origin only, never to another host
        self._same_origin = origin(self.base) == origin(engine_url)
        self._secrets: list[str] = [s for s in (self._url_auth or ()) if len(s) >= 3]
        #: the engine's own TLS settings, as its scrape has them (exporter/engines/source.py)
        self._tls = ClientTLS(TLSFiles(ca_file=engine.ca_bundle, verify=engine.tls_verify or bool(engine.ca_bundle)))
        self._lock = threading.Lock()
        self._model: str | None = None if self.cfg.model == "auto" else self.cfg.model
        #: the model label: the last model resolved, kept while a new lookup is pending (no label churn)
        self._label_model: str = "" if self.cfg.model == "auto" else self.cfg.model
        self._family: str = engine.type if engine.type != "auto" else ""
        self._first = True
        self._hist = {
            "llm_probe_ttft_seconds": _Histogram(TTFT_BUCKETS),
            "llm_probe_inter_token_seconds": _Histogram(INTER_TOKEN_BUCKETS),
            "llm_probe_duration_seconds": _Histogram(DURATION_BUCKETS),
        }
        self.results: dict[str, int] = dict.fromkeys(RESULTS, 0)
        self.tokens: dict[str, int] = dict.fromkeys(TOKEN_KINDS, 0)
        #: the last probe: its outcome, the engine's TTFT for it, time outside the engine, frozen
        self.last: Outcome | None = None
        self.last_engine_ttft: float | None = None
        self.last_outside: float | None = None
        self.last_method: str | None = None
        self.last_frozen: bool | None = None
        self._logged: str | None = None
        self._points: list[Point] = []

    # ------------------------------------------------------------------ Source protocol

    def sample(self) -> SampleResult:
        """One probe (never two at once); a failed probe is a counted result, not a failed sample."""
        if not self._lock.acquire(blocking=False):
            return SampleResult(list(self._points))  # a probe is in flight: never a second one
        try:
            return self._sample()
        finally:
            self._lock.release()

    def close(self) -> None:
        """Nothing to release: every probe opens and closes its own connection."""

    # ------------------------------------------------------------------ one probe

    def _sample(self) -> SampleResult:
        if self._first:
            self._await_engine_source()
            self._first = False
        authorization = self._authorization()
        before = engine_view(self.store, self.engine_source)
        if before is not None and before.family and not self._family:
            self._family = before.family
        outcome = self._probe(authorization)
        self._count(outcome)
        after: EngineView | None = engine_view(self.store, self.engine_source)
        #: one bounded budget for every wait on the engine's next scrape (the runner's timeout counts it once)
        until = self._clock() + self.settle_s
        self.last_engine_ttft = self.last_outside = self.last_method = None
        if outcome.ttft is not None:
            if outcome.engine_prompt_seconds is None and before is not None and before.ttft_count is not None:
                after = (
                    await_scrape_after(self.store, self.engine_source, outcome.ended, until, self._clock, self._sleep) or after
                )
            found = engine_ttft(outcome.engine_prompt_seconds, before, after)
            if found is not None:
                self.last_engine_ttft, self.last_method = found
                self.last_outside = outcome.ttft - found[0]
        gap = self.cfg.timeout / 2
        if outcome.result != "ok" and before is not None and (after is None or after.scraped_at < outcome.started + gap):
            # no scrape late enough in the window yet (one may be landing): wait for it, bounded
            after = (
                await_scrape_after(self.store, self.engine_source, outcome.started + gap, until, self._clock, self._sleep)
                or after
            )
        self.last_frozen = False if outcome.result == "ok" else frozen(before, after, outcome.started, gap)
        self.last = outcome
        self._log(outcome)
        self._points = self._publish()
        return SampleResult(list(self._points))

    def _probe(self, authorization: str | None) -> Outcome:
        """Model lookup (once, for ``model: auto``) and the completion, under one deadline."""
        deadline = Deadline(self.cfg.timeout, self._clock)
        started = self._clock()
        tls = self._tls_context() if self.base.startswith("https:") else None
        if self._model is None:
            try:
                self._model = first_model(self.base, authorization, deadline, tls)
                self._label_model = self._model
            except ProbeFailure as failure:
                return Outcome(failure.result, started, self._clock(), detail=self._scrubbed(failure.detail))
        body = request_body(self.cfg.api, self._model, self.cfg.prompt, self.cfg.max_tokens)
        outcome = run_probe(self.url, body, authorization, deadline, tls, self._clock)
        outcome.started = started
        outcome.detail = self._scrubbed(outcome.detail)
        if outcome.result == "http_error" and self.cfg.model == "auto":
            self._model = None  # the engine may have been restarted with another model: look again
        return outcome

    def _count(self, o: Outcome) -> None:
        self.results[o.result] += 1
        if o.ttft is not None:
            self._hist["llm_probe_ttft_seconds"].observe(o.ttft)
        for gap in o.gaps:
            self._hist["llm_probe_inter_token_seconds"].observe(gap)
        self._hist["llm_probe_duration_seconds"].observe(o.duration)
        if o.prompt_tokens is not None:
            self.tokens["prompt"] += o.prompt_tokens
        self.tokens["generation"] += o.generated_tokens

    def labels(self) -> dict[str, str]:
        """The engine's labels for the probe's series."""
        return {"server": self.server, "engine": self._family, "model": self._label_model[:MAX_LABEL], "rank": ""}

    def _publish(self) -> list[Point]:
        labels = self.labels()
        points: list[Point] = [h.point(name, labels) for name, h in self._hist.items()]
        points += [Sample("llm_probe_requests_total", {**labels, "result": r}, float(n)) for r, n in self.results.items()]
        points += [Sample("llm_probe_tokens_total", {**labels, "kind": k}, float(n)) for k, n in self.tokens.items()]
        if self.last is not None:
            points += [Sample("llm_probe_last_result", {**labels, "result": r}, float(r == self.last.result)) for r in RESULTS]
        if self.last_engine_ttft is not None and self.last_outside is not None:
            points.append(Sample("llm_probe_engine_ttft_seconds", labels, self.last_engine_ttft))
            points.append(Sample("llm_probe_outside_engine_seconds", labels, self.last_outside))
        if self.last_frozen is not None:
            points.append(Sample("llm_probe_engine_frozen", labels, float(self.last_frozen)))
        return points

    def _await_engine_source(self) -> None:
        """Before the first probe, give the engine source (started with us) a moment to scrape once,
        so the series carry the detected engine family from their first sample."""
        until = self._clock() + self.first_wait_s
        while self._clock() < until:
            st = self.store.states().get(self.engine_source)
            if st is None or st.attempted:
                return
            self._sleep(0.05)

    def _log(self, o: Outcome) -> None:
        """One line per change of result; repeats are silent (debug)."""
        if o.result == self._logged:
            log.debug("%s: probe %s %s", self.name, o.result, o.detail)
            return
        previous, self._logged = self._logged, o.result
        if o.result == "ok":
            if previous is not None:
                log.info("%s: probe ok again (TTFT %.3f s)", self.name, o.ttft or 0.0)
            return
        log.warning("%s: probe %s: %s", self.name, o.result, o.detail)

    # ------------------------------------------------------------------ credentials and TLS

    def _authorization(self) -> str | None:
        """The Authorization header value, read now (rotation without restart); never logged."""
        e = self.engine
        if not self._same_origin:
            token = self._read_secret(self.cfg.bearer_token_file, "probe.bearer_token_file")
            return f"Bearer {token}" if token else None
        token = self._read_secret(e.bearer_token_file, "bearer_token_file")
        if token:
            return f"Bearer {token}"
        pair: tuple[str, str] | None = None
        if e.basic_auth_username is not None:
            pair = (e.basic_auth_username, self._read_secret(e.basic_auth_password_file, "basic_auth.password_file") or "")
        elif self._url_auth is not None:
            pair = self._url_auth
        if pair is None:
            token = self._read_secret(self.cfg.bearer_token_file, "probe.bearer_token_file")
            return f"Bearer {token}" if token else None
        return "Basic " + base64.b64encode(f"{pair[0]}:{pair[1]}".encode()).decode("ascii")

    def _read_secret(self, path: str | None, what: str) -> str | None:
        """A token or password read from ``path`` now (rotation without restart); never logged."""
        return read_secret_file(path, what, self._secrets)

    def _tls_context(self) -> ssl.SSLContext:
        """The engine's TLS settings, rebuilt when its ``ca_bundle`` changes (rotation: exporter/tlsclient.py)."""
        return self._tls.context()

    def _scrubbed(self, message: str) -> str:
        for secret in self._secrets:
            message = message.replace(secret, "<redacted>")
        return message[:300]

    def describe(self) -> str:
        """One line for the start-up log: what is probed, where (no secrets)."""
        return f"{self.name}: {self.cfg.api} at {safe_url(self.url)} every {self.interval:g} s (timeout {self.cfg.timeout:g} s)"
