"""``EngineSource``: scrape one inference server's own /metrics, publish neutral points.

Why these limits: the engine is someone else's process. It may be down, slow,
answer an error page, stream a body without end or grow series without bound
(labels per request, per LoRA adapter). Each case becomes a ``SourceError`` with a
bounded reason, so the exporter keeps serving, marks the source down, counts the
reason and recovers on its own at the next interval.

Secrets: the bearer token is re-read from its file on every scrape (rotation
without restart), sent only in the Authorization header, and never put in a log
line, an exception message or a label. Error messages are built from our own
words plus the URL with any userinfo removed, and are scrubbed of the token as a
second guard. ``trust_env`` is off: no proxy variables, and no ``~/.netrc``
credentials sneaking into requests the user did not configure.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

import requests
from urllib3.exceptions import ReadTimeoutError

from exporter import __version__
from exporter.engines import normalize_exposition
from exporter.engines.textparse import ParseError, SeriesLimitError
from exporter.samples import SampleResult, SourceError

if TYPE_CHECKING:  # config imports the CLI; keep this module light to import
    from exporter.config import EngineConfig

log = logging.getLogger(__name__)

#: Ask for the classic text format (no OpenMetrics ``_created`` lines to skip).
ACCEPT = "text/plain;version=0.0.4;q=1.0,application/openmetrics-text;q=0.5,*/*;q=0.1"
CHUNK_BYTES = 64 * 1024
#: Connection-error texts (from urllib3/socket) -> a short, secret-free description.
_CONNECTION_REASONS: tuple[tuple[str, str], ...] = (
    ("CERTIFICATE_VERIFY_FAILED", "certificate verify failed"),
    ("doesn't match", "certificate does not match the host"),
    ("WRONG_VERSION_NUMBER", "the server does not speak TLS"),
    ("Connection refused", "connection refused"),
    ("RemoteDisconnected", "the server closed the connection without a response"),
    ("Connection reset", "connection reset by the server"),
    ("Connection aborted", "connection aborted"),
    ("Name or service not known", "unknown host"),
    ("nodename nor servname", "unknown host"),
    ("No route to host", "no route to host"),
    ("Network is unreachable", "network unreachable"),
    ("IncompleteRead", "the body ended early"),
    ("InvalidChunkLength", "the body ended early"),
)


def safe_url(url: str) -> str:
    """``url`` without ``user:password@`` (safe for logs and messages)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__} {exc!s} {exc.__context__!s}"
    for marker, short in _CONNECTION_REASONS:
        if marker in text:
            return short
    return type(exc).__name__


class EngineSource:
    """The Source for ``engine:<name>``: one HTTP GET per interval, then normalise."""

    def __init__(self, cfg: "EngineConfig") -> None:
        self.cfg = cfg
        self.name = f"engine:{cfg.name}"
        self.interval = cfg.interval
        self.timeout = cfg.timeout
        #: family and generation of the last successful scrape (None before one)
        self.family: str | None = None
        self.generation: str | None = None
        self._url = safe_url(cfg.url)
        self._session = requests.Session()
        self._session.trust_env = False
        self._token: str | None = None
        if not cfg.tls_verify and not cfg.ca_bundle:
            log.warning("%s: TLS certificate verification is off (tls_verify: false)", self.name)

    # ------------------------------------------------------------------ Source protocol

    def sample(self) -> SampleResult:
        """Scrape and normalise; raises ``SourceError`` with a bounded reason."""
        try:
            text = self._fetch()
            try:
                result = normalize_exposition(text, self.cfg.name, self.cfg.type, max_series=self.cfg.max_series)
            except SeriesLimitError as err:
                raise SourceError(
                    "too_many_series", f"{self._url}: {err}; raise max_series or fix the engine's label cardinality"
                ) from None
            except ParseError as err:
                raise SourceError("parse", f"{self._url}: {err}") from None
        except SourceError as err:
            raise self._scrubbed(err) from None
        if (result.family, result.generation) != (self.family, self.generation):
            log.info("%s: detected %s, metric generation %s", self.name, result.family, result.generation)
        self.family, self.generation = result.family, result.generation
        partial: list[SourceError] = []
        if result.problems:
            more = f" (+{len(result.problems) - 1} more)" if len(result.problems) > 1 else ""
            partial.append(self._scrubbed(SourceError("parse", f"series skipped: {result.problems[0]}{more}")))
        return SampleResult(points=result.points, partial_errors=partial)

    def close(self) -> None:
        self._session.close()

    # ------------------------------------------------------------------ HTTP

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": ACCEPT, "User-Agent": f"llm-layer-exporter/{__version__}"}
        self._token = self._read_token()
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        return headers

    def _read_token(self) -> str | None:
        path = self.cfg.bearer_token_file
        if not path:
            return None
        try:
            token = Path(path).read_text(encoding="utf-8").strip()
        except OSError as err:
            raise SourceError("file_missing", f"cannot read bearer_token_file {path}: {err.strerror}") from None
        except UnicodeDecodeError:
            raise SourceError("malformed", f"bearer_token_file {path} is not UTF-8 text") from None
        if not token:
            raise SourceError("malformed", f"bearer_token_file {path} is empty")
        if not all(33 <= ord(c) <= 126 for c in token):
            raise SourceError("malformed", f"bearer_token_file {path} holds characters not allowed in an HTTP header")
        return token

    def _fetch(self) -> str:
        cfg = self.cfg
        headers = self._headers()
        verify: bool | str = cfg.ca_bundle if cfg.ca_bundle else cfg.tls_verify
        deadline = time.monotonic() + cfg.timeout
        try:
            response = self._session.get(
                cfg.url, headers=headers, timeout=(cfg.timeout, cfg.timeout), stream=True, verify=verify
            )
        except requests.exceptions.Timeout:
            raise SourceError("timeout", f"{self._url}: no answer within {cfg.timeout:g}s") from None
        except requests.exceptions.SSLError as err:
            raise SourceError("connection", f"{self._url}: TLS failed ({_describe(err)}); check ca_bundle / tls_verify") from None
        except requests.exceptions.RequestException as err:
            raise SourceError("connection", f"{self._url}: {_describe(err)}") from None
        with response:
            self._check_status(response.status_code)
            return self._read_body(response, deadline)

    def _check_status(self, status: int) -> None:
        if 200 <= status < 300:
            return
        message = f"{self._url}: HTTP {status}"
        if status == 501:
            message += " (llama.cpp answers 501 when metrics are off: start llama-server with --metrics)"
        elif status in (401, 403):
            message += " (check bearer_token_file)"
        elif status == 404 and self.cfg.type in ("trtllm", "auto"):
            message += " (trtllm-serve serves Prometheus text at /prometheus/metrics)"
        raise SourceError("http_status", message)

    def _read_body(self, response: requests.Response, deadline: float) -> str:
        cap = self.cfg.max_body_bytes
        declared = response.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > cap:
            raise SourceError("too_large", f"{self._url}: body of {int(declared)} bytes is over the {cap}-byte cap")
        chunks: list[bytes] = []
        total = 0
        try:
            for chunk in response.iter_content(CHUNK_BYTES):
                total += len(chunk)
                if total > cap:
                    raise SourceError("too_large", f"{self._url}: body is over the {cap}-byte cap")
                if time.monotonic() > deadline:
                    raise SourceError("timeout", f"{self._url}: body not complete within {self.cfg.timeout:g}s")
                chunks.append(chunk)
        except requests.exceptions.ContentDecodingError:
            raise SourceError("parse", f"{self._url}: body could not be decompressed") from None
        except requests.exceptions.RequestException as err:
            if isinstance(err, requests.exceptions.Timeout) or isinstance(err.args[0] if err.args else None, ReadTimeoutError):
                raise SourceError("timeout", f"{self._url}: body not complete within {self.cfg.timeout:g}s") from None
            raise SourceError("connection", f"{self._url}: {_describe(err)} while reading the body") from None
        try:
            return b"".join(chunks).decode("utf-8")
        except UnicodeDecodeError as err:
            raise SourceError("parse", f"{self._url}: body is not UTF-8 text (byte {err.start})") from None

    def _scrubbed(self, err: SourceError) -> SourceError:
        """``err`` with the token (should it ever appear) replaced."""
        if self._token and self._token in err.message:
            return SourceError(err.reason, err.message.replace(self._token, "<redacted>"))
        return err
