"""Exporter configuration, assembled: flags > LLM_EXPORTER_* environment > YAML file > defaults.

Why one assembly: a bad value must stop start-up with one clear line naming the
flag (exit status 2), and every setting must be reachable the same three ways
so a Helm chart, a compose file and a person at a shell all work.

Why only the assembly: each component owns its section — its dataclass, flags,
environment names, keys and errors (exporter/engines/config.py, exporter/probe/config.py,
exporter/capacity/config.py, exporter/kubernetes/settings.py, exporter/profile/config.py,
exporter/familyfilter.py),
all parsing values with exporter/values.py — and this module imports them, never the
other way round. It keeps the top-level settings (``SERVE_FLAGS``), ``groups:`` and the
check of ``diagnosis:``; serve hands in the ``sources:`` section (``Section``), which
needs the assembled configuration. docs/configuration.md lists every setting.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from exporter.capacity.config import add_capacity_arguments, apply_capacity_flags, headroom_ratio
from exporter.engines.config import (
    DEFAULT_ENGINE_TIMEOUT_S,
    DEFAULT_MAX_SERIES,
    EngineConfig,
    EngineDefaults,
    add_engine_arguments,
    apply_engine_flags,
    engines_from_list,
    series_budget,
)
from exporter.errors import UsageError
from exporter.familyfilter import FamilyFilter
from exporter.familyfilter import add_arguments as add_family_arguments
from exporter.familyfilter import load as load_families
from exporter.kubernetes.settings import KubernetesConfig
from exporter.kubernetes.settings import add_arguments as add_kubernetes_arguments
from exporter.kubernetes.settings import load as load_kubernetes
from exporter.probe.config import add_probe_arguments, apply_probe_flags
from exporter.profile.config import ProfileConfig, add_profile_arguments, load_profile
from exporter.values import (
    ENV_PREFIX,
    default_timeout,
    interval_seconds,
    one_line,
    parsed,
    plain,
    read_yaml_file,
    setting_key,
    shown,
    split_listen_address,
    string,
    timeout_seconds,
)

if TYPE_CHECKING:
    from exporter.capacity.profile import Profile

DEFAULT_GPU_TIMEOUT_S = 2.0
#: highest GPU index a `groups:` entry may name (NVML numbers the GPUs of one node from 0)
MAX_GPU_INDEX = 1023


@dataclass
class Config:
    listen_address: str = "0.0.0.0:9750"
    gpu_source: str = "auto"
    #: the node's dcgm-exporter /metrics that `auto` reads instead of a profiler of its own (exporter/gpu/dcgm_exporter.py)
    dcgm_exporter_url: str | None = None
    #: the OTLP trace receiver's listen addresses (exporter/tracing); None: that protocol is off
    otlp_grpc_listen_address: str | None = None
    otlp_http_listen_address: str | None = None
    #: --otlp-forward: where received spans go on, with the verdict added (exporter/tracing/forward.py)
    otlp_forward: str | None = None
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
    #: --kubernetes settings (exporter/kubernetes/settings.py); None before load_config
    kubernetes: KubernetesConfig | None = None
    #: source switches (exporter/commands/registry.py, a `Section` of serve): name -> on; a name left out takes its default
    sources: dict[str, bool] = field(default_factory=dict)
    #: --capacity-headroom: share of the knee the recommended ceiling keeps free (exporter/capacity)
    capacity_headroom: float = 0.2
    #: engine name -> its loaded capacity profile (exporter/capacity/profile.py), by load_config
    capacity_profiles: dict[str, Profile] = field(default_factory=dict)
    #: --enable-profile / --profile-dir (exporter/profile/config.py); None before load_config
    profile: ProfileConfig | None = None
    #: --metrics.include / --metrics.exclude: the families /metrics publishes (exporter/familyfilter.py)
    metrics: FamilyFilter = field(default_factory=FamilyFilter)
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


# --------------------------------------------------------------------------- top-level values


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


def otlp_forward_url(value: Any) -> str:
    """An OTLP/HTTP URL (``/v1/traces`` added when it has no path)."""
    from exporter.tracing.forward import parse_forward_url

    return parse_forward_url(string(value))


def dcgm_exporter_url(value: Any) -> str:
    """An http(s) URL of a dcgm-exporter (``/metrics`` added when it has no path)."""
    from exporter.gpu.dcgm_exporter import parse_url

    return parse_url(string(value))


@dataclass(frozen=True)
class Section:
    """A section the assembly loads last, for a caller that knows it: serve's `sources:` switches
    (exporter/commands/registry.py). Why handed in: the section reads the assembled configuration (which
    sources it asks for), so the assembly cannot import it without importing every source back."""

    #: its key in the config file
    key: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    #: (config so far, flags, environment, the file's value of ``key`` or None, the file's name)
    load: Callable[[Config, argparse.Namespace, Mapping[str, str], Any, str | None], None]


# --------------------------------------------------------------------------- flags

#: (flag, dest, parser, help). Every flag can also be set as LLM_EXPORTER_<DEST upper>.
SERVE_FLAGS: list[tuple[str, str, Callable[[Any], Any], str]] = [
    (
        "--listen-address",
        "listen_address",
        lambda v: (split_listen_address(v), v)[1],
        "HOST:PORT to serve on (default 0.0.0.0:9750)",
    ),
    (
        "--gpu-source",
        "gpu_source",
        string,
        "auto, dcgm, dcgm:HOST[:PORT], dcgm-exporter:URL, nvml, none, replay:PATH[,PATH...] or sim:BASE_URL (default auto)",
    ),
    (
        "--otlp-grpc-listen-address",
        "otlp_grpc_listen_address",
        lambda v: (split_listen_address(v), v)[1],
        "HOST:PORT of the OTLP/gRPC trace receiver the engines send their request spans to (off by default; docs/tracing.md)",
    ),
    (
        "--otlp-http-listen-address",
        "otlp_http_listen_address",
        lambda v: (split_listen_address(v), v)[1],
        "HOST:PORT of the OTLP/HTTP trace receiver (POST /v1/traces; off by default; docs/tracing.md)",
    ),
    (
        "--otlp-forward",
        "otlp_forward",
        otlp_forward_url,
        "OTLP/HTTP URL the received spans are re-exported to with the verdict added (llm.bottleneck.*; default: none)",
    ),
    (
        "--dcgm-exporter-url",
        "dcgm_exporter_url",
        dcgm_exporter_url,
        "the node's dcgm-exporter /metrics URL: with --gpu-source auto the GPU is read from it, never from a second profiler (default: none)",
    ),
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


def add_serve_arguments(parser: argparse.ArgumentParser, sections: Sequence[Section] = ()) -> None:
    """Every flag of serve: the top-level ones, each component's, then those of ``sections``
    (which ``load_config`` then loads, last: the parser carries them as ``config_sections``)."""
    parser.add_argument("--config", metavar="FILE", help="YAML config file (env LLM_EXPORTER_CONFIG)")
    for flag, dest, _, help_text in SERVE_FLAGS:
        parser.add_argument(flag, dest=dest, default=None, help=help_text)
    add_engine_arguments(parser)
    add_probe_arguments(parser)
    add_capacity_arguments(parser)
    add_kubernetes_arguments(parser)
    add_profile_arguments(parser)
    add_family_arguments(parser)
    for section in sections:
        section.add_arguments(parser)
    parser.set_defaults(config_sections=tuple(sections))


def _flag_of(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def load_config(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None, sections: Sequence[Section] | None = None
) -> Config:
    """Merge file, environment and flags; raise UsageError naming the bad setting.

    ``sections`` (default: those the parser of ``add_serve_arguments`` was given) load last.
    """
    env: Mapping[str, str] = os.environ if environ is None else environ
    extra: Sequence[Section] = getattr(args, "config_sections", ()) if sections is None else sections
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
            setattr(cfg, dest, parsed(parse, raw[dest], origin[dest]))
    known = (
        {d for _, d, _, _ in SERVE_FLAGS} | {"engines", "groups", "diagnosis", "kubernetes", "metrics"} | {s.key for s in extra}
    )
    unknown = sorted(set(raw) - known)
    if unknown:
        raise UsageError(f"{config_path}: unknown setting(s) {', '.join(unknown)}")
    # 2. environment, 3. flags
    for _, dest, parse, _ in SERVE_FLAGS:
        env_name = ENV_PREFIX + dest.upper()
        if env.get(env_name):
            origin[dest] = env_name
            setattr(cfg, dest, parsed(parse, env[env_name], env_name))
        value = getattr(args, dest, None)
        if value is not None:
            origin[dest] = _flag_of(dest)
            setattr(cfg, dest, parsed(parse, value, _flag_of(dest)))
    cfg.explicit = set(origin)
    cfg.gpu_timeout = _timeout_below(cfg.gpu_timeout, cfg.gpu_interval, DEFAULT_GPU_TIMEOUT_S, origin, "gpu")
    cfg.engine_timeout = _timeout_below(cfg.engine_timeout, cfg.engine_interval, DEFAULT_ENGINE_TIMEOUT_S, origin, "engine")
    # --- engines: the `engines:` list, then --engine / --engine-pid / ... (exporter/engines/config.py)
    defaults = EngineDefaults(
        interval=cfg.engine_interval,
        timeout=cfg.engine_timeout if "engine_timeout" in origin else None,
        max_series=cfg.engine_max_series,
    )
    cfg.engines = engines_from_list(raw.get("engines") or [], defaults, config_path)
    apply_engine_flags(cfg.engines, defaults, args, env)
    # --- probe: --probe / --probe-url / LLM_EXPORTER_PROBE[_URL] for the single engine
    apply_probe_flags(cfg.engines, args, env)
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
    cfg.capacity_profiles = apply_capacity_flags(cfg.engines, cfg.diagnosis, args, env)
    # --- kubernetes: flags, environment and the `kubernetes:` section (exporter/kubernetes/settings.py)
    cfg.kubernetes = load_kubernetes(args, env, raw.get("kubernetes"), config_path)
    # --- on-demand profile: flags and environment (exporter/profile/config.py)
    cfg.profile = load_profile(args, env)
    # --- metric families: --metrics.include / --metrics.exclude and `metrics:` (exporter/familyfilter.py)
    cfg.metrics = load_families(args, env, raw.get("metrics"), config_path)
    # --- the caller's sections (serve: `sources:`), last, as they read the rest
    for section in extra:
        section.load(cfg, args, env, raw.get(section.key), config_path)
    return cfg


def _timeout_below(timeout: float, interval: float, default: float, origin: dict[str, str], kind: str) -> float:
    """A timeout someone set must be below its interval; one nobody set is derived from it."""
    if f"{kind}_timeout" not in origin:
        return default_timeout(interval, default)
    if timeout >= interval:
        where_iv = origin.get(f"{kind}_interval", f"{_flag_of(kind + '_interval')} (default)")
        raise UsageError(f"{origin[kind + '_timeout']}: {timeout:g} s must be less than {where_iv} {interval:g} s")
    return timeout


def _read_yaml(path: str) -> dict[str, Any]:
    try:
        data = read_yaml_file(path) or {}
    except ValueError as err:
        raise UsageError(one_line(f"--config: {err}")) from None
    if not isinstance(data, dict):
        raise UsageError(one_line(f"--config: {plain(path)}: expected a mapping at the top level"))
    return {setting_key(k, path): v for k, v in data.items()}


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
