"""The source registry: every source ``serve`` can build, by name, with its default and its needs.

Why next to exporter/commands/serve.py: it is the wiring of serve — its factories import
every source's package — so nothing below the command imports it; exporter/config.py
gets its ``sources:`` section handed in (``CONFIG_SECTION``), never imports it.

Why one table: ``--source.NAME`` / ``--no-source.NAME`` (node_exporter's style),
``LLM_EXPORTER_SOURCE_<NAME>`` and the config file's ``sources: {NAME: bool}``
all switch entries of it, ``serve --help`` lists it, and
``exporter/commands/serve.py``'s ``build_sources`` walks it. A source that is
on is built when its configuration asks for it (``gpu`` unless ``--gpu-source
none``, ``engine`` when engines are given, ...); a source that is off is never
constructed, whatever the configuration says: no thread, no NVML or kubelet
call, no connection.

A source that needs another (``probe`` waits for the engine's own scrape of the
same window) is a usage error when that other one is off and the first is both
on and asked for: one line, exit status 2, naming both switches.

Factories import their package only when they run, so the registry costs
nothing to import (serve's parser reads it for the flags, and hands
``CONFIG_SECTION`` to exporter/config.py's ``load_config``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from exporter.config import Section
from exporter.errors import UsageError
from exporter.values import boolean

if TYPE_CHECKING:
    from fastapi import APIRouter

    from exporter.config import Config
    from exporter.diagnosis import DiagnosisBundle, DiagnosisSettings
    from exporter.runner import BringsItsLoop
    from exporter.sources import Source
    from exporter.store import SnapshotStore


class Listener(Protocol):
    """A server a source brings (the OTLP receiver): ``start`` binds (OSError naming the address)."""

    def start(self) -> None: ...

    def stop(self, grace: float = 2.0) -> None: ...


ENV_PREFIX = "LLM_EXPORTER_SOURCE_"
#: the config file's section
SECTION = "sources"


@dataclass
class Build:
    """What the factories fill in, in table order."""

    config: Config
    store: SnapshotStore
    #: measured sources, in start order
    sources: list[Source] = field(default_factory=list)
    #: the derive stage (exporter/derive.py: reads the store), appended after every measured source
    derived: list[Source | BringsItsLoop] = field(default_factory=list)
    #: FastAPI routers the sources contribute (/diagnosis, /)
    routers: list[APIRouter] = field(default_factory=list)
    #: servers of their own (the OTLP receiver): started by serve once its socket is bound, stopped first
    listeners: list[Listener] = field(default_factory=list)
    #: the diagnosis's bundle, for the sources that read its verdicts (tracing)
    diagnosis: DiagnosisBundle | None = None


@dataclass(frozen=True)
class SourceEntry:
    """One switchable source: how to build it, when the configuration asks for it, what it needs."""

    name: str
    help: str
    build: Callable[[Build], None]
    #: the configuration asks for it (engines given, --kubernetes set, ...)
    wanted: Callable[[Config], bool]
    default: bool = True
    #: other entries this one needs while it is on and wanted (may depend on the configuration)
    needs: Callable[[Config], tuple[str, ...]] = lambda _config: ()

    @property
    def flag(self) -> str:
        return f"--source.{self.name}"

    @property
    def dest(self) -> str:
        return f"source_{self.name}"

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()


# --------------------------------------------------------------------------- factories


def diagnosis_settings(config: Config) -> DiagnosisSettings:
    """What the diagnosis reads of the configuration (exporter/diagnosis: ``DiagnosisSettings``)."""
    from exporter.diagnosis import DiagnosisSettings

    return DiagnosisSettings(
        thresholds=config.diagnosis,
        interval=config.effective_diagnosis_interval,
        groups=config.groups,
        parallel_group=config.parallel_group,
        gpu_interval=config.gpu_interval if config.gpu_source != "none" else None,
        process_interval=config.process_interval,
    )


def _build_diagnosis(b: Build) -> None:
    from exporter.capacity import build_capacity_steps
    from exporter.diagnosis import build_diagnosis

    c = b.config
    try:  # first in the table: a bad `diagnosis:` section stops start-up before any GPU probe
        # the measured capacity at SLO of engines with a profile (exporter/capacity, docs/capacity.md)
        capacity = build_capacity_steps(c.capacity_profiles, c.engines, c.capacity_headroom)
        bundle = build_diagnosis(diagnosis_settings(c), c.engines, b.store, capacity_steps=capacity)
    except ValueError as err:
        raise UsageError(str(err)) from None
    b.derived.extend(bundle.sources)
    b.routers.append(bundle.router)
    b.diagnosis = bundle


def _build_gpu(b: Build) -> None:
    from exporter.gpu import build_gpu_source

    c = b.config
    # dcgm-exporter's pod labels become llm_gpu_pod_info unless the kubelet's attribution runs
    gpu = build_gpu_source(
        c.gpu_source, c.gpu_interval, c.gpu_timeout, dcgm_exporter_url=c.dcgm_exporter_url, pod_info=not _kubernetes_on(c)
    )
    if gpu is not None:
        b.sources.append(gpu)


def _build_engine(b: Build) -> None:
    from exporter.engines.source import EngineSource

    b.sources.extend(EngineSource(e) for e in b.config.engines)


def _build_process(b: Build) -> None:
    from exporter.process import build_process_sources

    b.sources.extend(build_process_sources(b.config.engines, b.config.process_interval))


def _build_probe(b: Build) -> None:
    """One canary source per probed engine (exporter/probe, docs/probe.md)."""
    from exporter.probe import build_probe_sources

    b.sources.extend(build_probe_sources(b.config.engines, b.store))


def _build_tracing(b: Build) -> None:
    """The OTLP trace receiver, ``GET /requests`` and the request history (exporter/tracing, docs/tracing.md)."""
    from exporter.tracing.build import build_tracing
    from exporter.webconfig import load_web_config

    c = b.config
    web_config = load_web_config(c.web_config_file) if c.web_config_file else None  # checked by serve already
    diagnosis = b.diagnosis
    try:
        bundle = build_tracing(
            c.otlp_grpc_listen_address,
            c.otlp_http_listen_address,
            c.engines,
            (lambda: diagnosis.engine.latest.engines) if diagnosis is not None else dict,
            web_config,
            c.effective_diagnosis_interval,
            c.otlp_forward,
        )
    except ValueError as err:
        raise UsageError(f"tracing: {err}") from None
    if diagnosis is not None:  # after the verdict, in the same pass (exporter/tracing/history.py)
        diagnosis.sources[0].steps.append(bundle.history_step)
    b.sources.append(bundle.source)
    b.routers.append(bundle.router)
    b.listeners.append(bundle)


def _tracing_on(config: Config) -> bool:
    return bool(config.otlp_grpc_listen_address or config.otlp_http_listen_address)


def _build_kubernetes(b: Build) -> None:
    """GPU -> pod attribution and serving-pod discovery (exporter/kubernetes, docs/kubernetes.md);
    wraps the GPU source already built, so it comes after ``gpu`` in the table."""
    from exporter.kubernetes import build_kubernetes_sources

    c = b.config
    b.sources = build_kubernetes_sources(
        c.kubernetes,
        b.sources,
        engine_interval=c.engine_interval,
        engine_timeout=c.engine_timeout,
        engine_max_series=c.engine_max_series,
        process_interval=c.process_interval,
    )


def _kubernetes_on(config: Config) -> bool:
    return config.kubernetes is not None and config.kubernetes.enabled


def _kubernetes_needs(config: Config) -> tuple[str, ...]:
    """Discovery adds engine (and process) sources of its own while serving."""
    k = config.kubernetes
    if k is None or not k.discovers:
        return ()
    return ("engine", "process") if k.process_sampler else ("engine",)


#: name -> entry, in build order (diagnosis first: its section is validated before anything is probed)
SOURCES: dict[str, SourceEntry] = {
    e.name: e
    for e in (
        SourceEntry(
            "diagnosis",
            "parallel-layer, capacity and verdict sources; /diagnosis and /",
            _build_diagnosis,
            wanted=lambda _c: True,
        ),
        SourceEntry("gpu", "the GPU source --gpu-source names", _build_gpu, wanted=lambda c: c.gpu_source != "none"),
        SourceEntry("engine", "a scraper per engine (--engine, engines:)", _build_engine, wanted=lambda c: bool(c.engines)),
        SourceEntry(
            "process",
            "per-thread CPU of the engines with pid or process set",
            _build_process,
            wanted=lambda c: any(e.pid or e.process for e in c.engines),
        ),
        SourceEntry(
            "probe",
            "the canary of the engines with probe: set; needs engine",
            _build_probe,
            wanted=lambda c: any(getattr(e, "probe", None) is not None for e in c.engines),
            needs=lambda _c: ("engine",),
        ),
        SourceEntry(
            "tracing",
            "the OTLP trace receiver (--otlp-*-listen-address) and GET /requests",
            _build_tracing,
            wanted=_tracing_on,
        ),
        SourceEntry(
            "kubernetes",
            "--kubernetes: GPU -> pod attribution and pod discovery; discovery needs "
            "engine (and process, with the process sampler)",
            _build_kubernetes,
            wanted=_kubernetes_on,
            needs=_kubernetes_needs,
        ),
    )
}


def enabled(config: Config, name: str) -> bool:
    """Whether the switch of ``name`` is on (a Config built without load_config: the defaults)."""
    return bool(config.sources.get(name, SOURCES[name].default))


def build(config: Config, store: SnapshotStore) -> Build:
    """Run the factory of every source that is on and asked for, in table order."""
    b = Build(config, store)
    for entry in SOURCES.values():
        if enabled(config, entry.name) and entry.wanted(config):
            entry.build(b)
    return b


# --------------------------------------------------------------------------- flags, environment, file


def _on_off(on: bool) -> str:
    return "on" if on else "off"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--source.NAME`` / ``--no-source.NAME`` for every entry, in a group of their own."""
    group = parser.add_argument_group(
        "sources",
        f"on: built when its settings ask for it; off: never built. Also\n"
        f"{ENV_PREFIX}<NAME>=true|false or the config file's `{SECTION}: {{NAME: false}}`",
    )
    for e in SOURCES.values():
        group.add_argument(
            e.flag,
            dest=e.dest,
            action=argparse.BooleanOptionalAction,
            default=None,
            help=f"{e.help} (default {_on_off(e.default)})",
        )


def load(args: argparse.Namespace, env: Mapping[str, str], raw: Any, where: str | None) -> tuple[dict[str, bool], dict[str, str]]:
    """(name -> on, name -> where a non-default came from); flags > environment > file > default."""
    switches = {name: e.default for name, e in SOURCES.items()}
    origin: dict[str, str] = {}
    if raw is not None:
        if not isinstance(raw, dict):
            raise UsageError(f"{where}: {SECTION}: expected a mapping of source name to true or false")
        unknown = sorted(str(k) for k in raw if k not in SOURCES)
        if unknown:
            raise UsageError(f"{where}: {SECTION}: unknown source(s) {', '.join(unknown)} (known: {', '.join(SOURCES)})")
        for name, value in raw.items():
            switches[name] = _bool(boolean, value, f"{where}: {SECTION}.{name}")
            origin[name] = f"{where}: {SECTION}.{name}"
    for name, e in SOURCES.items():
        if env.get(e.env):
            switches[name] = _bool(boolean, env[e.env], e.env)
            origin[name] = f"{e.env}={env[e.env]}"
        value = getattr(args, e.dest, None)
        if value is not None:
            switches[name] = bool(value)
            origin[name] = e.flag if value else f"--no-source.{name}"
    return switches, origin


def _bool(parse: Callable[[Any], bool], value: Any, where: str) -> bool:
    try:
        return parse(value)
    except ValueError as err:
        raise UsageError(f"{where}: {err}") from None


def check(config: Config, origin: Mapping[str, str]) -> None:
    """A source that is on and asked for, needing one that is off: one line naming both switches."""
    for e in SOURCES.values():
        if not (enabled(config, e.name) and e.wanted(config)):
            continue
        for need in e.needs(config):
            if not enabled(config, need):
                off = origin.get(need, f"--no-source.{need} (default)")
                raise UsageError(
                    f"source {e.name} needs source {need}, which {off} turns off: "
                    f"turn {e.name} off too (--no-source.{e.name}) or {need} on"
                )


def load_section(config: Config, args: argparse.Namespace, env: Mapping[str, str], raw: Any, where: str | None) -> None:
    """The switches from flags, environment and the file, then every need checked (the rest is loaded)."""
    config.sources, origin = load(args, env, raw, where)
    check(config, origin)


#: the `sources:` section serve hands exporter/config.py's load_config (exporter/commands/serve.py)
CONFIG_SECTION = Section(SECTION, add_arguments, load_section)


__all__ = [
    "CONFIG_SECTION",
    "SOURCES",
    "Build",
    "SourceEntry",
    "add_arguments",
    "build",
    "check",
    "diagnosis_settings",
    "enabled",
    "load",
]
