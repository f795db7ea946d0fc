"""``EngineSource``: scrape one inference server's own /metrics, publish neutral points.

Why these limits: the engine is someone else's process. It may be down, slow,
answer an error page or a redirect, stream a body without end or grow series
without bound (labels per request, per LoRA adapter). Each case becomes a
``SourceError`` with a bounded reason, so the exporter keeps serving, marks the
source down, counts the reason and recovers on its own at the next interval.
The response as a whole is bounded by one deadline and one byte cap
(``fetch.py``); what is published is bounded by a series budget and a
label-value length limit (``budget.py``), and what the budget cuts is counted
in ``llm_exporter_series_dropped_total`` instead of dropping the engine; a
single family over its share is dropped as it is parsed and counted there with
its name in ``family`` (the first ``SERIES_DROP_FAMILIES`` named, then
``other``). llama.cpp's /props and /slots live inside the same deadline, and a
slow one costs only the slot metrics (a partial error, the source stays up).

Why a failed scrape holds nothing: the error the runner stores is raised
fresh from a frame that holds no body, with no cause, context or inner
traceback, so nothing a failed attempt read or parsed outlives it.

Secrets: the bearer token and a basic-auth password file are re-read on every
scrape (rotation without restart) and sent only in the Authorization header.
Credentials written into the URL (``http://user:pass@host/``) are taken out
once: the URL used in names, labels, logs and messages has no userinfo, and
the pair is kept in memory and sent as basic auth. Error messages are built
from our own words plus such URLs, and are scrubbed of every secret as a
second guard.
"""

from __future__ import annotations

import base64
import logging
import ssl
import time
from typing import TYPE_CHECKING

from exporter import __version__
from exporter.engines import llamacpp_slots, normalize_exposition, settings
from exporter.engines.batchsize import SERIES_COST as BATCH_SERIES_COST
from exporter.engines.batchsize import BatchSizeSampler
from exporter.engines.budget import cut_value, family_share, input_limit, published_series
from exporter.engines.fetch import Request, get
from exporter.engines.textparse import ParseError, SeriesLimitError
from exporter.engines.urls import host_port, safe_url, split_userinfo
from exporter.memtrim import LARGE_BYTES, TRIMS
from exporter.samples import Point, Sample, SampleResult, SourceError
from exporter.schema import SERIES_DROP_FAMILIES, SERIES_DROP_OTHER_FAMILY, SERIES_DROP_REASONS
from exporter.secretfile import read_secret_file
from exporter.tlsclient import ClientTLS, TLSFiles

if TYPE_CHECKING:  # config imports the CLI; keep this module light to import
    from exporter.engines.config import EngineConfig

__all__ = ["ACCEPT", "EngineSource", "safe_url"]

log = logging.getLogger(__name__)

#: Ask for the classic text format (no OpenMetrics ``_created`` lines to skip).
ACCEPT = "text/plain;version=0.0.4;q=1.0,application/openmetrics-text;q=0.5,*/*;q=0.1"
#: Longest message a failed scrape leaves behind.
MAX_MESSAGE = 300
DROPPED = "llm_exporter_series_dropped_total"
#: llama.cpp's /props and /slots must end by this share of the scrape's timeout (the rest is
#: the runner's slack: a sample() over its timeout marks the source down, exporter/runner.py)
SIDE_FETCH_SHARE = 0.75
#: a side fetch is not started with less time than this left
MIN_SIDE_FETCH_SECONDS = 0.02
#: longest family name in the ``family`` label and the log (longer ones are cut, budget.cut_value)
MAX_FAMILY_LABEL = 128
#: how long the settings read from the serving process (/proc/PID/cmdline, environ) are kept
SETTINGS_REREAD_SECONDS = 60.0
#: failures that mean a large body was read or parsed before it was refused
_LARGE_REASONS = frozenset({"too_large", "too_many_series"})


class EngineSource:
    """The Source for ``engine:<name>``: one HTTP GET per interval, then normalise."""

    def __init__(self, cfg: EngineConfig) -> None:
        self.cfg = cfg
        self._url, self._url_auth = split_userinfo(cfg.url)
        server = cfg.name
        if self._url_auth is not None and ("@" in server or (self._url_auth[1] and self._url_auth[1] in server)):
            server = host_port(cfg.url)  # a name made from the URL's netloc must not carry its userinfo
        self.server = server
        self.name = f"engine:{server}"
        self.interval = cfg.interval
        #: the engine's deadline: its whole answer, side fetches included (exporter/engines/fetch.py)
        self.timeout = cfg.timeout
        #: our own work on a body capped in bytes and series may run one interval past it on a starved
        #: node before the attempt counts as hung (exporter/sources.py attempt_bound; issue 37)
        self.attempt_bound = cfg.timeout + cfg.interval
        #: family and generation of the last successful scrape (None before one)
        self.family: str | None = None
        self.generation: str | None = None
        #: series not published since start, by reason (published as a counter)
        self.dropped: dict[str, int] = dict.fromkeys(SERIES_DROP_REASONS, 0)
        self._dropping: set[str] = set()
        #: sample lines of families over their share since start, by family: the first
        #: SERIES_DROP_FAMILIES families named (for life: each counter only grows), the rest "other"
        self.dropped_families: dict[str, int] = {}
        self._secrets: list[str] = [s for s in (self._url_auth or ()) if len(s) >= 3]
        #: a ca_bundle keeps verification on whatever tls_verify says (tls_verify: false is for no bundle)
        self._tls = ClientTLS(TLSFiles(ca_file=cfg.ca_bundle, verify=cfg.tls_verify or bool(cfg.ca_bundle)))
        self._body_bytes = 0
        #: (family, monotonic time read, settings) of the serving process (cfg.pid), re-read every SETTINGS_REREAD_SECONDS
        self._process_settings: tuple[str, float, settings.EngineSettings] | None = None
        #: the same for the engine's info route (SGLang /get_server_info, TGI /info)
        self._info_settings: tuple[str, float, settings.EngineSettings] | None = None
        #: the running batch size per scrape, as a bounded histogram (exporter/engines/batchsize.py)
        self._batch_sizes = BatchSizeSampler()
        if not cfg.tls_verify and not cfg.ca_bundle:
            log.warning("%s: TLS certificate verification is off (tls_verify: false)", self.name)

    # ------------------------------------------------------------------ Source protocol

    def sample(self) -> SampleResult:
        """Scrape and normalise; raises ``SourceError`` with a bounded reason."""
        self._body_bytes = 0
        outcome = self._attempt()
        large = self._body_bytes >= LARGE_BYTES or (not isinstance(outcome, SampleResult) and outcome[0] in _LARGE_REASONS)
        # the large parse's pages go back to the OS, and what it left is trimmed as it is freed (exporter/memtrim.py)
        TRIMS.after_scrape(large)
        if isinstance(outcome, SampleResult):
            return outcome
        reason, message = outcome
        # raised here, outside any except block: no context, and a traceback whose
        # only frames are this one (self, reason, message) and the caller's
        raise SourceError(reason, message)

    def close(self) -> None:
        """Nothing to release: every scrape opens and closes its own connection."""

    # ------------------------------------------------------------------ one attempt

    def _attempt(self) -> SampleResult | tuple[str, str]:
        """A result, or ``(reason, message)``: plain strings, nothing of the attempt kept."""
        try:
            return self._scrape()
        except SourceError as err:
            return err.reason, self._scrubbed(err.message)

    def _scrape(self) -> SampleResult:
        cfg = self.cfg
        # one deadline for the scrape: /metrics, parsing and llama.cpp's side fetches all live within it
        started = time.monotonic()
        text = self._fetch()
        try:
            # the budget covers everything this source publishes, its dropped counter included
            budget = max(1, cfg.max_series - len(self.dropped) - SERIES_DROP_FAMILIES - 1)
            result = normalize_exposition(
                text, self.server, cfg.type, max_series=budget, max_input_series=input_limit(cfg.max_series)
            )
        except SeriesLimitError as err:
            raise SourceError(
                "too_many_series",
                f"{self._url}: {err} (the parse limits for max_series {cfg.max_series}); fix the engine's label cardinality",
            ) from None
        except ParseError as err:
            raise SourceError("parse", f"{self._url}: {str(err)[:200]}") from None
        served = settings.from_exposition(result.family, text)
        del text
        if (result.family, result.generation) != (self.family, self.generation):
            log.info("%s: detected %s, metric generation %s", self.name, result.family, result.generation)
        self.family, self.generation = result.family, result.generation
        self._count_dropped(result.dropped, published_series(result.points), result.dropped_families)
        partial: list[SourceError] = []
        if result.problems:
            more = f" (+{len(result.problems) - 1} more)" if len(result.problems) > 1 else ""
            partial.append(SourceError("parse", self._scrubbed(f"series skipped: {result.problems[0][:200]}{more}")))
        points: list[Point] = result.points
        if result.family == "llamacpp":
            points.extend(self._llamacpp_slots(points, started + cfg.timeout * SIDE_FETCH_SHARE, partial))
        # what the exporter adds itself (settings, the sampled batch size) lives inside the same budget
        points = self._with_settings(
            points, result.family, served, budget - published_series(points), started + cfg.timeout * SIDE_FETCH_SHARE
        )
        room = max(0, budget - published_series(points))
        points.extend(self._batch_sizes.observe(points, limit=room // BATCH_SERIES_COST))
        points.extend(
            Sample(DROPPED, {"source": self.name, "reason": r}, float(n)) for r, n in self.dropped.items() if r != "family_budget"
        )
        points.extend(
            Sample(DROPPED, {"source": self.name, "reason": "family_budget", "family": f}, float(n))
            for f, n in self.dropped_families.items()
        )
        return SampleResult(points=points, partial_errors=partial)

    def _count_dropped(self, dropped: dict[str, int], published: int, families: dict[str, int]) -> None:
        """Add this scrape's drops to the counters; log once when a reason starts or stops."""
        for family, n in families.items():
            key = family if family in self.dropped_families else cut_value(family, MAX_FAMILY_LABEL)
            if key not in self.dropped_families and len(self.dropped_families) >= SERIES_DROP_FAMILIES:
                key = SERIES_DROP_OTHER_FAMILY
            self.dropped_families[key] = self.dropped_families.get(key, 0) + n
        for reason in SERIES_DROP_REASONS:
            n = dropped.get(reason, 0)
            self.dropped[reason] += n
            if n and reason not in self._dropping:
                self._dropping.add(reason)
                if reason == "family_budget":
                    worst = max(families, key=families.__getitem__)
                    more = f", +{len(families) - 1} more families" if len(families) > 1 else ""
                    log.warning(
                        "%s: metric family %s dropped: %d sample lines, over its share of %d (reason family_budget%s;"
                        " %d series published; fix the engine's label cardinality)",
                        self.name,
                        self._scrubbed(worst[:MAX_FAMILY_LABEL]),
                        families[worst],
                        family_share(self.cfg.max_series),
                        more,
                        published,
                    )
                    continue
                hint = f"max_series is {self.cfg.max_series}" if reason == "budget" else "see llm_exporter_series_dropped_total"
                log.warning(
                    "%s: %d series %s (reason %s; %d series published; %s)",
                    self.name,
                    n,
                    _DROP_WORDS[reason],
                    reason,
                    published,
                    hint,
                )
            elif not n and reason in self._dropping:
                self._dropping.discard(reason)
                log.info("%s: no more series %s (reason %s)", self.name, _DROP_WORDS[reason], reason)

    # ------------------------------------------------------------------ launch settings

    def _with_settings(
        self, points: list[Point], family: str, served: settings.EngineSettings, room: int, deadline: float
    ) -> list[Point]:
        """``points`` with the engine's launch settings (exporter/engines/settings.py): served values
        first (the exposition, llama.cpp's /props already among ``points``), then the serving
        process's command line and environment when its PID is configured. Numbers become
        ``llm_engine_setting``; texts are added to ``llm_engine_config_info`` (a label the
        engine's own info already carries is kept). Nothing is added when its series would not fit
        in ``room`` (what is left of the series budget)."""
        found = served.merged(self._read_info_settings(family, deadline)).merged(self._read_process_settings(family))
        have = {p.labels.get("setting") for p in points if p.name == "llm_engine_setting"}
        for name in have:
            found.numbers.pop(name or "", None)
        info = next((p for p in points if p.name == "llm_engine_info"), None)
        labels = {"server": self.server, "engine": family, "model": info.labels.get("model", "") if info else "", "rank": ""}
        numbers = settings.setting_points(found, labels)
        texts = settings.config_labels(found)
        configs = [i for i, p in enumerate(points) if p.name == "llm_engine_config_info" and isinstance(p, Sample)]
        if len(numbers) + (1 if texts and not configs else 0) > room:
            return points
        out: list[Point] = list(points)
        out.extend(numbers)
        if not texts:
            return out
        if not configs:
            out.append(Sample("llm_engine_config_info", {**labels, **texts}, 1.0))
        for i in configs:
            old = out[i]
            assert isinstance(old, Sample)
            out[i] = Sample(old.name, {**texts, **{k: v for k, v in old.labels.items() if v}}, old.value)
        return out

    def _read_info_settings(self, family: str, deadline: float) -> settings.EngineSettings:
        """SGLang's /get_server_info or TGI's /info (settings.INFO_ROUTES), fetched at most every
        ``SETTINGS_REREAD_SECONDS`` (a failure too: settings are evidence, not the scrape; a route
        that is not there, as on TGI's separate Prometheus port, publishes nothing). It lives inside
        the scrape's one deadline (``deadline``, monotonic): without time left it waits for a later scrape."""
        route = settings.INFO_ROUTES.get(family)
        if route is None:
            return settings.EngineSettings()
        now = time.monotonic()
        cached = self._info_settings
        if cached is not None and cached[0] == family and now - cached[1] < SETTINGS_REREAD_SECONDS:
            return cached[2]
        left = deadline - now
        if left < MIN_SIDE_FETCH_SECONDS:
            return cached[2] if cached is not None and cached[0] == family else settings.EngineSettings()
        found = settings.EngineSettings()
        base = llamacpp_slots.base_of(self._url)
        try:
            response = get(
                Request(
                    url=base + route[0],
                    timeout=left,
                    max_body_bytes=min(self.cfg.max_body_bytes, llamacpp_slots.MAX_BODY_BYTES),
                    headers=self._headers(),
                    tls=self._tls_context() if base.startswith("https:") else None,
                )
            )
            if 200 <= response.status < 300:
                found = settings.from_info(family, llamacpp_slots.decoded(bytes(response.body)))
        except SourceError as err:
            log.debug("%s: %s unavailable (%s)", self.name, route[0], err.reason)
        self._info_settings = (family, now, found)
        return found

    def _read_process_settings(self, family: str) -> settings.EngineSettings:
        """The serving process's settings (``cfg.pid``), read at most every ``SETTINGS_REREAD_SECONDS``."""
        if self.cfg.pid is None:
            return settings.EngineSettings()
        now = time.monotonic()
        cached = self._process_settings
        if cached is not None and cached[0] == family and now - cached[1] < SETTINGS_REREAD_SECONDS:
            return cached[2]
        found = settings.read_process(self.cfg.pid, family)
        self._process_settings = (family, now, found)
        return found

    # ------------------------------------------------------------------ llama.cpp slots

    def _llamacpp_slots(self, points: list[Point], deadline: float, partial: list[SourceError]) -> list[Sample]:
        """Slot count, busy slots and context in use from /props and /slots (see llamacpp_slots.py).

        Best effort within what is left of the scrape's one deadline (``deadline``,
        monotonic): a side fetch that is slow, fails or finds no time left costs
        only the slot metrics, as a partial error with its reason (the source stays
        up, its /metrics series publish). A server that hides these endpoints
        (``--no-slots``, an old build, a proxy: a non-2xx status) publishes nothing
        more, and that is not a fault of the source.
        """
        info = next((p for p in points if p.name == "llm_engine_info"), None)
        labels = {"server": self.server, "engine": "llamacpp", "model": info.labels.get("model", "") if info else "", "rank": ""}
        base = llamacpp_slots.base_of(self._url)
        out: list[Sample] = []
        fetches = (
            (llamacpp_slots.PROPS_PATH, llamacpp_slots.props_and_setting_points),
            (llamacpp_slots.SLOTS_PATH, llamacpp_slots.slots_points),
        )
        for i, (path, parse) in enumerate(fetches):
            # an equal share of what is left: a slow /props leaves /slots its half
            left = (deadline - time.monotonic()) / (len(fetches) - i)
            if left < MIN_SIDE_FETCH_SECONDS:
                partial.append(
                    SourceError("timeout", f"{path}: no time left in the scrape's {self.cfg.timeout:g}s; slot metrics skipped")
                )
                continue
            try:
                response = get(
                    Request(
                        url=base + path,
                        timeout=left,
                        max_body_bytes=min(self.cfg.max_body_bytes, llamacpp_slots.MAX_BODY_BYTES),
                        headers=self._headers(),
                        tls=self._tls_context() if base.startswith("https:") else None,
                    )
                )
            except SourceError as err:
                log.debug("%s: %s unavailable (%s)", self.name, path, err.reason)
                partial.append(SourceError(err.reason, self._scrubbed(f"{err.message}; slot metrics skipped")))
                continue
            if 200 <= response.status < 300:
                out.extend(parse(bytes(response.body), labels))
        return out

    # ------------------------------------------------------------------ HTTP

    def _fetch(self) -> str:
        cfg = self.cfg
        request = Request(
            url=self._url,
            timeout=cfg.timeout,
            max_body_bytes=cfg.max_body_bytes,
            headers=self._headers(),
            tls=self._tls_context() if self._url.startswith("https:") else None,
            follow_redirects=cfg.follow_redirects,
        )
        response = get(request)
        self._check_status(response.status)
        body = response.body
        self._body_bytes = len(body)
        del response
        try:
            return body.decode("utf-8")
        except UnicodeDecodeError as err:
            raise SourceError("parse", f"{self._url}: body is not UTF-8 text (byte {err.start})") from None

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": ACCEPT, "User-Agent": f"llm-layer-exporter/{__version__}"}
        token = self._read_secret(self.cfg.bearer_token_file, "bearer_token_file")
        if token:
            headers["Authorization"] = f"Bearer {token}"
            return headers
        pair: tuple[str, str] | None = None
        if self.cfg.basic_auth_username is not None:
            password = self._read_secret(self.cfg.basic_auth_password_file, "basic_auth.password_file") or ""
            pair = (self.cfg.basic_auth_username, password)
        elif self._url_auth is not None:
            pair = self._url_auth
        if pair is not None:
            raw = f"{pair[0]}:{pair[1]}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(raw).decode("ascii")
        return headers

    def _read_secret(self, path: str | None, what: str) -> str | None:
        """A token or password read from ``path`` now (rotation without restart); never logged."""
        return read_secret_file(path, what, self._secrets)

    def _tls_context(self) -> ssl.SSLContext:
        """The TLS settings, rebuilt when the ``ca_bundle`` file changes (certificate rotation: exporter/tlsclient.py)."""
        return self._tls.context()

    def _check_status(self, status: int) -> None:
        if 200 <= status < 300:
            return
        message = f"{self._url}: HTTP {status}"
        if status == 501:
            message += " (llama.cpp answers 501 when metrics are off: start llama-server with --metrics)"
        elif status in (401, 403):
            message += " (check bearer_token_file / basic_auth)"
        elif status == 404 and self.cfg.type in ("trtllm", "auto"):
            message += " (trtllm-serve serves Prometheus text at /prometheus/metrics)"
        raise SourceError("http_status", message)

    def _scrubbed(self, message: str) -> str:
        """``message`` cut short, with any secret (should one ever appear) replaced."""
        for secret in self._secrets:
            if secret in message:
                message = message.replace(secret, "<redacted>")
        return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."


_DROP_WORDS = {
    "budget": "dropped over the series budget",
    "label_too_long": "with a label value cut to the length limit",
    "bad_histogram": "dropped: histogram buckets not cumulative",
    "family_budget": "dropped: their metric family is over its share of the budget",
}
