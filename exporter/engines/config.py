"""An engine's section: one ``engines:`` item (or ``--engine URL``) parsed into an ``EngineConfig``.

Why here and not in exporter/config.py: the engine scraper (exporter/engines/source.py),
discovery (exporter/kubernetes/discovery.py), the probe and the profiler all take an
``EngineConfig``; with the dataclass in the assembly each of them imported the assembly
back. The section's keys, defaults, limits and one-line errors live here; the assembly
hands over the raw item and the defaults the top-level flags set (``EngineDefaults``).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from exporter.capacity.config import profile_path
from exporter.errors import UsageError
from exporter.probe.config import ProbeConfig, parse_probe
from exporter.values import (
    ENV_PREFIX,
    boolean,
    default_timeout,
    interval_seconds,
    parsed,
    positive_int,
    readable_file,
    redacted_url,
    section_keys,
    shown,
    string,
    timeout_seconds,
)

ENGINE_TYPES = ("auto", "vllm", "sglang", "tgi", "trtllm", "llamacpp")
DEFAULT_MAX_BODY_BYTES = 10 * 1024 * 1024
DEFAULT_MAX_SERIES = 20_000
DEFAULT_ENGINE_TIMEOUT_S = 3.0
MIN_BODY_BYTES, MAX_BODY_BYTES = 1024, 1024**3
#: the most series one engine may be given (50x the default; the store keeps them all in memory)
MAX_SERIES_LIMIT = 1_000_000
#: Linux's PID_MAX_LIMIT: a larger `pid` cannot name a process
MAX_PID = 4_194_304


@dataclass
class EngineConfig:
    """One inference server whose own /metrics we scrape."""

    url: str
    name: str
    type: str = "auto"
    bearer_token_file: str | None = None
    ca_bundle: str | None = None
    tls_verify: bool = True
    timeout: float = 3.0
    interval: float = 5.0
    max_series: int = DEFAULT_MAX_SERIES
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    #: follow same-host redirects (at most 3); off: a redirect fails the scrape with reason `redirect`
    follow_redirects: bool = False
    #: basic auth (`basic_auth: {username, password_file}`); the password file is re-read every scrape
    basic_auth_username: str | None = None
    basic_auth_password_file: str | None = None
    #: process sampler: the serving process, by PID or by a command-line substring
    pid: int | None = None
    process: str | None = None
    #: canary probe (`probe:`; exporter/probe/config.py); None: not probed
    probe: ProbeConfig | None = None
    #: the GPUs it runs on (`gpus:`, `--engine-gpus`): index labels or UUIDs; empty: found
    #: by Kubernetes or the process, else every GPU (exporter/diagnosis/scope.py)
    gpus: tuple[str, ...] = ()
    #: capacity profile file (`capacity_profile:`, `--capacity-profile`; exporter/capacity/config.py)
    capacity_profile: str | None = None
    #: whose spans are this engine's (`trace_service:`): a service.name, or KEY=VALUE of a resource
    #: attribute (exporter/tracing/normalize.py); None: the only engine takes every span
    trace_service: str | None = None


@dataclass(frozen=True)
class EngineDefaults:
    """What an item leaves out takes from the top-level settings (--engine-interval, ...)."""

    interval: float = 5.0
    #: --engine-timeout when someone set it; None: derived from each engine's own interval
    timeout: float | None = None
    max_series: int = DEFAULT_MAX_SERIES


# --------------------------------------------------------------------------- value parsers


def series_budget(value: Any) -> int:
    i = positive_int(value)
    if i > MAX_SERIES_LIMIT:
        raise ValueError(f"expected 1 to {MAX_SERIES_LIMIT} series, got {shown(value)}")
    return i


def pid_number(value: Any) -> int:
    i = positive_int(value)
    if i > MAX_PID:
        raise ValueError(f"expected a process id 1 to {MAX_PID}, got {shown(value)}")
    return i


def trace_service(value: Any) -> str:
    """A service.name or KEY=VALUE of a resource attribute (exporter/tracing/normalize.py)."""
    from exporter.tracing.normalize import parse_trace_service

    text = string(value)
    parse_trace_service(text)
    return text


def body_bytes(value: Any) -> int:
    i = positive_int(value)
    if not MIN_BODY_BYTES <= i <= MAX_BODY_BYTES:
        raise ValueError(f"expected {MIN_BODY_BYTES} to {MAX_BODY_BYTES} bytes, got {shown(value)}")
    return i


def engine_url(value: Any) -> str:
    """Normalise an engine URL: a URL without a path gets /metrics."""
    if not isinstance(value, str):
        raise ValueError(f"expected an http(s) URL string, got {shown(value)}")
    try:
        parts = urlsplit(value.strip())
        port_ok = parts.port is None or parts.port > 0
    except ValueError:  # "http://[::1", a port outside 0-65535
        parts, port_ok = urlsplit(""), False
    if parts.scheme not in ("http", "https") or not parts.netloc or not parts.hostname or not port_ok:
        raise ValueError(f"expected an http(s) URL with a host and a port 1-65535, got {redacted_url(value)}")
    path = parts.path if parts.path not in ("", "/") else "/metrics"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def gpu_list(value: Any) -> tuple[str, ...]:
    """GPUs of one engine: a list (or comma-separated string) of GPU indexes or UUIDs ("GPU-...")."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not items:
        raise ValueError("expected a non-empty list of GPU indexes or UUIDs")
    out: list[str] = []
    for item in items:
        if type(item) is int and item >= 0:
            out.append(str(item))
            continue
        text = item.strip() if isinstance(item, str) else ""
        if text.isdigit():
            out.append(str(int(text)))
        elif text.startswith(("GPU-", "MIG-")) and len(text) <= 128 and text.isprintable() and " " not in text:
            out.append(text)
        else:
            raise ValueError(f"expected GPU indexes (0, 1, ...) or UUIDs (GPU-...), got {str(item)[:64]!r}")
    return tuple(dict.fromkeys(out))


# --------------------------------------------------------------------------- one item

#: the keys of one `engines:` item
KEYS = frozenset(
    {
        "url",
        "name",
        "type",
        "bearer_token_file",
        "ca_bundle",
        "tls_verify",
        "timeout",
        "interval",
        "max_series",
        "max_body_bytes",
        "pid",
        "process",
        "follow_redirects",
        "basic_auth",
        "probe",  # exporter/probe/config.py
        "gpus",  # exporter/diagnosis/scope.py
        "capacity_profile",  # exporter/capacity/config.py
        "trace_service",  # exporter/tracing/normalize.py
    }
)


def _basic_auth(value: Any, where: str) -> tuple[str, str]:
    """`basic_auth: {username: ..., password_file: ...}` -> (username, readable password file)."""
    if not isinstance(value, dict) or set(value) != {"username", "password_file"}:
        # the keys only: a value could be a password written inline by mistake
        got = f"keys {', '.join(sorted(map(str, value)))}" if isinstance(value, dict) else type(value).__name__
        raise UsageError(f"{where}: expected a mapping with exactly username and password_file, got {got}"[:200])
    user = parsed(string, value["username"], f"{where}.username")
    if ":" in user:
        raise UsageError(f"{where}.username: a basic-auth user name cannot contain ':'")
    return user, parsed(readable_file, value["password_file"], f"{where}.password_file")


def _host_port(url: str) -> str:
    """host[:port] of url without its userinfo: a default engine name must not carry a password."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    try:
        return f"{host}:{parts.port}" if parts.port is not None else host
    except ValueError:
        return host


def engine_from_mapping(item: Any, defaults: EngineDefaults, where: str) -> EngineConfig:
    """One `engines:` item (a URL string or a mapping); UsageError names the bad key."""
    if isinstance(item, str):
        item = {"url": item}
    if not isinstance(item, dict) or "url" not in item:
        raise UsageError(f"{where}: expected a mapping with a url")
    item = section_keys(item, KEYS, where)
    url = parsed(engine_url, item["url"], f"{where}: url")
    etype = item.get("type", "auto")
    if not isinstance(etype, str) or etype not in ENGINE_TYPES:
        raise UsageError(f"{where}: type: expected one of {', '.join(ENGINE_TYPES)}, got {shown(etype)}")
    token_file = item.get("bearer_token_file")
    if token_file is not None:
        parsed(readable_file, token_file, f"{where}: bearer_token_file")
    ca = item.get("ca_bundle")
    if ca is not None:
        parsed(readable_file, ca, f"{where}: ca_bundle")
    basic = _basic_auth(item["basic_auth"], f"{where}: basic_auth") if item.get("basic_auth") is not None else None
    url_auth = "@" in urlsplit(url).netloc
    if basic and (token_file is not None or url_auth):
        other = "bearer_token_file" if token_file is not None else "user info in the url"
        raise UsageError(f"{where}: basic_auth: give one kind of credentials, not basic_auth and {other}")
    if url_auth and token_file is not None:
        raise UsageError(f"{where}: url: user info in the url and bearer_token_file: give one kind of credentials")
    for key in ("name", "process"):
        if item.get(key) is not None:
            parsed(string, item[key], f"{where}: {key}")
    interval = parsed(interval_seconds, item.get("interval", defaults.interval), f"{where}: interval")
    if "timeout" in item:
        timeout = parsed(timeout_seconds, item["timeout"], f"{where}: timeout")
    elif defaults.timeout is not None:
        timeout = defaults.timeout
    else:
        timeout = default_timeout(interval, DEFAULT_ENGINE_TIMEOUT_S)
    if timeout >= interval:
        raise UsageError(f"{where}: timeout {timeout:g} s must be less than its interval {interval:g} s")
    return EngineConfig(
        url=url,
        name=str(item.get("name") or _host_port(url)),
        type=etype,
        bearer_token_file=str(token_file) if token_file else None,
        ca_bundle=str(ca) if ca else None,
        tls_verify=parsed(boolean, item.get("tls_verify", True), f"{where}: tls_verify"),
        timeout=timeout,
        interval=interval,
        max_series=parsed(series_budget, item.get("max_series", defaults.max_series), f"{where}: max_series"),
        max_body_bytes=parsed(body_bytes, item.get("max_body_bytes", DEFAULT_MAX_BODY_BYTES), f"{where}: max_body_bytes"),
        follow_redirects=parsed(boolean, item.get("follow_redirects", False), f"{where}: follow_redirects"),
        basic_auth_username=basic[0] if basic else None,
        basic_auth_password_file=basic[1] if basic else None,
        pid=parsed(pid_number, item["pid"], f"{where}: pid") if item.get("pid") is not None else None,
        process=str(item["process"]) if item.get("process") else None,
        probe=parse_probe(item.get("probe"), f"{where}: probe"),
        gpus=parsed(gpu_list, item["gpus"], f"{where}: gpus") if item.get("gpus") is not None else (),
        capacity_profile=(
            profile_path(item["capacity_profile"], f"{where}: capacity_profile")
            if item.get("capacity_profile") is not None
            else None
        ),
        trace_service=(
            parsed(trace_service, item["trace_service"], f"{where}: trace_service")
            if item.get("trace_service") is not None
            else None
        ),
    )


def engines_from_list(items: Any, defaults: EngineDefaults, where: str | None) -> list[EngineConfig]:
    """The `engines:` list of the config file."""
    if not isinstance(items, list):
        raise UsageError(f"{where}: engines: expected a list")
    return [engine_from_mapping(item, defaults, f"{where}: engines[{i}]") for i, item in enumerate(items)]


# --------------------------------------------------------------------------- flags


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """``--engine`` (repeatable) and the flags that apply to the first engine."""
    parser.add_argument(
        "--engine",
        dest="engine",
        action="append",
        default=None,
        metavar="URL",
        help="an inference server's Prometheus endpoint (repeatable; env LLM_EXPORTER_ENGINE, comma-separated)",
    )
    parser.add_argument(
        "--engine-pid", dest="engine_pid", default=None, help="PID of the serving process (applies to the first engine)"
    )
    parser.add_argument(
        "--engine-process",
        dest="engine_process",
        default=None,
        help="command-line substring of the serving process (applies to the first engine)",
    )
    parser.add_argument(
        "--engine-gpus",
        dest="engine_gpus",
        default=None,
        metavar="LIST",
        help="GPU indexes or UUIDs the engine runs on, comma-separated (applies to the first engine; env LLM_EXPORTER_ENGINE_GPUS)",
    )


def apply_engine_flags(
    engines: list[EngineConfig], defaults: EngineDefaults, args: argparse.Namespace, env: Mapping[str, str]
) -> None:
    """--engine URLs (else LLM_EXPORTER_ENGINE) appended to ``engines``; --engine-pid, --engine-process
    and --engine-gpus (else their environment) onto the first engine."""
    urls = getattr(args, "engine", None) or ([u for u in env.get(ENV_PREFIX + "ENGINE", "").split(",") if u.strip()])
    for url in urls:
        engines.append(engine_from_mapping({"url": url}, defaults, "--engine"))
    pid = getattr(args, "engine_pid", None) or env.get(ENV_PREFIX + "ENGINE_PID")
    proc = getattr(args, "engine_process", None) or env.get(ENV_PREFIX + "ENGINE_PROCESS")
    if pid or proc:
        if not engines:
            raise UsageError("--engine-pid/--engine-process: needs an --engine to attach to")
        if pid:
            where_pid = "--engine-pid" if getattr(args, "engine_pid", None) else ENV_PREFIX + "ENGINE_PID"
            engines[0].pid = parsed(pid_number, pid, where_pid)
        if proc:
            engines[0].process = str(proc)
    gpus = getattr(args, "engine_gpus", None) or env.get(ENV_PREFIX + "ENGINE_GPUS")
    if gpus:
        if not engines:
            raise UsageError("--engine-gpus: needs an --engine to attach to")
        engines[0].gpus = parsed(gpu_list, gpus, "--engine-gpus")


__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_SERIES",
    "ENGINE_TYPES",
    "EngineConfig",
    "EngineDefaults",
    "add_engine_arguments",
    "apply_engine_flags",
    "engine_from_mapping",
    "engines_from_list",
    "gpu_list",
    "pid_number",
]
