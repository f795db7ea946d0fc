"""TLS and basic auth for the HTTP server, read from a Prometheus exporter-toolkit web config.

Why this format: operators already write `--web.config.file` for node_exporter;
the same file works here. Supported keys::

    tls_server_config:
      cert_file: /path/server.crt
      key_file: /path/server.key
      client_auth_type: RequireAndVerifyClientCert   # or VerifyClientCertIfGiven, NoClientCert
      client_ca_file: /path/ca.crt                   # required with the two above
      min_version: TLS12                             # TLS12 (default) or TLS13
      max_version: TLS13                             # TLS12 or TLS13 (default)
      cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, ...]   # TLS 1.2 only
    basic_auth_users:
      prometheus: $2y$10$...                         # bcrypt hash

Every value is honoured or refused here, at start-up, with one line naming the key
(see exporter.tlscontext for what Python's TLS cannot do and is therefore refused);
keys the toolkit knows but we do not implement (curve preferences, HTTP headers,
http2, allowed SANs) are refused too, never ignored. The TLS context is built, and
every file loaded, while reading the file. Basic auth covers every path except the
probes (see exporter.server.OPEN_PATHS).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from exporter.basicauth import bcrypt_cost
from exporter.tlscontext import TLSSettings, build_server_context

_TOP_KEYS = {"tls_server_config", "basic_auth_users"}
_TLS_KEYS = {"cert_file", "key_file", "client_ca_file", "client_auth_type", "min_version", "max_version", "cipher_suites"}


@dataclass
class WebConfig:
    tls: TLSSettings | None = None
    basic_auth_users: dict[str, bytes] = field(default_factory=dict)


def load_web_config(path: str) -> WebConfig:
    """Parse and check the file, and load its TLS files; ValueError (one line) says which key is wrong."""
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as err:
        raise ValueError(f"cannot read {path}: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise ValueError(f"{path} is not valid YAML: {str(err).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping")
    unknown = sorted(str(k) for k in set(data) - _TOP_KEYS)
    if unknown:
        raise ValueError(f"{path}: unsupported key(s) {', '.join(unknown)}")
    try:
        return WebConfig(tls=_tls(data.get("tls_server_config")), basic_auth_users=_users(data.get("basic_auth_users")))
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None


def _tls(raw: Any) -> TLSSettings | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ValueError("tls_server_config: expected a mapping")
    bad = sorted(str(k) for k in set(raw) - _TLS_KEYS)
    if bad:
        raise ValueError(f"tls_server_config: unsupported key(s) {', '.join(bad)}")
    for key in ("cert_file", "key_file"):
        if not raw.get(key):
            raise ValueError(f"tls_server_config.{key}: required")
    for key in _TLS_KEYS - {"cipher_suites"}:
        if key in raw and not isinstance(raw[key], str):
            raise ValueError(f"tls_server_config.{key}: expected a string, got {raw[key]!r}")
    suites = raw.get("cipher_suites") or []
    if not isinstance(suites, list) or not all(isinstance(s, str) for s in suites):
        raise ValueError("tls_server_config.cipher_suites: expected a list of suite names")
    for key in ("cert_file", "key_file", "client_ca_file"):
        if raw.get(key) and not Path(raw[key]).is_file():
            raise ValueError(f"tls_server_config.{key}: file {raw[key]!r} does not exist")
    tls = TLSSettings(
        cert_file=raw["cert_file"],
        key_file=raw["key_file"],
        client_ca_file=raw.get("client_ca_file") or None,
        client_auth_type=raw.get("client_auth_type") or "NoClientCert",
        min_version=raw.get("min_version") or "TLS12",
        max_version=raw.get("max_version") or "TLS13",
        cipher_suites=tuple(suites),
    )
    tls._context = build_server_context(tls)
    return tls


def _users(raw: Any) -> dict[str, bytes]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValueError("basic_auth_users: expected a mapping of user to bcrypt hash")
    users: dict[str, bytes] = {}
    for user, hashed in raw.items():
        try:
            if not isinstance(hashed, str):
                raise ValueError
            bcrypt_cost(hashed.encode())
        except ValueError:
            raise ValueError(f"basic_auth_users.{user}: expected a bcrypt hash ($2a$/$2b$/$2y$, cost 04-31)") from None
        if ":" in str(user):
            raise ValueError(f"basic_auth_users.{user}: a user name cannot contain ':'")
        users[str(user)] = hashed.encode()
    return users
