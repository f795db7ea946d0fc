"""One HTTP exchange of the probe, held to one wall-clock deadline.

Why not a per-read timeout: a stalled stream that sends a keep-alive byte now
and then, or trickles one byte a second, keeps every single read short and the
request alive for as long as it likes; a canary that can be held open that way
catches no hung engine. Here every socket operation gets what is left of one
deadline taken when the probe starts, *and* a timer shuts the socket down at
that deadline (a read blocked in the kernel wakes at once), so the whole
exchange — connect, TLS, request, headers and every byte of the stream — ends
by the timeout whatever the server does.

Why ``http.client`` and not ``requests`` or ``httpx``: the runtime keeps to the
standard library plus ``requests`` (``httpx`` is a tools-only extra), and
``http.client`` exposes the socket the deadline timer must reach.

Nothing secret leaves this module: error details are built from our own words
and the URL without user info (``exporter/engines/urls.py``); request headers
(the ``Authorization`` one included) are never logged or returned.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

from exporter.engines.urls import safe_url

#: the longest SSE line we read (a chunk with the whole completion fits easily)
MAX_LINE_BYTES = 64 * 1024
#: the most bytes one probe reads in all (a stream without end is refused, not buffered)
MAX_STREAM_BYTES = 1024 * 1024

Clock = Callable[[], float]


class ProbeFailure(Exception):
    """The probe ended with a result other than ``ok``; ``result`` is a bounded label value."""

    def __init__(self, result: str, detail: str) -> None:
        super().__init__(detail)
        self.result = result
        self.detail = detail


class Deadline:
    """Seconds left until one monotonic instant."""

    def __init__(self, seconds: float, clock: Clock = time.monotonic) -> None:
        self._clock = clock
        self.at = clock() + seconds
        self.seconds = seconds

    def remaining(self) -> float:
        """Seconds left, 0 once past."""
        return max(0.0, self.at - self._clock())

    def left(self) -> float:
        """Seconds left; raises ``ProbeFailure("timeout")`` once none is."""
        left = self.at - self._clock()
        if left <= 0:
            raise ProbeFailure("timeout", f"no complete answer within the {self.seconds:g} s timeout")
        return left

    def when_passed(self, action: Callable[[], None]) -> Callable[[], None]:
        """Run ``action`` on a timer thread once the deadline passes; returns what cancels it.

        A method, so a deadline that can be brought forward (the on-demand profile's
        calls at shutdown, exporter/profile/calls.py) fires ``action`` at its new time.
        """
        timer = threading.Timer(self.remaining(), action)
        timer.daemon = True
        timer.start()
        return timer.cancel


@dataclass
class Response:
    """An open response: status, lower-cased headers, and line / body readers bound by the deadline."""

    status: int
    headers: dict[str, str]
    _resp: http.client.HTTPResponse
    #: the connection's socket, kept here: ``getresponse()`` hands it to the response and
    #: drops the connection's own reference when the server closes after the answer
    _sock: socket.socket
    _deadline: Deadline
    _fired: threading.Event
    read_bytes: int = 0

    def _arm(self) -> None:
        """Give the next read what is left of the deadline (raises once none is)."""
        left = self._deadline.left()
        try:
            self._sock.settimeout(left)
        except OSError:  # already shut down by the deadline timer
            pass

    def lines(self) -> Iterator[bytes]:
        """The body line by line (without the line end), until end of stream."""
        while True:
            self._arm()
            try:
                line = self._resp.readline(MAX_LINE_BYTES + 1)
            except TimeoutError:
                raise self._timeout() from None
            except (http.client.HTTPException, OSError, ValueError) as err:
                if self._fired.is_set():
                    raise self._timeout() from None
                raise ProbeFailure("bad_stream", f"the stream broke off ({type(err).__name__})") from None
            if not line:
                if self._fired.is_set():
                    raise self._timeout()
                return
            self.read_bytes += len(line)
            if len(line) > MAX_LINE_BYTES:
                raise ProbeFailure("bad_stream", f"a stream line is over {MAX_LINE_BYTES} bytes")
            if self.read_bytes > MAX_STREAM_BYTES:
                raise ProbeFailure("bad_stream", f"the stream is over {MAX_STREAM_BYTES} bytes")
            yield line.rstrip(b"\r\n")

    def body(self, cap: int = MAX_STREAM_BYTES) -> bytes:
        """The whole (small) body, at most ``cap`` bytes."""
        out = bytearray()
        while True:
            self._arm()
            try:
                data = self._resp.read1(65536)
            except TimeoutError:
                raise self._timeout() from None
            except (http.client.HTTPException, OSError, ValueError) as err:
                if self._fired.is_set():
                    raise self._timeout() from None
                raise ProbeFailure("bad_stream", f"the body broke off ({type(err).__name__})") from None
            if not data:
                if self._fired.is_set():
                    raise self._timeout()
                return bytes(out)
            out += data
            if len(out) > cap:
                raise ProbeFailure("bad_stream", f"the body is over {cap} bytes")

    def _timeout(self) -> ProbeFailure:
        return ProbeFailure("timeout", f"no complete answer within the {self._deadline.seconds:g} s timeout")


def _connection(url: str, deadline: Deadline, tls: ssl.SSLContext | None) -> tuple[http.client.HTTPConnection, str]:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        raise ProbeFailure("refused", f"{safe_url(url)}: the port is not a number from 1 to 65535") from None
    host = parts.hostname or ""
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    if parts.scheme == "https":
        return http.client.HTTPSConnection(
            host, port, timeout=deadline.left(), context=tls or ssl.create_default_context()
        ), target
    return http.client.HTTPConnection(host, port, timeout=deadline.left()), target


def _connect_failure(err: BaseException, url: str) -> ProbeFailure:
    where = safe_url(url)
    if isinstance(err, (TimeoutError, socket.timeout)):
        return ProbeFailure("timeout", f"{where}: connect did not finish in time")
    if isinstance(err, ssl.SSLCertVerificationError):
        return ProbeFailure("refused", f"{where}: TLS failed ({(err.verify_message or 'certificate verify failed')[:80]})")
    if isinstance(err, ssl.SSLError):
        return ProbeFailure("refused", f"{where}: TLS failed ({(err.reason or type(err).__name__)[:60]})")
    if isinstance(err, socket.gaierror):
        return ProbeFailure("refused", f"{where}: unknown host")
    if isinstance(err, ConnectionRefusedError):
        return ProbeFailure("refused", f"{where}: connection refused")
    return ProbeFailure("refused", f"{where}: cannot connect ({type(err).__name__})")


@contextmanager
def exchange(
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: bytes | None,
    deadline: Deadline,
    tls: ssl.SSLContext | None = None,
) -> Iterator[Response]:
    """Open ``url``, send the request, read the status and headers; the response inside the block.

    Raises ``ProbeFailure`` with ``refused`` (no connection), ``timeout`` (the
    deadline passed, at any step) or ``bad_stream`` (the server closed without an
    answer). The connection is closed and the deadline timer cancelled on exit.
    """
    conn, target = _connection(url, deadline, tls)
    fired = threading.Event()
    held: list[socket.socket] = []

    def shut() -> None:  # the hard bound: wakes a read blocked in the kernel
        fired.set()
        for sock in held or ([conn.sock] if conn.sock is not None else []):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    cancel = deadline.when_passed(shut)
    try:
        try:
            conn.connect()
        except OSError as err:
            raise (
                ProbeFailure("timeout", f"{safe_url(url)}: connect did not finish in time")
                if fired.is_set()
                else _connect_failure(err, url)
            ) from None
        assert conn.sock is not None
        sock = conn.sock
        held.append(sock)
        if fired.is_set():  # the timer fired while connecting: shut the socket it could not reach
            shut()
        try:
            sock.settimeout(deadline.left())
            conn.request(method, target, body=body, headers=dict(headers))
            sock.settimeout(deadline.left())
            resp = conn.getresponse()
        except ProbeFailure:
            raise
        except TimeoutError:
            raise ProbeFailure("timeout", f"{safe_url(url)}: no response within the {deadline.seconds:g} s timeout") from None
        except (http.client.HTTPException, OSError) as err:
            if fired.is_set():
                raise ProbeFailure("timeout", f"{safe_url(url)}: no response within the {deadline.seconds:g} s timeout") from None
            raise ProbeFailure(
                "bad_stream", f"{safe_url(url)}: the server closed the connection without an answer ({type(err).__name__})"
            ) from None
        try:
            yield Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp, sock, deadline, fired)
        finally:
            resp.close()
    finally:
        cancel()
        conn.close()
        for s in held:
            try:
                s.close()
            except OSError:  # pragma: no cover - closing a socket that already failed
                pass
