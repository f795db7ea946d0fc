"""One bounded HTTP GET for the command-line clients (`diagnose`, `report`), and their credentials.

Why not ``requests``: its ``timeout`` bounds each socket read, so an answer that
trickles one byte a second never ends (``report --timeout 5`` once ran past 90 s),
and nothing caps the bytes it reads (a 1 GB ``/diagnosis`` took ``report`` to
1.9 GB RSS). Here one deadline bounds the whole request, connect to last byte (a
watchdog shuts the socket down when it passes, which ends any read in progress),
and the body is read under ``MAX_RESPONSE_BYTES``. Redirects are not followed
(credentials must not travel to another host); no compression is asked for.

Why credentials here: user info in a URL was the only way to authenticate, and the
URL was printed in error lines and written into report.md and report.html. A URL's
user info still works, but it is moved into an ``Authorization`` header at once and
the URL kept is the one without it; files and the environment are the better ways
(``--exporter-password-file``, ``LLM_EXPORTER_EXPORTER_PASSWORD``, ..., see
docs/report.md). stdlib only: ``diagnose`` ships in the runtime image.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import os
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlencode, urlsplit, urlunsplit

from exporter.errors import UsageError
from exporter.jsonsafe import loads_bounded
from exporter.tlsclient import ClientTLS

#: the most bytes one answer may have (a verdict is tens of KiB, a 20k-series /metrics a few MiB)
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
ENV_PREFIX = "LLM_EXPORTER_"
_CHUNK = 64 * 1024
#: the system trust store, TLS 1.2 up: the same client context every outgoing connection has (exporter/tlsclient.py)
_TLS = ClientTLS()


@dataclass(frozen=True)
class Target:
    """A server's root URL without user info (safe to print and to write) and the headers that authenticate."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class Answer:
    """A complete HTTP answer: status and the whole body (at most MAX_RESPONSE_BYTES)."""

    url: str
    status_code: int
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        """The body as JSON: bounded in depth, NaN/Infinity refused; ValueError when it is not JSON."""
        return loads_bounded(self.content, max_bytes=MAX_RESPONSE_BYTES)


def redact(url: str) -> str:
    """``url`` with its user info replaced by ``***`` (for a URL that was never split into a Target)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit((parts.scheme, "***@" + parts.netloc.rpartition("@")[2], parts.path, parts.query, parts.fragment))


def base_url(url: str) -> str:
    """The server's root URL: a trailing /metrics or /diagnosis is dropped, http:// added when missing."""
    url = url.strip().rstrip("/")
    for suffix in ("/metrics", "/diagnosis"):
        if url.endswith(suffix):
            url = url[: -len(suffix)]
    if "://" not in url:
        url = "http://" + url
    return url


# --------------------------------------------------------------------------- credentials


def add_credential_arguments(parser: argparse.ArgumentParser, kind: str) -> None:
    """``--KIND-username``, ``--KIND-password-file``, ``--KIND-bearer-token-file`` (kind: exporter, prometheus)."""
    env = ENV_PREFIX + kind.upper()
    parser.add_argument(
        f"--{kind}-username", default=None, metavar="USER", help=f"basic-auth user for --{kind} (env {env}_USERNAME)"
    )
    parser.add_argument(
        f"--{kind}-password-file",
        default=None,
        metavar="FILE",
        help=f"file holding the basic-auth password for --{kind} (env {env}_PASSWORD holds the password itself)",
    )
    parser.add_argument(
        f"--{kind}-bearer-token-file",
        default=None,
        metavar="FILE",
        help=f"file holding a bearer token for --{kind} (env {env}_BEARER_TOKEN holds the token itself)",
    )


def _read_secret(path: str, flag: str) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except OSError as err:
        raise UsageError(f"{flag}: cannot read the file: {err.strerror or type(err).__name__}") from None
    except (UnicodeDecodeError, ValueError):
        raise UsageError(f"{flag}: the file is not UTF-8 text") from None
    if not text:
        raise UsageError(f"{flag}: the file is empty")
    return text


def target(url: str, kind: str, args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Target:
    """The Target for ``--KIND URL`` with its credentials: flags, then environment, then the URL's user info.

    UsageError (one line, no secret in it) when the URL is not http(s), a file cannot be
    read, or two kinds of credentials are given.
    """
    env = os.environ if environ is None else environ
    prefix = ENV_PREFIX + kind.upper()
    root = base_url(url)
    parts = urlsplit(root)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--{kind}: expected an http(s) URL, got {redact(root)!r}"[:200])
    try:
        _ = parts.port
    except ValueError:
        raise UsageError(f"--{kind}: expected a port from 1 to 65535 in {redact(root)!r}"[:200]) from None
    url_user = unquote(parts.username) if parts.username is not None else None
    url_password = unquote(parts.password) if parts.password is not None else None
    clean = urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, parts.query, ""))

    user = getattr(args, f"{kind}_username", None) or env.get(f"{prefix}_USERNAME") or url_user
    password_file = getattr(args, f"{kind}_password_file", None)
    token_file = getattr(args, f"{kind}_bearer_token_file", None)
    password = _read_secret(password_file, f"--{kind}-password-file") if password_file else env.get(f"{prefix}_PASSWORD")
    token = _read_secret(token_file, f"--{kind}-bearer-token-file") if token_file else env.get(f"{prefix}_BEARER_TOKEN")
    if password is None and user == url_user:
        password = url_password
    if token and (password or (user and user != url_user)):
        raise UsageError(f"--{kind}: give one kind of credentials: a bearer token or a user and password, not both")
    headers: dict[str, str] = {}
    if token:
        if not all(33 <= ord(c) <= 126 for c in token):
            raise UsageError(f"--{kind}-bearer-token-file: the token holds characters not allowed in an HTTP header")
        headers["Authorization"] = f"Bearer {token}"
    elif password is not None or user:
        if not user:
            raise UsageError(f"--{kind}-username (or {prefix}_USERNAME): needed with a password")
        if ":" in user:
            raise UsageError(f"--{kind}-username: a basic-auth user name cannot contain ':'")
        pair = f"{user}:{password or ''}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
    return Target(clean, headers)


# --------------------------------------------------------------------------- the request


class _Watchdog:
    """Shuts a connection's socket down when the deadline passes: any read in progress returns at once."""

    def __init__(self, conn: http.client.HTTPConnection, seconds: float) -> None:
        self.fired = False
        self._conn = conn
        self._timer = threading.Timer(max(0.0, seconds), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        self.fired = True
        sock = self._conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cancel(self) -> None:
        self._timer.cancel()


def get(
    url: str,
    timeout: float,
    *,
    headers: Mapping[str, str] | None = None,
    params: Mapping[str, str] | None = None,
    what: str = "the server",
    max_bytes: int = MAX_RESPONSE_BYTES,
) -> Answer:
    """GET url; the whole request ends within ``timeout`` seconds (plus scheduling), the body within ``max_bytes``.

    RuntimeError with one line naming ``url`` (which carries no user info) on any failure.
    """
    parts = urlsplit(url)
    deadline = time.monotonic() + timeout
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    if params:
        path += ("&" if "?" in path else "?") + urlencode(params)
    shown = urlunsplit((parts.scheme, parts.netloc, parts.path, parts.query, ""))
    host, port = parts.hostname or "", parts.port
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=_TLS.context())
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
    watchdog = _Watchdog(conn, timeout)  # before connect: a TLS handshake that trickles is cut too
    try:
        conn.connect()
        conn.request("GET", path, headers={"Accept": "application/json, text/plain;q=0.9", **(headers or {})})
        response = conn.getresponse()
        declared = response.getheader("Content-Length") or ""
        if declared.isascii() and declared.isdigit() and int(declared) > max_bytes:
            raise RuntimeError(f"{what} at {shown} sent an answer over {max_bytes} bytes ({int(declared)} declared)")
        chunks: list[bytes] = []
        total = 0
        late = False
        while not late:
            chunk = response.read1(_CHUNK)
            if not chunk:
                break
            total += len(chunk)
            if total > max_bytes:
                raise RuntimeError(f"{what} at {shown} sent an answer over {max_bytes} bytes")
            chunks.append(chunk)
            late = time.monotonic() > deadline
        if late or watchdog.fired:
            raise RuntimeError(f"{what} at {shown} sent no complete answer within {timeout:g} s")
        return Answer(shown, response.status, b"".join(chunks))
    except (OSError, http.client.HTTPException, ValueError) as err:
        if watchdog.fired or time.monotonic() > deadline:
            raise RuntimeError(f"{what} at {shown} sent no complete answer within {timeout:g} s") from None
        raise RuntimeError(f"cannot reach {what} at {shown}: {type(err).__name__}") from None
    finally:
        watchdog.cancel()
        conn.close()


class Client:
    """GETs under one Target's headers, shaped like the ``requests.Session.get`` the collectors called."""

    def __init__(self, target: Target, what: str) -> None:
        self.target = target
        self.what = what

    def get(self, url: str, params: Mapping[str, str] | None = None, timeout: float = 5.0) -> Answer:
        return get(url, timeout, headers=self.target.headers, params=params, what=self.what)


__all__ = [
    "MAX_RESPONSE_BYTES",
    "Answer",
    "Client",
    "Target",
    "add_credential_arguments",
    "base_url",
    "get",
    "redact",
    "target",
]
