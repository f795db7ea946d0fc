"""TLS and basic auth for /metrics, read from a Prometheus exporter-toolkit web config.

Why this format: operators already write `--web.config.file` for node_exporter;
the same file works here. Supported keys::

    tls_server_config:
      cert_file: /path/server.crt
      key_file: /path/server.key
      client_ca_file: /path/ca.crt        # optional
      client_auth_type: RequireAndVerifyClientCert   # optional; or NoClientCert
    basic_auth_users:
      prometheus: $2y$10$...               # bcrypt hash

Keys the toolkit knows but we do not implement (cipher suites, curve
preferences, HTTP headers) are rejected with a clear error rather than ignored.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import ssl
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

_TLS_KEYS = {"cert_file", "key_file", "client_ca_file", "client_auth_type", "min_version"}
_CLIENT_AUTH = {"NoClientCert", "RequireAndVerifyClientCert", "RequireAnyClientCert", "VerifyClientCertIfGiven"}
_TLS_VERSIONS = {"TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}


@dataclass
class TLSConfig:
    cert_file: str
    key_file: str
    client_ca_file: str | None = None
    client_auth_type: str = "NoClientCert"
    min_version: str = "TLS12"

    def uvicorn_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"ssl_certfile": self.cert_file, "ssl_keyfile": self.key_file}
        if self.client_ca_file:
            kwargs["ssl_ca_certs"] = self.client_ca_file
            kwargs["ssl_cert_reqs"] = ssl.CERT_OPTIONAL if self.client_auth_type == "VerifyClientCertIfGiven" else ssl.CERT_REQUIRED
        return kwargs


@dataclass
class WebConfig:
    tls: TLSConfig | None = None
    basic_auth_users: dict[str, bytes] = field(default_factory=dict)
    _verified: dict[tuple[str, bytes], bool] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def check_authorization(self, header: str | None) -> bool:
        """True if no users are configured or the Basic credentials match a bcrypt hash.

        Successful checks are cached by a SHA-256 of the password: bcrypt costs
        tens of milliseconds by design, and Prometheus scrapes every few seconds.
        """
        if not self.basic_auth_users:
            return True
        if not header or not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:], validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        hashed = self.basic_auth_users.get(user)
        if hashed is None:
            return False
        key = (user, hashlib.sha256(password.encode()).digest())
        with self._lock:
            if key in self._verified:
                return self._verified[key]
        import bcrypt

        try:
            ok = bcrypt.checkpw(password.encode(), hashed)
        except ValueError:
            ok = False
        with self._lock:
            if len(self._verified) > 1024:
                self._verified.clear()
            self._verified[key] = ok
        return ok


def load_web_config(path: str) -> WebConfig:
    """Parse and check the file; ValueError says which key is wrong."""
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as err:
        raise ValueError(f"cannot read {path}: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise ValueError(f"{path} is not valid YAML: {str(err).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping")
    unknown = sorted(set(data) - {"tls_server_config", "basic_auth_users"})
    if unknown:
        raise ValueError(f"{path}: unsupported key(s) {', '.join(unknown)}")
    cfg = WebConfig()
    tls = data.get("tls_server_config")
    if tls:
        if not isinstance(tls, dict):
            raise ValueError(f"{path}: tls_server_config: expected a mapping")
        bad = sorted(set(tls) - _TLS_KEYS)
        if bad:
            raise ValueError(f"{path}: tls_server_config: unsupported key(s) {', '.join(bad)}")
        for key in ("cert_file", "key_file"):
            if not tls.get(key) or not Path(str(tls[key])).is_file():
                raise ValueError(f"{path}: tls_server_config.{key}: file {tls.get(key)!r} does not exist")
        auth = str(tls.get("client_auth_type", "NoClientCert"))
        if auth not in _CLIENT_AUTH:
            raise ValueError(f"{path}: tls_server_config.client_auth_type: expected one of {', '.join(sorted(_CLIENT_AUTH))}")
        if auth != "NoClientCert" and not tls.get("client_ca_file"):
            raise ValueError(f"{path}: tls_server_config.client_ca_file: required with client_auth_type {auth}")
        min_version = str(tls.get("min_version", "TLS12"))
        if min_version not in _TLS_VERSIONS:
            raise ValueError(f"{path}: tls_server_config.min_version: expected TLS12 or TLS13")
        cfg.tls = TLSConfig(
            cert_file=str(tls["cert_file"]),
            key_file=str(tls["key_file"]),
            client_ca_file=str(tls["client_ca_file"]) if tls.get("client_ca_file") else None,
            client_auth_type=auth,
            min_version=min_version,
        )
    users = data.get("basic_auth_users") or {}
    if not isinstance(users, dict):
        raise ValueError(f"{path}: basic_auth_users: expected a mapping of user to bcrypt hash")
    for user, hashed in users.items():
        if not isinstance(hashed, str) or not hashed.startswith(("$2a$", "$2b$", "$2y$")):
            raise ValueError(f"{path}: basic_auth_users.{user}: expected a bcrypt hash ($2a$/$2b$/$2y$...)")
        cfg.basic_auth_users[str(user)] = hashed.encode()
    return cfg

