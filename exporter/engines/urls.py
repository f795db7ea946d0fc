"""Engine URLs without secrets: userinfo split off, origins compared.

Why a module of its own: a URL is printed in labels (``source``, ``server``),
source names, log lines and error messages, and a ``user:password@`` in it
would travel to all of them. Every place that shows a URL goes through
:func:`safe_url`; the credentials are taken out once, kept in memory and sent
only as an ``Authorization`` header.
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit, urlunsplit

DEFAULT_PORTS = {"http": 80, "https": 443}


def _netloc(host: str, port: int | None) -> str:
    netloc = f"[{host}]" if ":" in host else host
    return f"{netloc}:{port}" if port is not None else netloc


def _port(url: str) -> int | None:
    try:
        return urlsplit(url).port
    except ValueError:  # a port that is not a number or out of range
        return None


def safe_url(url: str) -> str:
    """``url`` without ``user:password@`` (safe for labels, logs and messages)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit((parts.scheme, _netloc(parts.hostname or "", _port(url)), parts.path, parts.query, ""))


def host_port(url: str) -> str:
    """``host[:port]`` of ``url``, never its userinfo (a default source name)."""
    return _netloc(urlsplit(url).hostname or "", _port(url))


def split_userinfo(url: str) -> tuple[str, tuple[str, str] | None]:
    """``(url without userinfo, (user, password) or None)``; both parts percent-decoded."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    return safe_url(url), (unquote(parts.username or ""), unquote(parts.password or ""))


def origin(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) with the scheme's default port filled in: what "same host" means."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    port = _port(url)
    return scheme, (parts.hostname or "").lower(), port if port is not None else DEFAULT_PORTS.get(scheme, 0)


def plain_http_url(value: str, what: str, default_path: str) -> str:
    """``value`` as an http(s) URL with a valid port and no user info (a password in a flag ends up
    in process lists and logs), ``default_path`` added when it has none; ValueError naming ``what``."""
    text = value.strip()
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{what}: expected an http:// or https:// URL, got {value[:200]!r}")
    if "@" in parts.netloc:
        raise ValueError(f"{what}: the URL must not carry a user or password")
    try:
        parts.port  # noqa: B018 - validates the port
    except ValueError as err:
        raise ValueError(f"{what}: {err}") from None
    return text if parts.path not in ("", "/") else text.rstrip("/") + default_path
