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

from exporter.basicauth import MAX_BCRYPT_COST, bcrypt_cost
from exporter.tlscontext import TLSSettings, build_server_context
from exporter.values import one_line, plain, read_yaml_file, shown

_TOP_KEYS = {"tls_server_config", "basic_auth_users"}
_TLS_KEYS = {"cert_file", "key_file", "client_ca_file", "client_auth_type", "min_version", "max_version", "cipher_suites"}


@dataclass
class WebConfig:
    tls: TLSSettings | None = None
    basic_auth_users: dict[str, bytes] = field(default_factory=dict)


def load_web_config(path: str) -> WebConfig:
    """Parse and check the file, and load its TLS files; ValueError (one line) says which key is wrong."""
    try:
        data = read_yaml_file(path) or {}
    except ValueError as err:  # unreadable, not UTF-8, not YAML
        raise ValueError(one_line(str(err))) from None
    if not isinstance(data, dict):
        raise ValueError(f"{plain(path)}: expected a mapping")
    unknown = sorted(shown(k) if not isinstance(k, str) else plain(k) for k in set(data) - _TOP_KEYS)
    if unknown:
        raise ValueError(one_line(f"{plain(path)}: unsupported key(s) {', '.join(unknown)}"))
    try:
        return WebConfig(tls=_tls(data.get("tls_server_config")), basic_auth_users=_users(data.get("basic_auth_users")))
    except ValueError as err:
        raise ValueError(one_line(f"{plain(path)}: {err}")) from None


def _tls(raw: Any) -> TLSSettings | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ValueError("tls_server_config: expected a mapping")
    bad = sorted(shown(k) if not isinstance(k, str) else plain(k) for k in set(raw) - _TLS_KEYS)
    if bad:
        raise ValueError(f"tls_server_config: unsupported key(s) {', '.join(bad)}")
    for key in ("cert_file", "key_file"):
        if not raw.get(key):
            raise ValueError(f"tls_server_config.{key}: required")
    for key in _TLS_KEYS - {"cipher_suites"}:
        if key in raw and not isinstance(raw[key], str):
            raise ValueError(f"tls_server_config.{key}: expected a string, got {shown(raw[key])}")
    suites = raw.get("cipher_suites") or []
    if not isinstance(suites, list) or not all(isinstance(s, str) for s in suites):
        raise ValueError("tls_server_config.cipher_suites: expected a list of suite names")
    for key in ("cert_file", "key_file", "client_ca_file"):
        if raw.get(key) and not _is_file(raw[key]):
            raise ValueError(f"tls_server_config.{key}: file {shown(raw[key])} does not exist or cannot be read")
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


def _is_file(path: str) -> bool:
    """Path.is_file() raises for a name too long (ENAMETOOLONG) or holding a NUL byte: both are "no such file"."""
    try:
        return Path(path).is_file()
    except (OSError, ValueError):
        return False


def _users(raw: Any) -> dict[str, bytes]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValueError("basic_auth_users: expected a mapping of user to bcrypt hash")
    users: dict[str, bytes] = {}
    for name, hashed in raw.items():
        if isinstance(name, int) and not isinstance(name, bool) and name.bit_length() <= 64:
            name = str(name)  # `123: $2y$...` in YAML: the user 123
        if not isinstance(name, str) or not name or len(name) > 256 or not name.isprintable():
            raise ValueError(f"basic_auth_users: expected user names of 1-256 printable characters, got {shown(name)}")
        user: str = name
        try:
            if not isinstance(hashed, str):
                raise ValueError
            cost = bcrypt_cost(hashed.encode())
        except ValueError:
            raise ValueError(f"basic_auth_users.{plain(user)}: expected a bcrypt hash ($2a$/$2b$/$2y$, cost 04-31)") from None
        if cost > MAX_BCRYPT_COST:  # refused before anything hashes (the dummy hash would take this cost)
            raise ValueError(
                f"basic_auth_users.{plain(user)}: bcrypt cost {cost} is above the maximum {MAX_BCRYPT_COST} "
                f"(each check would take about {2 ** (cost - 10) * 0.07:.0f} s of CPU; rehash with htpasswd -nBC 10)"
            )
        if ":" in user:
            raise ValueError(f"basic_auth_users.{plain(user)}: a user name cannot contain ':'")
        users[user] = hashed.encode()
    return users
