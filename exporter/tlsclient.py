"""The one TLS client context of every outgoing connection, rebuilt when its files change on disk.

Why one helper: the engine scrape, the canary probe and the Kubernetes pod list
each built their own ``ssl.SSLContext``, and the copies diverged (the probe's
never reloaded a rotated CA bundle, so a cert-manager rotation broke probing
until a restart). ``ClientTLS`` is built once per component and ``context()``
is called before every connection. It stat()s the CA bundle and the client
certificate and key; when their device, inode, size, mtime or ctime moved, or
they had changed less than ``RACY_S`` before the last look, it reads them (with
a byte cap) and compares a hash of the bytes with what the current context was
built from, and rebuilds only when they differ. Why the hash and the racy rule,
not stat alone: timestamps tick coarsely (a kernel jiffy), so a second write in
the tick of the first, with the same length (a re-issued EC certificate often
has it), would not show in stat(). Why not hash on every call: a system bundle
is ~200 KiB. ``bench/tls_client_context.py`` prints the per-call cost.

What every context has: TLS 1.2 as the floor (``TLS_FLOOR``), the system trust
store or the given CA bundle (loaded from the bytes that were hashed, so what is
trusted is what was compared), hostname checking unless verification is off,
and the client certificate where the component configures one. A file that is
missing or holds no PEM is a ``SourceError`` with one line naming the setting
(``file_missing`` / ``malformed``): the exporter keeps serving and the next
connection tries again, so a half-written rotation heals by itself.
"""

from __future__ import annotations

import hashlib
import os
import ssl
import threading
import time
from dataclasses import dataclass, field

from exporter.samples import SourceError

#: the lowest protocol any outgoing connection speaks (TLS 1.0/1.1: RFC 8996)
TLS_FLOOR = ssl.TLSVersion.TLSv1_2
#: the most bytes one CA bundle / certificate / key file may have (a system bundle is ~250 KiB)
MAX_FILE_BYTES = 4 * 1024 * 1024
#: a file changed less than this long before it was hashed may change again within one
#: timestamp tick, unseen by stat(): it is hashed again at the next call (git's "racy" rule)
RACY_S = 2.0

#: what stat() says of a file: device, inode, size, mtime and ctime (ns)
_Stat = tuple[int, int, int, int, int]


@dataclass(frozen=True)
class TLSFiles:
    """What one component's outgoing TLS is made of; ``*_key`` name the settings in error lines."""

    ca_file: str | None = None
    verify: bool = True
    cert_file: str | None = None
    key_file: str | None = None
    ca_key: str = "ca_bundle"
    cert_key: str = "cert_file"
    key_key: str = "key_file"


@dataclass
class ClientTLS:
    """A component's client context: ``context()`` before each connection, rebuilt when a file changed."""

    files: TLSFiles = field(default_factory=TLSFiles)
    _built: tuple[bytes, ssl.SSLContext] | None = field(default=None, repr=False, compare=False)
    #: the files' stat() when last hashed, if then older than RACY_S (a change since must show in it)
    _settled: tuple[_Stat, ...] | None = field(default=None, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    #: how many contexts were built (1 at the first call, +1 per change seen on disk)
    builds: int = 0

    def context(self) -> ssl.SSLContext:
        """The context for the next connection; ``SourceError`` when a file is missing or malformed."""
        f = self.files
        named = [
            (path, setting)
            for path, setting in ((f.ca_file, f.ca_key), (f.cert_file, f.cert_key), (f.key_file, f.key_key))
            if path
        ]
        stats = tuple(_stat(path, setting) for path, setting in named)
        with self._lock:
            if self._built is not None and self._settled == stats:
                return self._built[1]
        ca = _read(f.ca_file, f.ca_key) if f.ca_file else None
        cert = _read(f.cert_file, f.cert_key) if f.cert_file else None
        key = _read(f.key_file, f.key_key) if f.key_file else None
        digest = hashlib.blake2b(digest_size=16)
        for part in (ca, cert, key):
            digest.update(b"-" if part is None else len(part).to_bytes(8, "big") + part)
        fingerprint = digest.digest()
        now = time.time()
        settled = all(now - max(st[3], st[4]) / 1e9 > RACY_S for st in stats)
        with self._lock:
            if self._built is None or self._built[0] != fingerprint:
                self._built = (fingerprint, _build(f, ca))
                self.builds += 1
            self._settled = stats if settled else None
            return self._built[1]


def _stat(path: str, setting: str) -> _Stat:
    try:
        st = os.stat(path)
    except OSError as err:
        raise SourceError("file_missing", f"cannot read {setting} {path}: {err.strerror or type(err).__name__}") from None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _build(f: TLSFiles, ca: bytes | None) -> ssl.SSLContext:
    """``create_default_context``'s defaults (the system store, or only the bundle when one is given), TLS 1.2 up."""
    if ca is None:
        context = ssl.create_default_context()
    else:
        text = ca.decode("ascii", "replace")
        if "-----BEGIN CERTIFICATE-----" not in text:
            raise SourceError("malformed", f"{f.ca_key} {f.ca_file}: not a PEM certificate bundle (no certificate in it)")
        try:
            context = ssl.create_default_context(cadata=text)
        except (ssl.SSLError, ValueError) as err:
            raise SourceError("malformed", f"{f.ca_key} {f.ca_file}: not a PEM certificate bundle ({_reason(err)})") from None
    context.minimum_version = TLS_FLOOR
    if not f.verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if f.cert_file:
        try:
            context.load_cert_chain(f.cert_file, f.key_file, password=_no_password)
        except (OSError, ssl.SSLError, ValueError) as err:
            raise SourceError(
                "malformed", f"{f.cert_key} {f.cert_file}: does not load with {f.key_key} {f.key_file}: {_reason(err)}"
            ) from None
    return context


def _read(path: str, setting: str) -> bytes:
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        raise SourceError("file_missing", f"cannot read {setting} {path}: {err.strerror or type(err).__name__}") from None
    if len(data) > MAX_FILE_BYTES:
        raise SourceError("malformed", f"{setting} {path}: over {MAX_FILE_BYTES // (1024 * 1024)} MiB, not a PEM file")
    return data


def _no_password() -> bytes:
    """Never prompt on a terminal (OpenSSL would for an encrypted key); it fails to load instead."""
    raise ValueError("the key is encrypted")


def _reason(err: Exception) -> str:
    return str(getattr(err, "reason", None) or err).splitlines()[0][:120]
