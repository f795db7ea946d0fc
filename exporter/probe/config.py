"""The ``probe:`` setting of an engine, and the ``--probe`` / ``--probe-url`` flags.

Why its own module: the canary is opt-in per engine, and everything it needs to
know is parsed and checked here, so a bad value stops ``serve`` with one line
naming the key (exit status 2) before anything starts, and
the engine's section (``exporter/engines/config.py``) only hands the raw value over.

Accepted forms (in an ``engines:`` item)::

    probe: true                      # every default
    probe: {interval: 15s, model: auto, prompt: "Say OK.", max_tokens: 8, timeout: 10s}
    probe: {url: http://gateway:8000, api: chat}   # probe through the front end clients use

* ``interval`` (15 s) — one probe per interval; ``timeout`` (10 s) must be below it.
  The timeout bounds the whole probe: model lookup, connect, headers and the
  complete stream (a stalled or trickling stream ends at the timeout).
* ``model`` (``auto``) — ``auto`` asks ``GET /v1/models`` once and probes the first model.
* ``prompt`` (a short fixed sentence) and ``max_tokens`` (8, at most 256): keep the
  probe's own load small; its tokens are counted in ``llm_probe_tokens_total``.
* ``api`` (``completions``) — ``completions`` posts ``/v1/completions``, ``chat`` posts
  ``/v1/chat/completions``.
* ``url`` (the engine's own origin) — the base URL of the OpenAI-compatible API as
  clients reach it (a gateway, a load balancer); ``/v1/...`` is appended. Probing
  through the front end while the engine's /metrics is scraped directly is what
  makes ``llm_probe_outside_engine_seconds`` the time spent outside the engine.
* ``bearer_token_file`` — credentials for a ``url`` on another origin. The
  engine's own credentials (``bearer_token_file``, ``basic_auth``, user info in
  its URL) are sent only to the engine's own origin, never to another host.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from exporter.errors import UsageError
from exporter.values import (
    boolean,
    default_timeout,
    interval_seconds,
    parsed,
    positive_int,
    readable_file,
    section_keys,
    shown,
    string,
    timeout_seconds,
)

DEFAULT_INTERVAL_S = 15.0
DEFAULT_TIMEOUT_S = 10.0
DEFAULT_PROMPT = "Reply with one word: OK."
DEFAULT_MAX_TOKENS = 8
MAX_MAX_TOKENS = 256
MAX_PROMPT_CHARS = 4096
APIS = ("completions", "chat")
MIN_PROBE_INTERVAL_S = 1.0
KEYS = frozenset({"interval", "timeout", "model", "prompt", "max_tokens", "api", "url", "bearer_token_file"})


@dataclass(frozen=True)
class ProbeConfig:
    """What one engine's canary does (see the module docstring for each field)."""

    interval: float = DEFAULT_INTERVAL_S
    timeout: float = DEFAULT_TIMEOUT_S
    model: str = "auto"
    prompt: str = DEFAULT_PROMPT
    max_tokens: int = DEFAULT_MAX_TOKENS
    api: str = "completions"
    #: base URL of the OpenAI-compatible API (no ``/v1``); None: the engine's own origin
    url: str | None = None
    bearer_token_file: str | None = None


def base_url(value: Any) -> str:
    """An http(s) base URL without query, fragment, trailing slash or a trailing ``/v1``.

    User info is refused, and the value is never echoed when it holds an ``@``:
    a password written into the URL must not reach an error line.
    """
    if not isinstance(value, str):
        raise ValueError(f"expected an http(s) URL string, got {type(value).__name__}")
    parts = urlsplit(value.strip())
    if "@" in parts.netloc:
        raise ValueError("expected a URL without user:password@ (put credentials in probe.bearer_token_file)")
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"expected an http(s) URL, got {shown(value)}")
    if parts.query or parts.fragment:
        raise ValueError("expected a base URL without ?query or #fragment")
    try:
        _ = parts.port  # raises ValueError outside 1-65535
    except ValueError:
        raise ValueError(f"expected a port from 1 to 65535 in {shown(value)}") from None
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def _max_tokens(value: Any) -> int:
    n = positive_int(value)
    if n > MAX_MAX_TOKENS:
        raise ValueError(f"expected 1 to {MAX_MAX_TOKENS} tokens (the probe must stay small), got {shown(value)}")
    return n


def _prompt(value: Any) -> str:
    text = string(value)
    if len(text) > MAX_PROMPT_CHARS:
        raise ValueError(f"expected at most {MAX_PROMPT_CHARS} characters, got {len(text)}")
    return text


def _api(value: Any) -> str:
    if not isinstance(value, str) or value not in APIS:
        raise ValueError(f"expected one of {', '.join(APIS)}, got {shown(value)}")
    return str(value)


def parse_probe(value: Any, where: str) -> ProbeConfig | None:
    """The ``probe:`` value of one engine; None when absent or off. UsageError names the key."""
    if value is None:
        return None
    if isinstance(value, (bool, str)):
        return ProbeConfig() if parsed(boolean, value, where) else None
    if not isinstance(value, dict):
        raise UsageError(f"{where}: expected true, false or a mapping of {', '.join(sorted(KEYS))}")
    item = section_keys(value, KEYS, where, f" (known: {', '.join(sorted(KEYS))})")
    interval = parsed(interval_seconds, item.get("interval", DEFAULT_INTERVAL_S), f"{where}.interval")
    if interval < MIN_PROBE_INTERVAL_S:
        raise UsageError(f"{where}.interval: at least {MIN_PROBE_INTERVAL_S:g} s (a canary, not a load generator)")
    timeout = parsed(timeout_seconds, item.get("timeout", default_timeout(interval, DEFAULT_TIMEOUT_S)), f"{where}.timeout")
    if timeout >= interval:
        raise UsageError(f"{where}.timeout: {timeout:g} s must be less than its interval {interval:g} s")
    token = item.get("bearer_token_file")
    return ProbeConfig(
        interval=interval,
        timeout=timeout,
        model=parsed(string, item.get("model", "auto"), f"{where}.model"),
        prompt=parsed(_prompt, item.get("prompt", DEFAULT_PROMPT), f"{where}.prompt"),
        max_tokens=parsed(_max_tokens, item.get("max_tokens", DEFAULT_MAX_TOKENS), f"{where}.max_tokens"),
        api=parsed(_api, item.get("api", "completions"), f"{where}.api"),
        url=parsed(base_url, item["url"], f"{where}.url") if item.get("url") is not None else None,
        bearer_token_file=parsed(readable_file, token, f"{where}.bearer_token_file") if token is not None else None,
    )


# --------------------------------------------------------------------------- flags


def add_probe_arguments(parser: argparse.ArgumentParser) -> None:
    """``--probe`` and ``--probe-url`` (env ``LLM_EXPORTER_PROBE`` / ``LLM_EXPORTER_PROBE_URL``)."""
    parser.add_argument(
        "--probe",
        dest="probe",
        action="store_true",
        default=None,
        help="send a small streaming canary completion to the engine every 15 s (a single engine; "
        "per-engine settings: `probe:` in the config file; env LLM_EXPORTER_PROBE)",
    )
    parser.add_argument(
        "--probe-url",
        dest="probe_url",
        default=None,
        metavar="URL",
        help="probe the OpenAI-compatible API at this base URL (the front end clients use) instead of "
        "the engine's own; implies --probe (env LLM_EXPORTER_PROBE_URL)",
    )


class ProbedEngine(Protocol):
    """What the flags touch of an engine (exporter/engines/config.py: EngineConfig)."""

    probe: ProbeConfig | None


def apply_probe_flags(engines: Sequence[ProbedEngine], args: argparse.Namespace, env: Mapping[str, str]) -> None:
    """Turn the probe on for the one engine when ``--probe`` / ``--probe-url`` (or their env) is given.

    Why only one engine: which of several engines a bare flag means is a guess;
    with several, each says ``probe:`` in the config file. An engine whose
    config already has ``probe:`` keeps it (``--probe-url`` then sets its URL).
    """
    flag = getattr(args, "probe", None)
    url = getattr(args, "probe_url", None)
    env_flag = env.get("LLM_EXPORTER_PROBE")
    env_url = env.get("LLM_EXPORTER_PROBE_URL")
    on = bool(flag) or (bool(env_flag) and parsed(boolean, env_flag, "LLM_EXPORTER_PROBE"))
    where = "--probe-url" if url else ("--probe" if flag else ("LLM_EXPORTER_PROBE_URL" if env_url else "LLM_EXPORTER_PROBE"))
    url = url or env_url
    if not on and not url:
        return
    if len(engines) != 1:
        raise UsageError(
            f"{where}: applies to a single engine, and {len(engines)} are configured; "
            "give each engine its own `probe:` in the config file"
        )
    engine = engines[0]
    current = engine.probe or ProbeConfig()
    if url:
        current = replace(current, url=parsed(base_url, url, where))
    engine.probe = current
