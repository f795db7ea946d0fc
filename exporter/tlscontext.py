"""Build the server's TLS context from exporter-toolkit settings, refusing what cannot be honoured.

Why a module of its own: every TLS knob an operator writes must either change the
handshake or stop start-up with one line; a setting that is parsed and then dropped
(`min_version: TLS13` serving TLS 1.2, as it once did) is worse than no setting. So
the context is built, and its files loaded, when the web config is read, never later
inside uvicorn where a mistake would end in a traceback.

Where Python's `ssl` cannot do what Go's `crypto/tls` does, the value is refused:
TLS 1.0/1.1 (deprecated by RFC 8996 and disabled by OpenSSL 3's default security
level), client certificates requested but not verified (`RequestClientCert`,
`RequireAnyClientCert`: `ssl` has no verify callback), TLS 1.3 cipher suites (fixed,
not configurable here nor in Go), and `cipher_suites` with `min_version: TLS13`
(they would never apply).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    import uvicorn

#: exporter-toolkit version names -> ssl versions we can honour
TLS_VERSIONS = {"TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
REFUSED_VERSIONS = {"TLS10", "TLS11"}

#: exporter-toolkit client_auth_type -> verify mode; None: known but refused (see module doc)
CLIENT_AUTH: dict[str, ssl.VerifyMode | None] = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
    "RequestClientCert": None,
    "RequireAnyClientCert": None,
    "RequireClientCert": None,  # the toolkit's old spelling of RequireAnyClientCert
}

#: Go (IANA) names of the TLS 1.2 suites Go offers and OpenSSL 3 still ships -> OpenSSL names
CIPHER_SUITES = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": "ECDHE-ECDSA-CHACHA20-POLY1305",
}
TLS13_SUITES = {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"}


class UvicornTLS(TypedDict, total=False):
    """The keyword arguments ``uvicorn.Config`` takes for TLS (empty: plain HTTP)."""

    ssl_context_factory: Callable[[uvicorn.Config, Callable[[], ssl.SSLContext]], ssl.SSLContext]


@dataclass
class TLSSettings:
    """`tls_server_config` after validation; `context()` is the one the server serves with."""

    cert_file: str
    key_file: str
    client_ca_file: str | None = None
    client_auth_type: str = "NoClientCert"
    min_version: str = "TLS12"
    max_version: str = "TLS13"
    cipher_suites: tuple[str, ...] = ()
    _context: ssl.SSLContext | None = field(default=None, repr=False, compare=False)

    def context(self) -> ssl.SSLContext:
        if self._context is None:
            self._context = build_server_context(self)
        return self._context

    def uvicorn_kwargs(self) -> UvicornTLS:
        """uvicorn's own TLS options cannot set versions; hand it our finished context instead."""
        ctx = self.context()
        return {"ssl_context_factory": lambda _config, _default: ctx}


def check_settings(tls: TLSSettings) -> None:
    """Refuse, with one line naming the key, every value the context could not honour."""
    for key in ("min_version", "max_version"):
        value = getattr(tls, key)
        if value in REFUSED_VERSIONS:
            raise ValueError(
                f"tls_server_config.{key}: {value} is refused (TLS 1.0/1.1 are deprecated, RFC 8996); use TLS12 or TLS13"
            )
        if value not in TLS_VERSIONS:
            raise ValueError(f"tls_server_config.{key}: expected TLS12 or TLS13, got {value!r}")
    if TLS_VERSIONS[tls.min_version] > TLS_VERSIONS[tls.max_version]:
        raise ValueError(f"tls_server_config.max_version: {tls.max_version} is below min_version {tls.min_version}")
    if tls.client_auth_type not in CLIENT_AUTH:
        raise ValueError(
            f"tls_server_config.client_auth_type: expected one of {', '.join(CLIENT_AUTH)}, got {tls.client_auth_type!r}"
        )
    if CLIENT_AUTH[tls.client_auth_type] is None:
        raise ValueError(
            f"tls_server_config.client_auth_type: {tls.client_auth_type} is refused: Python's TLS cannot accept a client "
            "certificate without verifying it; use VerifyClientCertIfGiven or RequireAndVerifyClientCert with client_ca_file"
        )
    if tls.client_auth_type == "NoClientCert" and tls.client_ca_file:
        raise ValueError("tls_server_config.client_ca_file: set, but client_auth_type is NoClientCert; set a client_auth_type")
    if tls.client_auth_type != "NoClientCert" and not tls.client_ca_file:
        raise ValueError(f"tls_server_config.client_ca_file: required with client_auth_type {tls.client_auth_type}")
    for name in tls.cipher_suites:
        if name in TLS13_SUITES:
            raise ValueError(
                f"tls_server_config.cipher_suites: {name} is a TLS 1.3 suite; TLS 1.3 suites are fixed and cannot be configured"
            )
        if name not in CIPHER_SUITES:
            raise ValueError(f"tls_server_config.cipher_suites: unknown or insecure suite {name!r}")
    if tls.cipher_suites and tls.min_version == "TLS13":
        raise ValueError(
            "tls_server_config.cipher_suites: apply to TLS 1.2 only, so with min_version TLS13 they would be ignored"
        )


def build_server_context(tls: TLSSettings) -> ssl.SSLContext:
    """Load every file now; ValueError (one line, naming the key) instead of an OpenSSL traceback later."""
    check_settings(tls)
    cert = _read_pem("cert_file", tls.cert_file)
    key = _read_pem("key_file", tls.key_file)
    if "-----BEGIN CERTIFICATE-----" not in cert:
        raise ValueError(f"tls_server_config.cert_file: {tls.cert_file} holds no PEM certificate")
    if "PRIVATE KEY-----" not in key:
        hint = " (it is a certificate: key_file wants the private key)" if "-----BEGIN CERTIFICATE-----" in key else ""
        raise ValueError(f"tls_server_config.key_file: {tls.key_file} holds no PEM private key{hint}")
    if "ENCRYPTED" in key:
        raise ValueError(
            f"tls_server_config.key_file: {tls.key_file} is encrypted; give an unencrypted key (as the exporter-toolkit does)"
        )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = TLS_VERSIONS[tls.min_version]
    ctx.maximum_version = TLS_VERSIONS[tls.max_version]
    ctx.options |= ssl.OP_NO_RENEGOTIATION
    try:
        ctx.load_cert_chain(tls.cert_file, tls.key_file, password=_no_password)
    except (ssl.SSLError, ValueError) as err:
        raise ValueError(
            f"tls_server_config.key_file: {tls.key_file} does not load with cert_file {tls.cert_file}: {_reason(err)}"
        ) from None
    verify = CLIENT_AUTH[tls.client_auth_type]
    assert verify is not None  # check_settings refused the others
    if tls.client_ca_file:
        load_ca_file(ctx, tls.client_ca_file, "tls_server_config.client_ca_file")
    ctx.verify_mode = verify
    if tls.cipher_suites:
        ctx.set_ciphers(":".join(CIPHER_SUITES[name] for name in tls.cipher_suites))
        offered = {c["name"] for c in ctx.get_ciphers()}
        missing = [n for n in tls.cipher_suites if CIPHER_SUITES[n] not in offered]
        if missing:
            raise ValueError(f"tls_server_config.cipher_suites: not available in this OpenSSL: {', '.join(missing)}")
    return ctx


def load_ca_file(ctx: ssl.SSLContext, path: str, key: str) -> None:
    """Trust the certificates in `path`; ValueError naming `key` if it holds none."""
    text = _read_pem(key, path, prefix="")
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise ValueError(f"{key}: {path} holds no PEM certificate")
    try:
        ctx.load_verify_locations(cafile=path)
    except ssl.SSLError as err:
        raise ValueError(f"{key}: {path} does not load: {_reason(err)}") from None


def _read_pem(key: str, path: str, prefix: str = "tls_server_config.") -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError as err:
        raise ValueError(f"{prefix}{key}: cannot read {path}: {err.strerror or err}") from None


def _no_password() -> bytes:
    """Never prompt on a terminal at start-up (OpenSSL would); an encrypted key fails to load instead."""
    raise ValueError("the key is encrypted")


def _reason(err: Exception) -> str:
    return str(getattr(err, "reason", None) or err).splitlines()[0]
