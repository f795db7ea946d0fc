"""Exporter configuration: flags > LLM_EXPORTER_* environment > YAML file > defaults.

Why one place: a bad value must stop start-up with one clear line naming the
flag (exit status 2), and every setting must be reachable the same three ways
so a Helm chart, a compose file and a person at a shell all work.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import yaml

from exporter.capacity.config import headroom_ratio
from exporter.errors import UsageError

ENV_PREFIX = "LLM_EXPORTER_"
ENGINE_TYPES = ("auto", "vllm", "sglang", "tgi", "trtllm", "llamacpp")
DEFAULT_MAX_BODY_BYTES = 10 * 1024 * 1024
DEFAULT_MAX_SERIES = 20_000
#: sampling loops faster than this burn a core for nothing (`--gpu-interval 1e-9` once did)
MIN_INTERVAL_S = 0.1
MAX_INTERVAL_S = 3600.0
MIN_TIMEOUT_S = 0.01
#: a timeout nobody set is this share of its interval (at most the documented default)
DEFAULT_TIMEOUT_SHARE = 0.9
DEFAULT_GPU_TIMEOUT_S = 2.0
DEFAULT_ENGINE_TIMEOUT_S = 3.0
MIN_BODY_BYTES, MAX_BODY_BYTES = 1024, 1024**3
#: the most series one engine may be given (50x the default; the store keeps them all in memory)
MAX_SERIES_LIMIT = 1_000_000
#: Linux's PID_MAX_LIMIT: a larger `pid` cannot name a process
MAX_PID = 4_194_304
#: longest value an error line shows (a 5000-character file name is cut, not printed whole)
SHOWN_CHARS = 80
#: the largest config or web config file read (a real one is a few KiB)
MAX_CONFIG_FILE_BYTES = 4 * 1024 * 1024
#: highest GPU index a `groups:` entry may name (NVML numbers the GPUs of one node from 0)
MAX_GPU_INDEX = 1023


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
    #: canary probe (`probe:`; exporter/probe/config.py: ProbeConfig); None: not probed
    probe: Any = None
    #: the GPUs it runs on (`gpus:`, `--engine-gpus`): index labels or UUIDs; empty: found
    #: by Kubernetes or the process, else every GPU (exporter/diagnosis/scope.py)
    gpus: tuple[str, ...] = ()
    #: capacity profile file (`capacity_profile:`, `--capacity-profile`; exporter/capacity/config.py)
    capacity_profile: str | None = None


@dataclass
class Config:
    listen_address: str = "0.0.0.0:9750"
    gpu_source: str = "auto"
    gpu_interval: float = 1.0
    gpu_timeout: float = 0.9  # DEFAULT_TIMEOUT_SHARE of the default interval
    engine_interval: float = 5.0
    engine_timeout: float = 3.0
    process_interval: float = 1.0
    #: default budget of published series per engine (an engine's `max_series` overrides it)
    engine_max_series: int = DEFAULT_MAX_SERIES
    diagnosis_interval: float | None = None
    engines: list[EngineConfig] = field(default_factory=list)
    #: parallel groups: name -> GPU indexes; empty means one group of all GPUs
    groups: dict[str, list[int]] = field(default_factory=dict)
    #: the multi-node parallel (TP/PP) group this node is part of, the same on every node of it;
    #: published as llm_parallel_node_group_info{group} for the fleet rules (alerts/fleet.py)
    parallel_group: str | None = None
    #: raw `diagnosis:` section (thresholds, SLOs); validated by exporter.diagnosis
    diagnosis: dict[str, Any] = field(default_factory=dict)
    web_config_file: str | None = None
    log_level: str = "info"
    #: --kubernetes settings (exporter/kubernetes/settings.py: KubernetesConfig); None before load_config
    kubernetes: Any = None
    #: source switches (exporter/registry.py): name -> on; a name left out takes its default
    sources: dict[str, bool] = field(default_factory=dict)
    #: --capacity-headroom: share of the knee the recommended ceiling keeps free (exporter/capacity)
    capacity_headroom: float = 0.2
    #: engine name -> its loaded capacity profile (exporter/capacity/profile.py: Profile), by load_config
    capacity_profiles: dict[str, Any] = field(default_factory=dict)
    #: --enable-profile / --profile-dir (exporter/profile/config.py: ProfileConfig); None before load_config
    profile: Any = None
    #: settings given by file, environment or flag (the others are defaults), e.g. "gpu_timeout"
    explicit: set[str] = field(default_factory=set, repr=False, compare=False)

    @property
    def host(self) -> str:
        return split_listen_address(self.listen_address)[0]

    @property
    def port(self) -> int:
        return split_listen_address(self.listen_address)[1]

    @property
    def effective_diagnosis_interval(self) -> float:
        """The diagnosis cycle: as set, else the GPU interval but at least 1 s. Its window
        already smooths over seconds, and a cycle costs milliseconds: judging four times a
        second beside a 250 ms GPU loop would triple the exporter's own CPU for nothing."""
        return self.diagnosis_interval or max(1.0, self.gpu_interval)


# --------------------------------------------------------------------------- parsing helpers


_USERINFO = re.compile(r"://[^/\s@'\"]*@")


def shown(value: Any) -> str:
    """A value as an error line may show it: repr()-ed (no raw newline or control character), cut short.

    Why: a bad value is echoed so the operator sees it, but a 5000-character file name or an
    integer of 400 digits must not become a screenful, and str() of a 5000-digit integer raises.
    """
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {len(format(value, 'x')) * 4 * 3 // 10}+ digits"
    try:
        text = _USERINFO.sub("://***@", repr(value))  # a URL's password never reaches an error line
    except ValueError:  # a huge integer inside a list or mapping
        return f"a {type(value).__name__}"
    return text if len(text) <= SHOWN_CHARS else f"{text[: SHOWN_CHARS - 20]}... ({len(text)} characters)"


def plain(path: str) -> str:
    """A file or setting name as an error line shows it: as it is when short and printable, else as shown() cuts it."""
    return path if len(path) <= 4 * SHOWN_CHARS and path.isprintable() else shown(path)


def one_line(message: str) -> str:
    """An error message on exactly one line, of bounded length, whatever the value in it held."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
    text = _USERINFO.sub("://***@", text)  # a URL's password never reaches an error line
    return text if len(text) <= 400 else text[:380] + "... (cut)"


def string(value: Any) -> str:
    """YAML may hand us a number, list or null where a string belongs; say so instead of str()-ing it."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a non-empty string, got {shown(value)}")
    return value


def ascii_digits(text: str) -> bool:
    """ "123", not "１２３" or "²": str.isdigit() and int() accept every Unicode digit."""
    return text.isascii() and text.isdigit()


def _host(host: str) -> bool:
    """A host a socket can bind: an IP literal or a DNS name (bounded, ASCII, no control character)."""
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host == "" or (len(host) <= 253 and host.isascii() and host.isprintable() and " " not in host)


def split_listen_address(value: Any) -> tuple[str, int]:
    host, sep, port = string(value).rpartition(":")
    if not sep or not ascii_digits(port) or len(port) > 5 or not (1 <= int(port) <= 65535):
        raise ValueError(f"expected HOST:PORT with a port 1-65535, got {shown(value)}")
    if not _host(host):
        raise ValueError(
            f"expected HOST:PORT with an IP address or a DNS name of at most 253 ASCII characters, got {shown(value)}"
        )
    return host.strip("[]") or "0.0.0.0", int(port)


def positive_seconds(value: Any) -> float:
    try:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise TypeError
        f = float(value.strip().removesuffix("s")) if isinstance(value, str) else float(value)
    except (TypeError, ValueError, OverflowError):  # float(10**400): OverflowError
        raise ValueError(f"expected a positive number of seconds, got {shown(value)}") from None
    if not f > 0 or not math.isfinite(f):
        raise ValueError(f"expected a positive number of seconds, got {shown(value)}")
    return f


def interval_seconds(value: Any) -> float:
    f = positive_seconds(value)
    if not MIN_INTERVAL_S <= f <= MAX_INTERVAL_S:
        raise ValueError(f"expected {MIN_INTERVAL_S:g} to {MAX_INTERVAL_S:g} seconds, got {shown(value)}")
    return f


def timeout_seconds(value: Any) -> float:
    f = positive_seconds(value)
    if not MIN_TIMEOUT_S <= f <= MAX_INTERVAL_S:
        raise ValueError(f"expected {MIN_TIMEOUT_S:g} to {MAX_INTERVAL_S:g} seconds, got {shown(value)}")
    return f


def positive_int(value: Any) -> int:
    """A positive integer: a YAML int, a whole float, or ASCII digits (at most 18 of them)."""
    bad = ValueError(f"expected a positive integer, got {shown(value)}")
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise bad
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer() or abs(value) > 2**63:
            raise bad
        number = int(value)
    elif isinstance(value, str):
        text = value.strip().removeprefix("+")
        if not ascii_digits(text) or len(text) > 18:  # int() takes "１２" and raises past 4300 digits
            raise bad
        number = int(text)
    else:
        number = int(value)
    if number <= 0:
        raise bad
    return number


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


def body_bytes(value: Any) -> int:
    i = positive_int(value)
    if not MIN_BODY_BYTES <= i <= MAX_BODY_BYTES:
        raise ValueError(f"expected {MIN_BODY_BYTES} to {MAX_BODY_BYTES} bytes, got {shown(value)}")
    return i


def readable_file(value: Any) -> str:
    """A file we can open now, not at the first scrape."""
    path = string(value)
    try:
        with open(path, "rb"):
            pass
    except IsADirectoryError:
        raise ValueError(f"{plain(path)} is a directory, not a file") from None
    except OSError as err:  # ENOENT, EACCES, ENAMETOOLONG (a 5000-character name), ...
        raise ValueError(f"cannot read {plain(path)}: {err.strerror or err}") from None
    except ValueError:  # a NUL byte in the name
        raise ValueError(f"cannot read {plain(path)}: not a valid file name") from None
    return path


def boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    text = value.strip().lower() if isinstance(value, str) else None
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {shown(value)}")


def redacted_url(value: str) -> str:
    """A URL as an error line may show it: user info (a password) replaced by ***."""
    scheme, sep, rest = value.partition("://")
    netloc, slash, tail = rest.partition("/")
    if "@" in netloc:
        netloc = "***@" + netloc.rpartition("@")[2]
    return shown(f"{scheme}{sep}{netloc}{slash}{tail}" if sep else ("***" if "@" in value else value))


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


def group_name(value: Any) -> str:
    """A label value that names one parallel group across nodes: short and printable.

    Why bounded: it is a label value on a series of every node of the group; a value
    copied from a pod name with a hash or a newline would break the join in the rules.
    """
    name = string(value).strip()
    if len(name) > 128 or not name.isprintable():
        raise ValueError(f"expected a printable name of at most 128 characters, got {shown(value)}")
    return name


def log_level(value: Any) -> str:
    v = string(value).lower()
    if v not in ("debug", "info", "warning", "error"):
        raise ValueError(f"expected debug, info, warning or error, got {shown(value)}")
    return v


# --------------------------------------------------------------------------- flags

#: (flag, dest, parser, help). Every flag can also be set as LLM_EXPORTER_<DEST upper>.
SERVE_FLAGS: list[tuple[str, str, Callable[[Any], Any], str]] = [
    (
        "--listen-address",
        "listen_address",
        lambda v: (split_listen_address(v), v)[1],
        "HOST:PORT to serve on (default 0.0.0.0:9750)",
    ),
    ("--gpu-source", "gpu_source", string, "auto, dcgm, nvml, none, replay:PATH[,PATH...] or sim:BASE_URL (default auto)"),
    ("--gpu-interval", "gpu_interval", interval_seconds, "GPU sampling interval in seconds, 0.1-3600 (default 1)"),
    (
        "--gpu-timeout",
        "gpu_timeout",
        timeout_seconds,
        "GPU sample timeout in seconds, below the interval (default 0.9 x interval, at most 2)",
    ),
    ("--engine-interval", "engine_interval", interval_seconds, "default engine scrape interval in seconds, 0.1-3600 (default 5)"),
    (
        "--engine-timeout",
        "engine_timeout",
        timeout_seconds,
        "default engine scrape timeout in seconds, below the interval (default 0.9 x interval, at most 3)",
    ),
    (
        "--engine-max-series",
        "engine_max_series",
        series_budget,
        "default budget of published series per engine; over it the least useful families are dropped and counted (default 20000)",
    ),
    ("--process-interval", "process_interval", interval_seconds, "process sampler interval in seconds, 0.1-3600 (default 1)"),
    (
        "--diagnosis-interval",
        "diagnosis_interval",
        interval_seconds,
        "diagnosis cycle in seconds, 0.1-3600 (default: the GPU interval)",
    ),
    ("--web-config-file", "web_config_file", string, "TLS / basic-auth config (Prometheus exporter-toolkit format)"),
    ("--log-level", "log_level", log_level, "debug, info, warning or error (default info)"),
    (
        "--parallel-group",
        "parallel_group",
        group_name,
        "name of the multi-node parallel (TP/PP) group this node belongs to, the same on every node of it; published as llm_parallel_node_group_info{group} for the fleet rules (default: none)",
    ),
    (
        "--capacity-headroom",
        "capacity_headroom",
        headroom_ratio,
        "share of the capacity profile's knee concurrency that llm_capacity_recommended_max_concurrency keeps free, 0-1 (default 0.2)",
    ),
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
    # --- probe: --probe / --probe-url live in exporter/probe/config.py
    from exporter.probe.config import add_probe_arguments

    add_probe_arguments(parser)
    # --- capacity profile: --capacity-profile lives in exporter/capacity/config.py
    from exporter.capacity.config import add_capacity_arguments

    add_capacity_arguments(parser)
    # --- kubernetes: its flags live in exporter/kubernetes/settings.py
    from exporter.kubernetes.settings import add_arguments as add_kubernetes_arguments

    add_kubernetes_arguments(parser)
    # --- on-demand profile: --enable-profile / --profile-dir live in exporter/profile/config.py
    from exporter.profile.config import add_profile_arguments

    add_profile_arguments(parser)
    # --- sources: --source.NAME / --no-source.NAME live in exporter/registry.py
    from exporter.registry import add_arguments as add_source_arguments

    add_source_arguments(parser)


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
    origin: dict[str, str] = {}  # setting -> where its value came from, for error lines
    # 1. file
    for _, dest, parse, _ in SERVE_FLAGS:
        if dest in raw:
            origin[dest] = f"{config_path}: {dest}"
            setattr(cfg, dest, _parse(parse, raw[dest], origin[dest]))
    known = {d for _, d, _, _ in SERVE_FLAGS} | {"engines", "groups", "diagnosis", "kubernetes", "sources"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise UsageError(f"{config_path}: unknown setting(s) {', '.join(unknown)}")
    # 2. environment, 3. flags
    for _, dest, parse, _ in SERVE_FLAGS:
        env_name = ENV_PREFIX + dest.upper()
        if env.get(env_name):
            origin[dest] = env_name
            setattr(cfg, dest, _parse(parse, env[env_name], env_name))
        value = getattr(args, dest, None)
        if value is not None:
            origin[dest] = _flag_of(dest)
            setattr(cfg, dest, _parse(parse, value, _flag_of(dest)))
    cfg.explicit = set(origin)
    cfg.gpu_timeout = _timeout_below(cfg.gpu_timeout, cfg.gpu_interval, DEFAULT_GPU_TIMEOUT_S, origin, "gpu")
    cfg.engine_timeout = _timeout_below(cfg.engine_timeout, cfg.engine_interval, DEFAULT_ENGINE_TIMEOUT_S, origin, "engine")

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
            where_pid = "--engine-pid" if getattr(args, "engine_pid", None) else ENV_PREFIX + "ENGINE_PID"
            cfg.engines[0].pid = _parse(pid_number, pid, where_pid)
        if proc:
            cfg.engines[0].process = str(proc)
    gpus = getattr(args, "engine_gpus", None) or env.get(ENV_PREFIX + "ENGINE_GPUS")
    if gpus:
        if not cfg.engines:
            raise UsageError("--engine-gpus: needs an --engine to attach to")
        cfg.engines[0].gpus = _parse(gpu_list, gpus, "--engine-gpus")
    # --- probe: --probe / --probe-url / LLM_EXPORTER_PROBE[_URL] for the single engine
    from exporter.probe.config import apply_probe_flags

    apply_probe_flags(cfg, args, env)
    names = [e.name for e in cfg.engines]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise UsageError(f"engines: duplicate name(s) {', '.join(dupes)}; give each a distinct `name`")
    cfg.groups = _groups(raw.get("groups") or {}, config_path)
    diag = raw.get("diagnosis") or {}
    if not isinstance(diag, dict):
        raise UsageError(f"{config_path}: diagnosis: expected a mapping")
    cfg.diagnosis = diag
    _check_thresholds(diag, config_path)
    _check_gpu_source(cfg.gpu_source, origin.get("gpu_source", "--gpu-source"))
    # --- capacity profiles: --capacity-profile / LLM_EXPORTER_CAPACITY_PROFILE, each engine's file read now
    from exporter.capacity.config import apply_capacity_flags

    apply_capacity_flags(cfg, args, env)
    # --- kubernetes: flags, environment and the `kubernetes:` section (exporter/kubernetes/settings.py)
    from exporter.kubernetes.settings import load as load_kubernetes

    cfg.kubernetes = load_kubernetes(args, env, raw.get("kubernetes"), config_path)
    # --- on-demand profile: flags and environment (exporter/profile/config.py)
    from exporter.profile.config import load_profile

    cfg.profile = load_profile(args, env)
    # --- sources: flags, environment and the `sources:` section; last, as `needs` reads the rest
    from exporter import registry

    cfg.sources, source_origin = registry.load(args, env, raw.get("sources"), config_path)
    registry.check(cfg, source_origin)
    return cfg


def _timeout_below(timeout: float, interval: float, default: float, origin: dict[str, str], kind: str) -> float:
    """A timeout someone set must be below its interval; one nobody set is derived from it."""
    if f"{kind}_timeout" not in origin:
        return default_timeout(interval, default)
    if timeout >= interval:
        where_iv = origin.get(f"{kind}_interval", f"{_flag_of(kind + '_interval')} (default)")
        raise UsageError(f"{origin[kind + '_timeout']}: {timeout:g} s must be less than {where_iv} {interval:g} s")
    return timeout


def default_timeout(interval: float, default: float) -> float:
    return min(default, round(interval * DEFAULT_TIMEOUT_SHARE, 6))


def _parse(parse: Callable[[Any], Any], value: Any, where: str) -> Any:
    """parse(value), its ValueError (OverflowError, TypeError: a parser's bug) as one UsageError line."""
    try:
        return parse(value)
    except (ValueError, OverflowError, TypeError) as err:
        raise UsageError(one_line(f"{where}: {err}")) from None


def read_yaml_file(path: str) -> Any:
    """A YAML file's document; ValueError (one line) when it cannot be read or is not YAML.

    Why so many cases: yaml.safe_load raises ValueError for an integer of 5000 digits and
    RecursionError for a deeply nested document, and a non-UTF-8 file is UnicodeDecodeError;
    each would otherwise end start-up in a traceback.
    """
    try:
        with open(path, "rb") as f:  # bounded: `--config /dev/zero` must not fill the memory
            raw = f.read(MAX_CONFIG_FILE_BYTES + 1)
        if len(raw) > MAX_CONFIG_FILE_BYTES:
            raise ValueError(f"{plain(path)} is over {MAX_CONFIG_FILE_BYTES >> 20} MiB: not a config file")
        text = raw.decode("utf-8")
    except OSError as err:
        raise ValueError(f"cannot read {plain(path)}: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise ValueError(f"{plain(path)} is not UTF-8 text (byte {err.start})") from None
    except ValueError as err:
        if "embedded null" not in str(err):
            raise
        raise ValueError(f"cannot read {plain(path)}: not a valid file name") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ValueError(f"{plain(path)} is not valid YAML: {str(err).splitlines()[0]}") from None
    except (ValueError, OverflowError) as err:
        raise ValueError(f"{plain(path)} is not valid YAML: {err}") from None
    except RecursionError:
        raise ValueError(f"{plain(path)} is not valid YAML: nested too deeply") from None


def setting_key(key: Any, where: str | None) -> str:
    """A mapping key as a setting name; YAML may give an int (10**400 cannot even be str()-ed) or a list."""
    if isinstance(key, str):
        return key.replace("-", "_")
    if isinstance(key, bool) or not isinstance(key, (int, float)) or (isinstance(key, int) and key.bit_length() > 64):
        raise UsageError(one_line(f"{where}: unknown setting {shown(key)}"))
    return str(key)


def _read_yaml(path: str) -> dict[str, Any]:
    try:
        data = read_yaml_file(path) or {}
    except ValueError as err:
        raise UsageError(one_line(f"--config: {err}")) from None
    if not isinstance(data, dict):
        raise UsageError(one_line(f"--config: {plain(path)}: expected a mapping at the top level"))
    return {setting_key(k, path): v for k, v in data.items()}


def _engines(items: Any, cfg: Config, where: str | None) -> list[EngineConfig]:
    if not isinstance(items, list):
        raise UsageError(f"{where}: engines: expected a list")
    return [_engine_from_mapping(item, cfg, f"{where}: engines[{i}]") for i, item in enumerate(items)]


_ENGINE_KEYS = {
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
}


def _basic_auth(value: Any, where: str) -> tuple[str, str]:
    """`basic_auth: {username: ..., password_file: ...}` -> (username, readable password file)."""
    if not isinstance(value, dict) or set(value) != {"username", "password_file"}:
        # the keys only: a value could be a password written inline by mistake
        got = f"keys {', '.join(sorted(map(str, value)))}" if isinstance(value, dict) else type(value).__name__
        raise UsageError(f"{where}: expected a mapping with exactly username and password_file, got {got}"[:200])
    user = _parse(string, value["username"], f"{where}.username")
    if ":" in user:
        raise UsageError(f"{where}.username: a basic-auth user name cannot contain ':'")
    return user, _parse(readable_file, value["password_file"], f"{where}.password_file")


def _host_port(url: str) -> str:
    """host[:port] of url without its userinfo: a default engine name must not carry a password."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    try:
        return f"{host}:{parts.port}" if parts.port is not None else host
    except ValueError:
        return host


def _engine_from_mapping(item: Any, cfg: Config, where: str) -> EngineConfig:
    if isinstance(item, str):
        item = {"url": item}
    if not isinstance(item, dict) or "url" not in item:
        raise UsageError(f"{where}: expected a mapping with a url")
    item = {setting_key(k, where): v for k, v in item.items()}
    unknown = sorted(set(item) - _ENGINE_KEYS)
    if unknown:
        raise UsageError(one_line(f"{where}: unknown setting(s) {', '.join(map(plain, unknown))}"))
    url = _parse(engine_url, item["url"], f"{where}: url")
    etype = item.get("type", "auto")
    if not isinstance(etype, str) or etype not in ENGINE_TYPES:
        raise UsageError(f"{where}: type: expected one of {', '.join(ENGINE_TYPES)}, got {shown(etype)}")
    token_file = item.get("bearer_token_file")
    if token_file is not None:
        _parse(readable_file, token_file, f"{where}: bearer_token_file")
    ca = item.get("ca_bundle")
    if ca is not None:
        _parse(readable_file, ca, f"{where}: ca_bundle")
    basic = _basic_auth(item["basic_auth"], f"{where}: basic_auth") if item.get("basic_auth") is not None else None
    url_auth = "@" in urlsplit(url).netloc
    if basic and (token_file is not None or url_auth):
        other = "bearer_token_file" if token_file is not None else "user info in the url"
        raise UsageError(f"{where}: basic_auth: give one kind of credentials, not basic_auth and {other}")
    if url_auth and token_file is not None:
        raise UsageError(f"{where}: url: user info in the url and bearer_token_file: give one kind of credentials")
    for key in ("name", "process"):
        if item.get(key) is not None:
            _parse(string, item[key], f"{where}: {key}")
    interval = _parse(interval_seconds, item.get("interval", cfg.engine_interval), f"{where}: interval")
    if "timeout" in item:
        timeout = _parse(timeout_seconds, item["timeout"], f"{where}: timeout")
    elif "engine_timeout" in cfg.explicit:
        timeout = cfg.engine_timeout
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
        tls_verify=_parse(boolean, item.get("tls_verify", True), f"{where}: tls_verify"),
        timeout=timeout,
        interval=interval,
        max_series=_parse(series_budget, item.get("max_series", cfg.engine_max_series), f"{where}: max_series"),
        max_body_bytes=_parse(body_bytes, item.get("max_body_bytes", DEFAULT_MAX_BODY_BYTES), f"{where}: max_body_bytes"),
        follow_redirects=_parse(boolean, item.get("follow_redirects", False), f"{where}: follow_redirects"),
        basic_auth_username=basic[0] if basic else None,
        basic_auth_password_file=basic[1] if basic else None,
        pid=_parse(pid_number, item["pid"], f"{where}: pid") if item.get("pid") is not None else None,
        process=str(item["process"]) if item.get("process") else None,
        probe=_probe(item.get("probe"), f"{where}: probe"),
        gpus=_parse(gpu_list, item["gpus"], f"{where}: gpus") if item.get("gpus") is not None else (),
        capacity_profile=_capacity_profile(item.get("capacity_profile"), f"{where}: capacity_profile"),
    )


def _capacity_profile(value: Any, where: str) -> str | None:
    """The `capacity_profile:` path (read once the whole configuration is known)."""
    if value is None:
        return None
    from exporter.capacity.config import profile_path

    return profile_path(value, where)


def _probe(value: Any, where: str) -> Any:
    """The `probe:` value, parsed by exporter/probe/config.py (imported only when set)."""
    if value is None:
        return None
    from exporter.probe.config import parse_probe

    return parse_probe(value, where)


def _groups(raw: Any, where: str | None) -> dict[str, list[int]]:
    if not isinstance(raw, dict):
        raise UsageError(f"{where}: groups: expected a mapping of name to GPU indexes")
    groups: dict[str, list[int]] = {}
    for name, gpus in raw.items():
        if isinstance(name, bool) or not isinstance(name, (str, int)) or (isinstance(name, int) and name.bit_length() > 64):
            raise UsageError(one_line(f"{where}: groups: expected a group name, got {shown(name)}"))
        if not isinstance(gpus, list) or not gpus or not all(type(g) is int and 0 <= g <= MAX_GPU_INDEX for g in gpus):
            raise UsageError(
                one_line(f"{where}: groups.{plain(str(name))}: expected a non-empty list of GPU indexes 0-{MAX_GPU_INDEX}")
            )
        groups[str(name)] = list(gpus)
    return groups


def _check_thresholds(diag: dict[str, Any], where: str | None) -> None:
    """The `diagnosis:` section checked now, so 10**400 is one line here, not a traceback at build."""
    from exporter.diagnosis.thresholds import Thresholds

    try:
        Thresholds.from_mapping(diag)
    except OverflowError:  # float(10**400) in exporter/diagnosis/thresholds.py: find the key to name
        for key, value in diag.items():
            try:
                Thresholds.from_mapping({key: value})
            except OverflowError:
                raise UsageError(
                    one_line(f"{where}: diagnosis.{plain(str(key))}: expected a number, got {shown(value)}")
                ) from None
            except (ValueError, TypeError):
                continue
        raise UsageError(f"{where}: diagnosis: a number is too large") from None
    except (ValueError, TypeError) as err:
        raise UsageError(
            one_line(f"{where}: {err}" if str(err).startswith("diagnosis") else f"{where}: diagnosis: {err}")
        ) from None


def _check_gpu_source(value: str, where: str) -> None:
    from exporter.gpu import parse_spec

    try:
        parse_spec(value)
    except (ValueError, OverflowError, TypeError) as err:
        raise UsageError(one_line(f"{where}: {err}")) from None
