"""An engine's parallel layout (TP x PP x DP, its GPUs) and what one configuration carries per GPU and per user.

Why in the runtime: ``ramp`` and ``tune`` write these figures into their records, ``compare``
prints them, and ``serve`` holds the live per-GPU throughput against a capacity profile's
(exporter/capacity/source.py); one module gives all four the same arithmetic.

* **Layout** — ``tensor_parallel_size``, ``pipeline_parallel_size`` and ``data_parallel_size``
  as the exporter publishes them (``llm_engine_setting``, exporter/engines/settings.py; in a
  record, its ``fingerprint.settings``). A dimension not published counts as 1, every
  engine's default: known when the record holds the command line of an engine that has
  these flags (``tune``: a flag not written is the default), else listed in ``assumed``.
* **GPUs** — tp x pp x dp when any of the three is known (``gpus_from`` ``"layout"``): the
  GPUs the engine says it occupies. Else the GPUs the exporter reads (``llm_gpu_info``, the
  fingerprint's ``gpu_count``: ``"llm_gpu_info"``). Else 1 (``"assumed"``). Why the layout
  first: ``llm_gpu_info`` counts every GPU of the node, so a TP 1 and a TP 4 engine on one
  8-GPU node would both read 8; the count read is kept beside it (``gpus_seen``). Two
  layouts compare only when their GPU counts came from the same place (both ``layout`` or
  both ``llm_gpu_info``): a TP 1 engine whose flags are unknown on an 8-GPU node reads 8,
  and against a TP 4 known from its flags that would be a wrong efficiency, not a low one.
* **Per GPU** — the capacity at SLO (exporter/capacity/atslo.py: the highest concurrency
  whose TTFT/ITL p95 meet the SLO) divided by the GPUs: output tokens/s and requests/s.
* **Per user** — output tokens/s per concurrent client at that concurrency: the step's
  output tokens/s over its concurrency (mean over the repeats that met the SLO).
* **Scaling efficiency** — of two layouts of one model with different GPU counts, the
  larger's per-GPU output tokens/s over the smaller's: 1.0 is linear scaling, 0.62 means
  4x the GPUs gave 2.5x the throughput.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from exporter.capacity.atslo import Capacity
from exporter.engines import settings as es

#: (short name, the llm_engine_setting that publishes it), in the order a layout is written
DIMENSIONS: tuple[tuple[str, str], ...] = (
    ("tp", "tensor_parallel_size"),
    ("pp", "pipeline_parallel_size"),
    ("dp", "data_parallel_size"),
)
#: where a layout's GPU count came from
GPUS_FROM_LAYOUT = "layout"
GPUS_FROM_INFO = "llm_gpu_info"
GPUS_ASSUMED = "assumed"
#: the engine families whose command line can set a layout dimension: with their command line
#: known, a dimension it does not write is the engine's default (1), not unknown
LAYOUT_FAMILIES: frozenset[str] = frozenset(
    family for family, flags in es.FLAGS.items() if any(f.setting in dict(DIMENSIONS).values() for f in flags)
)
#: where the GPU count came from, in words
GPUS_FROM_TEXT: dict[str, str] = {
    GPUS_FROM_LAYOUT: "TP × PP × DP",
    GPUS_FROM_INFO: "llm_gpu_info",
    GPUS_ASSUMED: "assumed",
}
#: the largest dimension or GPU count taken as a measurement (a garbled record says more)
MAX_GPUS = 4096


@dataclass(frozen=True)
class Layout:
    """How one engine spreads over its GPUs."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    gpus: int = 1
    #: ``layout`` (tp x pp x dp), ``llm_gpu_info`` (the GPUs the exporter read) or ``assumed`` (1)
    gpus_from: str = GPUS_ASSUMED
    #: the dimensions the engine did not publish, counted as 1
    assumed: tuple[str, ...] = ("tp", "pp", "dp")
    #: the GPUs the exporter read (``llm_gpu_info``), whatever the count taken; None: none read
    gpus_seen: int | None = None

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """What makes two layouts the same: the three dimensions and the GPU count."""
        return (self.tp, self.pp, self.dp, self.gpus)

    def describe(self) -> str:
        """ "TP 4", "TP 2 x PP 2", "TP 1 x DP 4": TP always, PP and DP where above 1; "4 GPUs" when the
        engine published none of the three (its layout unknown)."""
        if len(self.assumed) == len(DIMENSIONS):
            return gpus_text(self.gpus)
        parts = [f"TP {self.tp}"] + [f"{n.upper()} {v}" for n, v in (("pp", self.pp), ("dp", self.dp)) if v > 1]
        return " × ".join(parts)

    def with_gpus(self) -> str:
        """ "TP 4 (4 GPUs)"; "4 GPUs" when the layout is unknown."""
        if len(self.assumed) == len(DIMENSIONS):
            return gpus_text(self.gpus)
        return f"{self.describe()} ({gpus_text(self.gpus)})"

    def as_dict(self) -> dict[str, Any]:
        return {
            "tp": self.tp,
            "pp": self.pp,
            "dp": self.dp,
            "gpus": self.gpus,
            "gpus_from": self.gpus_from,
            "gpus_seen": self.gpus_seen,
            "assumed": list(self.assumed),
        }


def gpus_text(n: int) -> str:
    return f"{n} GPU" + ("" if n == 1 else "s")


def ratio(numerator: float, denominator: float) -> float | None:
    """``numerator / denominator``, None where the denominator is 0 or the quotient not finite (the rule of
    exporter/diagnosis/finite.py, not imported: the tools read this module without the diagnosis)."""
    if denominator == 0 or not math.isfinite(denominator):
        return None
    value = numerator / denominator
    return value if math.isfinite(value) else None


def _whole(value: Any) -> int | None:
    """A layout dimension or GPU count: a whole number from 1 to MAX_GPUS (anything else is not one)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    if value != int(value) or not 1 <= value <= MAX_GPUS:
        return None
    return int(value)


def layout_from(settings: Mapping[str, Any], gpus_seen: Any = None, defaults_known: bool = False) -> Layout:
    """The layout that ``settings`` (setting name -> value) and the GPUs read (``llm_gpu_info``) describe;
    ``defaults_known``: a dimension not in ``settings`` is the engine's default 1 (its command line is known)."""
    dims: dict[str, int] = {}
    assumed: list[str] = []
    for short, setting in DIMENSIONS:
        value = _whole(settings.get(setting))
        if value is None and not defaults_known:
            assumed.append(short)
        dims[short] = value or 1
    seen = _whole(gpus_seen)
    if len(assumed) < len(DIMENSIONS):
        gpus, source = dims["tp"] * dims["pp"] * dims["dp"], GPUS_FROM_LAYOUT
    elif seen is not None:
        gpus, source = seen, GPUS_FROM_INFO
    else:
        gpus, source = 1, GPUS_ASSUMED
    return Layout(dims["tp"], dims["pp"], dims["dp"], gpus, source, tuple(assumed), seen)


def parse_layout(raw: Any) -> Layout | None:
    """A record's ``layout`` object back (``Layout.as_dict``); None when absent or not one."""
    if not isinstance(raw, Mapping):
        return None
    tp, pp, dp, gpus = (_whole(raw.get(k)) for k in ("tp", "pp", "dp", "gpus"))
    if tp is None or pp is None or dp is None or gpus is None:
        return None
    listed = raw.get("assumed")
    assumed = tuple(d for d, _ in DIMENSIONS if isinstance(listed, list) and d in listed)
    source = raw.get("gpus_from")
    return Layout(tp, pp, dp, gpus, source if source in GPUS_FROM_TEXT else GPUS_ASSUMED, assumed, _whole(raw.get("gpus_seen")))


def layout_of_fingerprint(fingerprint: Any) -> Layout:
    """The layout of a record's ``fingerprint`` (exporter/capacity/fingerprint.py ``as_dict``, or a
    ``Fingerprint``); every dimension assumed when it is absent or not one."""
    if fingerprint is None:
        return layout_from({})
    if isinstance(fingerprint, Mapping):
        settings, seen = fingerprint.get("settings"), fingerprint.get("gpu_count")
        engine, argv = fingerprint.get("engine"), fingerprint.get("argv")
    else:
        settings, seen = getattr(fingerprint, "settings", None), getattr(fingerprint, "gpu_count", None)
        engine, argv = getattr(fingerprint, "engine", None), getattr(fingerprint, "argv", None)
    found: dict[str, Any] = dict(settings) if isinstance(settings, Mapping) else {}
    words = [a for a in argv if isinstance(a, str)] if isinstance(argv, (list, tuple)) else []
    defaults_known = bool(words) and len(words) == len(argv or ()) and isinstance(engine, str) and engine in LAYOUT_FAMILIES
    if defaults_known:  # what the command line writes, where nothing was published
        for name, value in es.from_argv(str(engine), words).numbers.items():
            found.setdefault(name, value)
    return layout_from(found, seen, defaults_known)


def per_user(caps: Iterable[Capacity]) -> float | None:
    """Output tokens/s per concurrent client at the capacity's concurrency, mean over the repeats
    that met the SLO (None: none did)."""
    each = [c.tokens_per_second / c.concurrency for c in caps if c.concurrency >= 1]
    return sum(each) / len(each) if each else None


@dataclass(frozen=True)
class Scaled:
    """One configuration's capacity at SLO against its layout."""

    layout: Layout
    #: the capacity at SLO (mean over the repeats): output tokens/s and requests/s
    tokens_per_second: float
    requests_per_second: float
    #: output tokens/s per concurrent client at that concurrency (None: no repeat met the SLO)
    per_user: float | None = None
    #: the model served (None: unknown; two known and different models do not compare)
    model: str | None = None

    @property
    def tokens_per_gpu(self) -> float:
        return self.tokens_per_second / self.layout.gpus

    @property
    def requests_per_gpu(self) -> float:
        return self.requests_per_second / self.layout.gpus

    def per_gpu(self) -> dict[str, float]:
        return {
            "output_tokens_per_second_at_slo": self.tokens_per_gpu,
            "requests_per_second_at_slo": self.requests_per_gpu,
        }

    def fields(self) -> dict[str, Any]:
        """The record fields of one configuration: ``layout``, ``per_gpu``, ``per_user_output_tokens_per_second``."""
        return {"layout": self.layout.as_dict(), "per_gpu": self.per_gpu(), "per_user_output_tokens_per_second": self.per_user}


def scaled(caps: list[Capacity], mean: Capacity, fingerprint: Any) -> Scaled:
    """A configuration from its repeats' capacities (``caps``), their mean and its fingerprint."""
    model = fingerprint.get("model") if isinstance(fingerprint, Mapping) else getattr(fingerprint, "model", None)
    return Scaled(
        layout_of_fingerprint(fingerprint),
        mean.tokens_per_second,
        mean.requests_per_second,
        per_user(caps),
        model if isinstance(model, str) and model else None,
    )


def comparable(a: Scaled, b: Scaled) -> bool:
    """Two layouts of one model (a model unknown on either side does not differ) with different GPU
    counts taken from the same place (``layout`` or ``llm_gpu_info``, never ``assumed``)."""
    same_model = a.model is None or b.model is None or a.model == b.model
    same_source = a.layout.gpus_from == b.layout.gpus_from != GPUS_ASSUMED
    return same_model and same_source and a.layout.gpus != b.layout.gpus


def efficiency(one: Scaled, other: Scaled, other_name: str) -> dict[str, Any] | None:
    """``one``'s scaling efficiency against ``other`` when ``one`` is the larger of two comparable
    layouts and ``other`` carried anything at its SLO; None otherwise."""
    if not comparable(one, other) or one.layout.gpus < other.layout.gpus or other.tokens_per_gpu <= 0:
        return None
    value = ratio(one.tokens_per_gpu, other.tokens_per_gpu)
    if value is None:
        return None
    gpu_ratio = one.layout.gpus / other.layout.gpus
    throughput = value * gpu_ratio
    requests = ratio(one.requests_per_gpu, other.requests_per_gpu) if other.requests_per_gpu > 0 else None
    return {
        "ratio": value,
        "requests_ratio": requests,
        "throughput_ratio": throughput,
        "gpu_ratio": gpu_ratio,
        "against": {"name": other_name, "layout": other.layout.as_dict(), "per_gpu": other.per_gpu()},
        "text": sentence(one.layout, other.layout, value, throughput, gpu_ratio),
    }


def sentence(larger: Layout, smaller: Layout, value: float, throughput: float, gpu_ratio: float) -> str:
    """ "TP 4 (4 GPUs) gives 0.62 of TP 1's per-GPU throughput: 2.5x the throughput for 4x the GPUs"."""
    return (
        f"{larger.with_gpus()} gives {value:.2f} of {smaller.describe()}'s per-GPU throughput: "
        f"{throughput:.1f}x the throughput for {round(gpu_ratio, 2):g}x the GPUs"
    )


def smallest_against(configs: list[tuple[str, Scaled | None]]) -> dict[str, dict[str, Any]]:
    """name -> its scaling efficiency, for every configuration with a comparable smaller one measured:
    against the one with the fewest GPUs (the first such, in the order given)."""
    out: dict[str, dict[str, Any]] = {}
    for name, one in configs:
        if one is None:
            continue
        smaller = [(n, o) for n, o in configs if o is not None and n != name and o.layout.gpus < one.layout.gpus]
        smaller = [(n, o) for n, o in smaller if comparable(one, o) and o.tokens_per_gpu > 0]
        if not smaller:
            continue
        least = min(o.layout.gpus for _, o in smaller)
        other_name, other = next((n, o) for n, o in smaller if o.layout.gpus == least)
        found = efficiency(one, other, other_name)
        if found is not None:
            out[name] = found
    return out


__all__ = [
    "DIMENSIONS",
    "GPUS_ASSUMED",
    "GPUS_FROM_INFO",
    "GPUS_FROM_LAYOUT",
    "GPUS_FROM_TEXT",
    "LAYOUT_FAMILIES",
    "Layout",
    "Scaled",
    "comparable",
    "efficiency",
    "gpus_text",
    "layout_from",
    "layout_of_fingerprint",
    "parse_layout",
    "per_user",
    "scaled",
    "sentence",
    "smallest_against",
]
