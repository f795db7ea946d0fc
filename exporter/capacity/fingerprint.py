"""The engine configuration a capacity profile was measured on, and whether the live engine still has it.

Why the settings the exporter publishes and not a hash of the command line: a
capacity figure stops holding when the engine changes what shapes its
throughput (slots, batch and token budgets, the KV-cache type, the model), not
when it moves to another port or log level. The closed vocabulary of
exporter/engines/settings.py is exactly that set, read from what the engine
serves (vLLM config info, llama.cpp ``/props``, SGLang/TGI server info) and, with
a known PID (``--engine-pid``), its command line and environment; the engine
source already publishes it as ``llm_engine_setting`` and
``llm_engine_config_info``. The profile stores the same figures (``ramp`` reads
them from its exporter's ``/metrics``, ``tune`` adds the command line it launched),
so both sides are compared in one vocabulary. Only settings known on both
sides are compared: a setting one side does not know is not a change.

The GPUs are part of it (issue 32): the same flags on another GPU model, or on
another number of GPUs, carry another load. They are the GPUs the exporter
reads (``llm_gpu_info``: its ``name`` labels and how many ``gpu`` labels), the
node's as the measuring exporter saw them; a side that read none does not
compare them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from exporter.engines import settings as es
from exporter.schema import ENGINE_LABELS, spec

SETTING = "llm_engine_setting"
CONFIG_INFO = "llm_engine_config_info"
ENGINE_INFO = "llm_engine_info"
GPU_INFO = "llm_gpu_info"
#: the text settings llm_engine_config_info carries as labels (its labels beside the engine's own)
CONFIG_LABELS: tuple[str, ...] = tuple(lbl for lbl in spec(CONFIG_INFO).labels if lbl not in ENGINE_LABELS)
#: the most settings one fingerprint keeps (the vocabulary is closed; this bounds a garbled file)
MAX_SETTINGS = 64
#: the largest setting a profile may store (token budgets and sizes are far below; a 400-digit one is no setting)
MAX_SETTING = 1e15
#: the most GPUs a fingerprint may say it ran on (a node's; a garbled file says more)
MAX_GPUS = 4096
#: numbers closer than this (relative) are the same setting
_REL_EPS = 1e-9

#: one scrape or snapshot: sample name -> [(labels, value), ...]
Series = Mapping[str, Sequence[tuple[Mapping[str, str], float]]]


@dataclass(frozen=True)
class Fingerprint:
    """What shapes the engine's capacity: its family, model and launch settings (absent: unknown)."""

    engine: str | None = None
    model: str | None = None
    #: setting name -> number or text (exporter/engines/settings.py vocabulary, config-info labels)
    settings: Mapping[str, float | str] = field(default_factory=dict)
    #: the command line the profile's engine was started with, when the measuring tool knew it
    argv: tuple[str, ...] = ()
    #: the GPU model names the exporter read ("NVIDIA H200"; several joined by " + "), and how many GPUs
    gpu_model: str | None = None
    gpu_count: int | None = None

    def known(self) -> bool:
        return bool(self.settings) or self.model is not None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"engine": self.engine, "model": self.model, "settings": dict(sorted(self.settings.items()))}
        if self.argv:
            out["argv"] = list(self.argv)
        if self.gpu_model is not None:
            out["gpu_model"] = self.gpu_model
        if self.gpu_count is not None:
            out["gpu_count"] = self.gpu_count
        return out

    def with_argv(self, argv: Sequence[str], family: str | None = None) -> Fingerprint:
        """This fingerprint with the settings ``argv`` writes out added where it knows none (served values
        win); ``family``: how to read the flags (default: this fingerprint's engine)."""
        found: dict[str, float | str] = dict(self.settings)
        family = family or self.engine
        if family in es.FLAGS:
            parsed = es.from_argv(family, list(argv))
            for name, number in parsed.numbers.items():
                found.setdefault(name, number)
            for name, text in parsed.texts.items():
                found.setdefault(name, text)
        return Fingerprint(self.engine, self.model, found, tuple(argv), self.gpu_model, self.gpu_count)


def from_series(series: Series, server: str | None = None) -> Fingerprint | None:
    """The fingerprint of ``server`` (None: the only engine) in a scrape or snapshot; None when it has none
    or, without ``server``, when several engines are in it (which one was measured cannot be told)."""
    servers = {lb.get("server", "") for name in (SETTING, CONFIG_INFO, ENGINE_INFO) for lb, _ in series.get(name, ())}
    if server is None:
        if len(servers) != 1:
            return None
        (server,) = servers
    mine = {
        name: [(lb, v) for lb, v in series.get(name, ()) if lb.get("server", "") == server]
        for name in (SETTING, CONFIG_INFO, ENGINE_INFO)
    }
    found: dict[str, float | str] = {}
    for labels, value in mine[SETTING]:
        name = labels.get("setting", "")
        if name in es.NUMBER_SETTINGS and math.isfinite(value):
            found[name] = float(value)
    for labels, _ in mine[CONFIG_INFO]:
        for name in CONFIG_LABELS:
            text = labels.get(name, "")
            if text:
                found.setdefault(name, text)
    engine = model = None
    for labels, _ in mine[ENGINE_INFO] or mine[SETTING] or mine[CONFIG_INFO]:
        engine = engine or labels.get("engine") or None
        model = model or labels.get("model") or None
    gpu_model, gpu_count = gpus(series)
    fp = Fingerprint(engine, model, found, (), gpu_model, gpu_count)
    return fp if fp.known() or engine else None


def gpus(series: Series) -> tuple[str | None, int | None]:
    """(the GPU model names, how many GPUs) in ``llm_gpu_info``; (None, None) when it has none."""
    info = series.get(GPU_INFO, ())
    ids = {lb.get("gpu", "") for lb, _ in info}
    names = sorted({lb.get("name", "") for lb, _ in info} - {""})
    if not ids:
        return None, None
    return (" + ".join(names)[:200] or None), len(ids)


def from_snapshot(snap: Any, server: str) -> Fingerprint | None:
    """The live fingerprint of ``server`` in a store snapshot (exporter/store.py)."""
    series = {name: [(p.labels, p.value) for p in snap.samples(name)] for name in (SETTING, CONFIG_INFO, ENGINE_INFO, GPU_INFO)}
    return from_series(series, server)


def parse(raw: Any, where: str) -> Fingerprint | None:
    """A fingerprint as a profile file stores it (``Fingerprint.as_dict``); None when absent; ValueError when garbled."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ValueError(f"fingerprint: expected an object, got {type(raw).__name__}")
    settings_raw = raw.get("settings") or {}
    if not isinstance(settings_raw, Mapping) or len(settings_raw) > MAX_SETTINGS:
        raise ValueError(f"fingerprint.settings: expected an object of at most {MAX_SETTINGS} settings")
    found: dict[str, float | str] = {}
    for name, value in settings_raw.items():
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError(f"fingerprint.settings.{str(name)[:40]}: expected a number or a text")
        if isinstance(value, (int, float)) and not -MAX_SETTING <= value <= MAX_SETTING:  # exact: 10**400 never reaches float()
            raise ValueError(f"fingerprint.settings.{str(name)[:40]}: expected a number within ±{MAX_SETTING:g}")
        found[str(name)] = float(value) if isinstance(value, (int, float)) else value[: es.MAX_VALUE]
    argv_raw = raw.get("argv") or []
    if not isinstance(argv_raw, list) or not all(isinstance(a, str) for a in argv_raw):
        raise ValueError("fingerprint.argv: expected a list of texts")

    def text(key: str) -> str | None:
        v = raw.get(key)
        return v[:200] if isinstance(v, str) and v else None

    count = raw.get("gpu_count")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or not 0 < count <= MAX_GPUS):
        raise ValueError(f"fingerprint.gpu_count: expected a whole number from 1 to {MAX_GPUS}")
    fp = Fingerprint(text("engine"), text("model"), found, (), text("gpu_model"), count)
    return fp.with_argv(argv_raw[: es.MAX_ARGS]) if argv_raw else fp


def _same(a: float | str, b: float | str) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= _REL_EPS * max(1.0, abs(a), abs(b))
    return str(a) == str(b)


def differences(measured: Fingerprint, live: Fingerprint) -> list[str]:
    """What differs between the profile's configuration and the live one ("slots 4 -> 2"); [] when the same."""
    out: list[str] = []
    for key, a, b in (
        ("engine", measured.engine, live.engine),
        ("model", measured.model, live.model),
        ("GPU model", measured.gpu_model, live.gpu_model),
        ("GPUs", measured.gpu_count, live.gpu_count),
    ):
        if a is not None and b is not None and a != b:
            out.append(f"{key} {a} -> {b}")
    for name in sorted(set(measured.settings) & set(live.settings)):
        was, now = measured.settings[name], live.settings[name]
        if not _same(was, now):
            out.append(f"{name} {_show(was)} -> {_show(now)}")
    return out


def comparable(measured: Fingerprint, live: Fingerprint) -> bool:
    """Whether the two share anything to compare (a model or a setting both know)."""
    both_model = measured.model is not None and live.model is not None
    both_gpus = measured.gpu_count is not None and live.gpu_count is not None
    return both_model or both_gpus or bool(set(measured.settings) & set(live.settings))


def _show(v: float | str) -> str:
    return f"{v:g}" if isinstance(v, float) else v


__all__ = ["Fingerprint", "comparable", "differences", "from_series", "from_snapshot", "gpus", "parse"]
