"""Small helpers for the GPU tests: look points up by name and labels."""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

from exporter.samples import Point, Sample


def value(points: Iterable[Point], metric: str, /, **labels: str) -> float | None:
    """The value of the one point of ``metric`` whose labels include ``labels``; None if absent."""
    found = [p for p in points if p.name == metric and all(p.labels.get(k) == v for k, v in labels.items())]
    assert len(found) <= 1, f"{metric}{labels}: {len(found)} points"
    return found[0].value if found and isinstance(found[0], Sample) else None


def names(points: Iterable[Point], **labels: str) -> set[str]:
    """Metric names present among points carrying ``labels``."""
    return {p.name for p in points if all(p.labels.get(k) == v for k, v in labels.items())}


def reasons(points: Iterable[Point], **labels: str) -> dict[str, float]:
    """reason -> 0/1 of llm_gpu_throttle_reason_active."""
    return {
        p.labels["reason"]: p.value
        for p in points
        if isinstance(p, Sample)
        and p.name == "llm_gpu_throttle_reason_active"
        and all(p.labels.get(k) == v for k, v in labels.items())
    }


PROFILING_METRICS = {
    "llm_gpu_sm_active_ratio",
    "llm_gpu_sm_occupancy_ratio",
    "llm_gpu_tensor_active_ratio",
    "llm_gpu_dram_active_ratio",
}


FAKE_DCGM = Path(__file__).resolve().parent.parent / "fakes" / "dcgm_bindings"
DCGM_MODULES = ("pydcgm", "dcgm_structs", "dcgm_fields")


def copy_fake_dcgm(folder: Path) -> None:
    """Install the fake DCGM bindings into ``folder`` (as if DCGM had just been installed)."""
    for name in DCGM_MODULES:
        shutil.copy(FAKE_DCGM / f"{name}.py", folder / f"{name}.py")
