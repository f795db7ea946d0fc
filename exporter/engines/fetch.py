"""One bounded HTTP GET of an engine's /metrics: one wall-clock deadline, a byte cap.

Why not requests: its timeouts bound each socket operation, not the response.
An engine that sends its body (or its headers) one byte a second, whatever the
framing (Content-Length, chunked, or ended by closing the connection), keeps
every read short and the scrape alive for as long as it likes. Here every
socket call (connect, TLS handshake, send, each ``recv``) is given what is
left of one deadline taken when the scrape starts, so the whole response,
redirects included, ends within the timeout (plus the scheduling slack of one
call). Name resolution runs on a helper thread the scrape waits for only
until the same deadline.

Why no buffering past the cap: the body is read into one ``bytearray`` that
never grows past ``max_body_bytes`` (a declared Content-Length over the cap is
refused before a byte of the body is read; a chunked or close-delimited body
is cut off the moment it crosses the cap), so a 50 MB body costs what the cap
allows whatever its framing. A compressed body is inflated under the same cap.

Why redirects are not followed by default: a 302 to another port or host would
publish a different server's numbers under this engine's name, and a redirect
loop multiplies requests. ``follow_redirects`` follows same-origin redirects
(same scheme, host and port) only, at most ``MAX_REDIRECTS`` of them.

Every failure is a ``SourceError`` with a bounded reason and a short message
built from our own words and URLs passed through :func:`safe_url`.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import ssl
import threading
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

from exporter.engines.urls import DEFAULT_PORTS, origin, safe_url
from exporter.samples import SourceError

RECV_BYTES = 64 * 1024
MAX_HEAD_BYTES = 64 * 1024
MAX_CHUNK_LINE = 1024
MAX_REDIRECTS = 3
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_HEAD_END = re.compile(rb"\r?\n\r?\n")
_URL_SAFE = "/?&=%:@!$'()*+,;~-._"
#: a chunk size: ASCII hex digits only, at most 16 of them
_HEX_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")
#: longest decimal header number read (a Content-Length past 10^18 bytes is not a body)
_MAX_DIGITS = 18
_MAX_SHOWN_URL = 200


@dataclass(frozen=True)
class Request:
    """What to fetch and within which limits; ``url`` carries no userinfo."""

    url: str
    timeout: float
    max_body_bytes: int
    headers: Mapping[str, str] = field(default_factory=dict)
    tls: ssl.SSLContext | None = None
    follow_redirects: bool = False


@dataclass
class Response:
    """A final (non-redirect) answer: the body is read only for a 2xx status."""

    status: int
    body: bytearray
    url: str


def shown(url: str) -> str:
    """``url`` as it may appear in a message: no userinfo, bounded length."""
    text = safe_url(url)
    return text if len(text) <= _MAX_SHOWN_URL else text[:_MAX_SHOWN_URL] + "..."


def get(req: Request) -> Response:
    """GET ``req.url`` within ``req.timeout`` seconds in all; raises ``SourceError``."""
    deadline = time.monotonic() + req.timeout
    url = req.url
    for hop in range(MAX_REDIRECTS + 1):
        status, headers, conn = _exchange(url, req, deadline)
        try:
            if status in REDIRECT_STATUSES:
                url = _next_hop(req, url, status, headers, hop)
                continue
            body = _read_body(conn, headers, status, req, url) if 200 <= status < 300 else bytearray()
            return Response(status, body, url)
        except (OSError, ssl.SSLError) as err:
            raise _network_error(err, url, req, conn.phase) from None
        finally:
            conn.close()
    raise AssertionError("unreachable: the last hop returns or raises")  # pragma: no cover


def _next_hop(req: Request, url: str, status: int, headers: Mapping[str, str], hop: int) -> str:
    """The URL a redirect points to, if this request may follow it; else a ``redirect`` error."""
    location = headers.get("location", "").strip()
    if not location:
        raise SourceError("http_status", f"{shown(url)}: HTTP {status} redirect without a Location header")
    target = urljoin(url, location)
    where = f"{shown(url)}: HTTP {status} redirect to {shown(target)}"
    if not req.follow_redirects:
        raise SourceError(
            "redirect", f"{where}; not followed (point url at the target, or set follow_redirects: true for a same-host redirect)"
        )
    if urlsplit(target).scheme not in DEFAULT_PORTS or origin(target) != origin(req.url):
        raise SourceError("redirect", f"{where}: another host, port or scheme; only same-host redirects are followed")
    if hop >= MAX_REDIRECTS:
        raise SourceError("redirect", f"{shown(req.url)}: more than {MAX_REDIRECTS} redirects (the last to {shown(target)})")
    return target


# --------------------------------------------------------------------------- connection


class _Conn:
    """A socket whose every call gets what is left of the deadline; reads through a small buffer."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.buf = bytearray()
        self.phase = "response headers"

    def _left(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline")
        return left

    def fill(self) -> bool:
        """Receive what arrives before the deadline into the buffer; False at end of stream."""
        self.sock.settimeout(self._left())
        data = self.sock.recv(RECV_BYTES)
        if not data:
            return False
        self.buf += data
        return True

    def head(self) -> bytes | None:
        """Bytes up to the blank line ending a header block (None: the stream ended first)."""
        searched = 0
        while True:
            m = _HEAD_END.search(self.buf, max(0, searched - 3))
            if m is not None:
                head = bytes(self.buf[: m.start()])
                del self.buf[: m.end()]
                return head
            if len(self.buf) > MAX_HEAD_BYTES:
                raise SourceError("too_large", f"response headers over {MAX_HEAD_BYTES} bytes")
            searched = len(self.buf)
            if not self.fill():
                return None

    def line(self) -> bytes:
        """One CRLF-ended line (a chunk-size line), without its end."""
        searched = 0
        while True:
            nl = self.buf.find(b"\n", searched)
            if nl != -1:
                text = bytes(self.buf[:nl]).rstrip(b"\r")
                del self.buf[: nl + 1]
                return text
            if len(self.buf) > MAX_CHUNK_LINE:
                raise SourceError("parse", "malformed chunked body: a chunk-size line is too long")
            searched = len(self.buf)
            if not self.fill():
                raise _ended_early()

    def read_into(self, out: bytearray, n: int) -> None:
        """Append exactly ``n`` body bytes to ``out``."""
        while n > 0:
            if not self.buf and not self.fill():
                raise _ended_early()
            take = min(n, len(self.buf))
            out += self.buf[:take]
            del self.buf[:take]
            n -= take

    def read_to_close(self, out: bytearray, cap: int) -> None:
        """Append every byte until the server closes; ``too_large`` once past ``cap``."""
        while True:
            out += self.buf
            self.buf.clear()
            if len(out) > cap:
                raise SourceError("too_large", f"body is over the {cap}-byte cap")
            if not self.fill():
                return

    def close(self) -> None:
        _close(self.sock)


def _close(sock: socket.socket | None) -> None:
    if sock is not None:
        try:
            sock.close()
        except OSError:  # pragma: no cover - closing a socket that already failed
            pass


def _ended_early() -> SourceError:
    return SourceError("connection", "the body ended early")


#: one ``getaddrinfo`` entry: family, kind, protocol, canonical name, socket address
_AddrInfo = tuple[socket.AddressFamily, socket.SocketKind, int, str, tuple[Any, ...]]


def _resolve(host: str, port: int, deadline: float) -> Sequence[_AddrInfo]:
    """``getaddrinfo`` bounded by the deadline (a literal address needs no lookup)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    found: list[Sequence[_AddrInfo]] = []
    failed: list[OSError] = []

    def lookup() -> None:
        try:
            found.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except OSError as err:
            failed.append(err)
        except UnicodeError:  # a host name IDNA cannot encode (a label over 63 characters, ...)
            failed.append(socket.gaierror("Name or service not known"))

    worker = threading.Thread(target=lookup, name=f"resolve:{host[:40]}", daemon=True)
    worker.start()
    worker.join(max(0.0, deadline - time.monotonic()))
    if worker.is_alive():
        raise TimeoutError("name lookup")
    if failed:
        raise failed[0]
    return found[0]


def _connect(host: str, port: int, deadline: float) -> socket.socket:
    last: OSError | None = None
    for family, kind, proto, _, address in _resolve(host, port, deadline):
        sock = socket.socket(family, kind, proto)
        try:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("connect")
            sock.settimeout(left)
            sock.connect(address)
            return sock
        except OSError as err:
            sock.close()
            if isinstance(err, TimeoutError):
                raise
            last = err
    raise last or OSError("no address for the host")


def _request_bytes(url: str, headers: Mapping[str, str]) -> bytes:
    parts = urlsplit(url)
    target = quote(parts.path or "/", safe=_URL_SAFE)
    if parts.query:
        target += "?" + quote(parts.query, safe=_URL_SAFE)
    host = parts.hostname or ""
    host_header = f"[{host}]" if ":" in host else host
    if parts.port is not None and parts.port != DEFAULT_PORTS.get(parts.scheme):
        host_header += f":{parts.port}"
    lines = [f"GET {target} HTTP/1.1", f"Host: {host_header}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    lines += ["Accept-Encoding: gzip, identity", "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1")


def _exchange(url: str, req: Request, deadline: float) -> tuple[int, dict[str, str], _Conn]:
    """Connect, send the GET, read the status line and headers (1xx skipped)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        port = parts.port or DEFAULT_PORTS.get(parts.scheme, 80)
    except ValueError:
        raise SourceError("malformed", f"{shown(url)}: the port is not a number from 1 to 65535") from None
    phase = "connect"
    sock: socket.socket | None = None
    conn: _Conn | None = None
    try:
        sock = _connect(host, port, deadline)
        if parts.scheme == "https":
            phase = "TLS handshake"
            context = req.tls or ssl.create_default_context()
            sock = context.wrap_socket(sock, server_hostname=host, do_handshake_on_connect=False)
            sock.settimeout(max(1e-3, deadline - time.monotonic()))
            sock.do_handshake()
        conn = _Conn(sock, deadline)
        phase = "request"
        sock.settimeout(max(1e-3, deadline - time.monotonic()))
        sock.sendall(_request_bytes(url, req.headers))
        phase = conn.phase = "response headers"
        while True:
            head = conn.head()
            if head is None:
                if conn.buf or phase == "response headers (after 1xx)":
                    raise SourceError("connection", "the server closed the connection in the middle of the headers")
                raise SourceError("connection", "the server closed the connection without a response")
            status, headers = _parse_head(head)
            if 100 <= status < 200 and status != 101:
                phase = conn.phase = "response headers (after 1xx)"
                continue
            conn.phase = "body"
            return status, headers, conn
    except SourceError as err:
        _close(sock)
        raise SourceError(err.reason, f"{shown(url)}: {err.message}") from None
    except (OSError, ssl.SSLError) as err:
        _close(sock)
        raise _network_error(err, url, req, phase) from None


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").replace("\r\n", "\n").split("\n")
    status_line = lines[0].split(None, 2)
    if (
        len(status_line) < 2
        or not status_line[0].startswith("HTTP/")
        or not _ascii_digits(status_line[1])
        or len(status_line[1]) != 3
    ):
        raise SourceError("parse", "the answer is not an HTTP response")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            raise SourceError("parse", "malformed HTTP header line")
        key, value = name.strip().lower(), value.strip()
        if key in headers:
            if key == "content-length" and headers[key] != value:
                raise SourceError("parse", "conflicting Content-Length headers")
            if key != "content-length":
                headers[key] += ", " + value
        else:
            headers[key] = value
    return int(status_line[1]), headers


def _ascii_digits(text: str) -> bool:
    """Whether ``text`` is a decimal number in ASCII digits (what HTTP allows), short enough to read."""
    return 0 < len(text) <= _MAX_DIGITS and text.isascii() and text.isdigit()


# --------------------------------------------------------------------------- body


def _read_body(conn: _Conn, headers: Mapping[str, str], status: int, req: Request, url: str) -> bytearray:
    cap = req.max_body_bytes
    body = bytearray()
    try:
        if status in (204, 304):
            return body
        if "chunked" in headers.get("transfer-encoding", "").lower():
            _read_chunked(conn, body, cap)
        elif "content-length" in headers:
            declared = headers["content-length"]
            if not _ascii_digits(declared):  # int() would also take '١٢' and str.isdigit() '²'
                raise SourceError("bad_response", f"invalid Content-Length {declared[:20]!r} (not ASCII digits)")
            if int(declared) > cap:
                raise SourceError("too_large", f"body of {int(declared)} bytes is over the {cap}-byte cap")
            conn.read_into(body, int(declared))
        else:
            conn.read_to_close(body, cap)
        return _decoded(body, headers.get("content-encoding", ""), cap)
    except SourceError as err:
        raise SourceError(err.reason, f"{shown(url)}: {err.message}") from None


def _read_chunked(conn: _Conn, body: bytearray, cap: int) -> None:
    while True:
        size_text = conn.line().split(b";", 1)[0].strip()
        if _HEX_SIZE.fullmatch(size_text) is None:  # int(x, 16) would also take '-1', '+1' and '1_0'
            raise SourceError("parse", "malformed chunked body: bad chunk size")
        size = int(size_text, 16)
        if size == 0:
            for _ in range(64):  # trailer fields, then the blank line
                if not conn.line():
                    return
            raise SourceError("parse", "malformed chunked body: too many trailer lines")
        if len(body) + size > cap:
            raise SourceError("too_large", f"body is over the {cap}-byte cap")
        conn.read_into(body, size)
        if conn.line():
            raise SourceError("parse", "malformed chunked body: data after a chunk")


def _decoded(body: bytearray, encoding: str, cap: int) -> bytearray:
    """The body with a gzip/deflate Content-Encoding undone, inflated under ``cap``."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "x-gzip", "deflate"):
        raise SourceError("parse", f"unsupported Content-Encoding {encoding[:30]!r}")
    for wbits in (31,) if encoding != "deflate" else (15, -15):
        inflater = zlib.decompressobj(wbits)
        try:
            out = inflater.decompress(body, cap + 1)
        except zlib.error:
            continue
        if len(out) > cap:
            raise SourceError("too_large", f"body is over the {cap}-byte cap once decompressed")
        if inflater.eof and not inflater.unused_data:
            return bytearray(out)
    raise SourceError("parse", "body could not be decompressed")


# --------------------------------------------------------------------------- errors

#: Connection-error texts -> a short, secret-free description.
_CONNECTION_REASONS: tuple[tuple[str, str], ...] = (
    ("WRONG_VERSION_NUMBER", "the server does not speak TLS"),
    ("Connection refused", "connection refused"),
    ("Connection reset", "connection reset by the server"),
    ("Broken pipe", "the server closed the connection"),
    ("Name or service not known", "unknown host"),
    ("nodename nor servname", "unknown host"),
    ("No address associated", "unknown host"),
    ("No route to host", "no route to host"),
    ("Network is unreachable", "network unreachable"),
)


def _network_error(err: BaseException, url: str, req: Request, phase: str) -> SourceError:
    """A socket/TLS exception as a ``SourceError``; the exception itself is not kept."""
    where = shown(url)
    if isinstance(err, TimeoutError):
        return SourceError("timeout", f"{where}: response not complete within {req.timeout:g}s (during the {phase})")
    if isinstance(err, ssl.SSLCertVerificationError):
        detail = (err.verify_message or "certificate verify failed")[:80]
        return SourceError("connection", f"{where}: TLS failed ({detail}); check ca_bundle / tls_verify")
    text = f"{type(err).__name__} {err}"
    short = next((s for marker, s in _CONNECTION_REASONS if marker in text), None)
    if isinstance(err, ssl.SSLError):
        return SourceError(
            "connection",
            f"{where}: TLS failed ({short or (err.reason or type(err).__name__)[:60]}); check ca_bundle / tls_verify",
        )
    if isinstance(err, socket.gaierror):
        short = "unknown host"
    return SourceError("connection", f"{where}: {short or type(err).__name__} (during the {phase})")
