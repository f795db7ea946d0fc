"""Exporter configuration: flags > LLM_EXPORTER_* environment > YAML file > defaults.

Why one place: a bad value must stop start-up with one clear line naming the
flag (exit status 2), and every setting must be reachable the same three ways
so a Helm chart, a compose file and a person at a shell all work.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit, urlunsplit

import yaml

from exporter.cli import UsageError

ENV_PREFIX = "LLM_EXPORTER_"
ENGINE_TYPES = ("auto", "vllm", "sglang", "tgi", "trtllm", "llamacpp")
DEFAULT_MAX_BODY_BYTES = 10 * 1024 * 1024
DEFAULT_MAX_SERIES = 20_000


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
    #: process sampler: the serving process, by PID or by a command-line substring
    pid: int | None = None
    process: str | None = None


@dataclass
class Config:
    listen_address: str = "0.0.0.0:9750"
    gpu_source: str = "auto"
    gpu_interval: float = 1.0
    gpu_timeout: float = 2.0
    engine_interval: float = 5.0
    engine_timeout: float = 3.0
    process_interval: float = 1.0
    diagnosis_interval: float | None = None
    engines: list[EngineConfig] = field(default_factory=list)
    #: parallel groups: name -> GPU indexes; empty means one group of all GPUs
    groups: dict[str, list[int]] = field(default_factory=dict)
    #: raw `diagnosis:` section (thresholds, SLOs); validated by exporter.diagnosis
    diagnosis: dict[str, Any] = field(default_factory=dict)
    web_config_file: str | None = None
    log_level: str = "info"

    @property
    def host(self) -> str:
        return split_listen_address(self.listen_address)[0]

    @property
    def port(self) -> int:
        return split_listen_address(self.listen_address)[1]

    @property
    def effective_diagnosis_interval(self) -> float:
        return self.diagnosis_interval or self.gpu_interval


# --------------------------------------------------------------------------- parsing helpers


def split_listen_address(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not (0 <= int(port) <= 65535):
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def positive_seconds(value: Any) -> float:
    try:
        f = float(str(value).rstrip("s")) if isinstance(value, str) else float(value)
    except (TypeError, ValueError):
        raise ValueError(f"expected a positive number of seconds, got {value!r}") from None
    if not f > 0 or f != f or f == float("inf"):
        raise ValueError(f"expected a positive number of seconds, got {value!r}")
    return f


def positive_int(value: Any) -> int:
    try:
        i = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"expected a positive integer, got {value!r}") from None
    if i <= 0:
        raise ValueError(f"expected a positive integer, got {value!r}")
    return i


def boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def engine_url(value: str) -> str:
    """Normalise an engine URL: a URL without a path gets /metrics."""
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"expected an http(s) URL, got {value!r}")
    path = parts.path if parts.path not in ("", "/") else "/metrics"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def log_level(value: str) -> str:
    v = str(value).lower()
    if v not in ("debug", "info", "warning", "error"):
        raise ValueError(f"expected debug, info, warning or error, got {value!r}")
    return v


# --------------------------------------------------------------------------- flags

#: (flag, dest, parser, help). Every flag can also be set as LLM_EXPORTER_<DEST upper>.
SERVE_FLAGS: list[tuple[str, str, Callable[[Any], Any], str]] = [
    ("--listen-address", "listen_address", lambda v: (split_listen_address(v), v)[1], "HOST:PORT to serve on (default 0.0.0.0:9750)"),
    ("--gpu-source", "gpu_source", str, "auto, dcgm, nvml, none, replay:PATH[,PATH...] or sim:BASE_URL (default auto)"),
    ("--gpu-interval", "gpu_interval", positive_seconds, "GPU sampling interval in seconds (default 1)"),
    ("--gpu-timeout", "gpu_timeout", positive_seconds, "GPU sample timeout in seconds (default 2)"),
    ("--engine-interval", "engine_interval", positive_seconds, "default engine scrape interval in seconds (default 5)"),
    ("--engine-timeout", "engine_timeout", positive_seconds, "default engine scrape timeout in seconds (default 3)"),
    ("--process-interval", "process_interval", positive_seconds, "process sampler interval in seconds (default 1)"),
    ("--diagnosis-interval", "diagnosis_interval", positive_seconds, "diagnosis cycle in seconds (default: the GPU interval)"),
    ("--web-config-file", "web_config_file", str, "TLS / basic-auth config (Prometheus exporter-toolkit format)"),
    ("--log-level", "log_level", log_level, "debug, info, warning or error (default info)"),
]


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="YAML config file (env LLM_EXPORTER_CONFIG)")
    for flag, dest, _, help_text in SERVE_FLAGS:
        parser.add_argument(flag, dest=dest, default=None, help=help_text)
    parser.add_argument(
        "--engine",
        dest="engine",
        action="append",
        default=None,
        metavar="URL",
        help="an inference server's Prometheus endpoint (repeatable; env LLM_EXPORTER_ENGINE, comma-separated)",
    )
    parser.add_argument("--engine-pid", dest="engine_pid", default=None, help="PID of the serving process (applies to the first engine)")
    parser.add_argument(
        "--engine-process", dest="engine_process", default=None, help="command-line substring of the serving process (applies to the first engine)"
    )


def _flag_of(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def load_config(args: argparse.Namespace, environ: dict[str, str] | None = None) -> Config:
    """Merge file, environment and flags; raise UsageError naming the bad setting."""
    env = os.environ if environ is None else environ
    cfg = Config()
    config_path = getattr(args, "config", None) or env.get(ENV_PREFIX + "CONFIG")
    raw: dict[str, Any] = {}
    if config_path:
        raw = _read_yaml(config_path)
    # 1. file
    for _, dest, parse, _ in SERVE_FLAGS:
        if dest in raw:
            setattr(cfg, dest, _parse(parse, raw[dest], f"{config_path}: {dest}"))
    known = {d for _, d, _, _ in SERVE_FLAGS} | {"engines", "groups", "diagnosis"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise UsageError(f"{config_path}: unknown setting(s) {', '.join(unknown)}")
    # 2. environment, 3. flags
    for _, dest, parse, _ in SERVE_FLAGS:
        env_name = ENV_PREFIX + dest.upper()
        if env.get(env_name):
            setattr(cfg, dest, _parse(parse, env[env_name], env_name))
        value = getattr(args, dest, None)
        if value is not None:
            setattr(cfg, dest, _parse(parse, value, _flag_of(dest)))

    cfg.engines = _engines(raw.get("engines") or [], cfg, config_path)
    urls = getattr(args, "engine", None) or ([u for u in env.get(ENV_PREFIX + "ENGINE", "").split(",") if u.strip()])
    for url in urls:
        cfg.engines.append(_engine_from_mapping({"url": url}, cfg, "--engine"))
    pid = getattr(args, "engine_pid", None) or env.get(ENV_PREFIX + "ENGINE_PID")
    proc = getattr(args, "engine_process", None) or env.get(ENV_PREFIX + "ENGINE_PROCESS")
    if pid or proc:
        if not cfg.engines:
            raise UsageError("--engine-pid/--engine-process: needs an --engine to attach to")
        if pid:
            cfg.engines[0].pid = _parse(positive_int, pid, "--engine-pid")
        if proc:
            cfg.engines[0].process = str(proc)
    names = [e.name for e in cfg.engines]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise UsageError(f"engines: duplicate name(s) {', '.join(dupes)}; give each a distinct `name`")
    cfg.groups = _groups(raw.get("groups") or {}, config_path)
    diag = raw.get("diagnosis") or {}
    if not isinstance(diag, dict):
        raise UsageError(f"{config_path}: diagnosis: expected a mapping")
    cfg.diagnosis = diag
    _check_gpu_source(cfg.gpu_source)
    return cfg


def _parse(parse: Callable[[Any], Any], value: Any, where: str) -> Any:
    try:
        return parse(value)
    except ValueError as err:
        raise UsageError(f"{where}: {err}") from None


def _read_yaml(path: str) -> dict[str, Any]:
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise UsageError(f"--config: cannot read {path}: {err.strerror}") from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as err:
        raise UsageError(f"--config: {path} is not valid YAML: {str(err).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise UsageError(f"--config: {path}: expected a mapping at the top level")
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def _engines(items: Any, cfg: Config, where: str | None) -> list[EngineConfig]:
    if not isinstance(items, list):
        raise UsageError(f"{where}: engines: expected a list")
    return [_engine_from_mapping(item, cfg, f"{where}: engines[{i}]") for i, item in enumerate(items)]


_ENGINE_KEYS = {
    "url", "name", "type", "bearer_token_file", "ca_bundle", "tls_verify", "timeout", "interval",
    "max_series", "max_body_bytes", "pid", "process",
}


def _engine_from_mapping(item: Any, cfg: Config, where: str) -> EngineConfig:
    if isinstance(item, str):
        item = {"url": item}
    if not isinstance(item, dict) or "url" not in item:
        raise UsageError(f"{where}: expected a mapping with a url")
    item = {str(k).replace("-", "_"): v for k, v in item.items()}
    unknown = sorted(set(item) - _ENGINE_KEYS)
    if unknown:
        raise UsageError(f"{where}: unknown setting(s) {', '.join(unknown)}")
    url = _parse(engine_url, item["url"], f"{where}: url")
    etype = str(item.get("type", "auto"))
    if etype not in ENGINE_TYPES:
        raise UsageError(f"{where}: type: expected one of {', '.join(ENGINE_TYPES)}, got {etype!r}")
    token_file = item.get("bearer_token_file")
    if token_file is not None and not Path(str(token_file)).is_file():
        raise UsageError(f"{where}: bearer_token_file: {token_file} does not exist")
    ca = item.get("ca_bundle")
    if ca is not None and not Path(str(ca)).is_file():
        raise UsageError(f"{where}: ca_bundle: {ca} does not exist")
    return EngineConfig(
        url=url,
        name=str(item.get("name") or urlsplit(url).netloc),
        type=etype,
        bearer_token_file=str(token_file) if token_file else None,
        ca_bundle=str(ca) if ca else None,
        tls_verify=_parse(boolean, item.get("tls_verify", True), f"{where}: tls_verify"),
        timeout=_parse(positive_seconds, item.get("timeout", cfg.engine_timeout), f"{where}: timeout"),
        interval=_parse(positive_seconds, item.get("interval", cfg.engine_interval), f"{where}: interval"),
        max_series=_parse(positive_int, item.get("max_series", DEFAULT_MAX_SERIES), f"{where}: max_series"),
        max_body_bytes=_parse(positive_int, item.get("max_body_bytes", DEFAULT_MAX_BODY_BYTES), f"{where}: max_body_bytes"),
        pid=_parse(positive_int, item["pid"], f"{where}: pid") if item.get("pid") is not None else None,
        process=str(item["process"]) if item.get("process") else None,
    )


def _groups(raw: Any, where: str | None) -> dict[str, list[int]]:
    if not isinstance(raw, dict):
        raise UsageError(f"{where}: groups: expected a mapping of name to GPU indexes")
    groups: dict[str, list[int]] = {}
    for name, gpus in raw.items():
        if not isinstance(gpus, list) or not gpus or not all(isinstance(g, int) and g >= 0 for g in gpus):
            raise UsageError(f"{where}: groups.{name}: expected a non-empty list of GPU indexes")
        groups[str(name)] = list(gpus)
    return groups


def _check_gpu_source(value: str) -> None:
    from exporter.gpu import parse_spec

    try:
        parse_spec(value)
    except ValueError as err:
        raise UsageError(f"--gpu-source: {err}") from None
