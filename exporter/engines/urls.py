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
