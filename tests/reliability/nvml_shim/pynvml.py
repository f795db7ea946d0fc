"""Test shim: ``import pynvml`` in a ``serve`` subprocess yields tests/fakes/pynvml_fake.py's fake.

Put this directory first on PYTHONPATH and set ``FAKE_NVML`` to JSON::

    {"gpus": 4, "control": "/tmp/.../nvml-faults.json"}

``gpus`` fake H200s are created. ``control`` names the fault schedule: a JSON
file the test rewrites while the exporter runs, re-read at most every 50 ms::

    {"lost": [1], "driver_gone": false}

``lost`` GPUs raise ``NVMLError_GpuIsLost`` (a GPU leaving the list is
recovered as after a reset: old handles stay stale until re-opened);
``driver_gone`` makes every call raise ``NVMLError_DriverNotLoaded`` and
``nvmlInit`` raise ``NVMLError_LibraryNotFound`` (the driver unloaded mid-run).

How: the real nvidia-ml-py is imported first (the fake takes its constants,
structs and error classes from it), then ``sys.modules["pynvml"]`` is replaced
by the fake's instance, which is what ``import pynvml`` hands back.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

_HERE = Path(__file__).resolve().parent
_FAKE = _HERE.parents[1] / "fakes" / "pynvml_fake.py"

# 1. the real module, with this directory hidden from the import system
_self = sys.modules.pop(__name__)
_saved = list(sys.path)
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
try:
    import pynvml as _real  # noqa: F401 - registers the real module for the fake to import
finally:
    sys.path[:] = _saved

# 2. the fake, importing the real module through sys.modules
_spec = importlib.util.spec_from_file_location("pynvml_fake", _FAKE)
assert _spec and _spec.loader
_fake = importlib.util.module_from_spec(_spec)
sys.modules["pynvml_fake"] = _fake
_spec.loader.exec_module(_fake)

if TYPE_CHECKING:  # the class the loader above just built, as a type checker can see it
    from tests.fakes.pynvml_fake import FakeNvml as _FakeNvml
else:
    _FakeNvml = _fake.FakeNvml


class ScheduledNvml(_FakeNvml):
    """FakeNvml whose faults follow a control file the test rewrites."""

    def __init__(self, gpus: int, control: str | None) -> None:
        super().__init__([_fake.FakeGpu(uuid=f"GPU-fake-{i:04d}") for i in range(gpus)])
        self._control = Path(control) if control else None
        self._checked = 0.0
        self._mtime: int | None = None
        self._driver_gone = False

    def _apply(self) -> None:
        now = time.monotonic()
        if self._control is None or now - self._checked < 0.05:
            return
        self._checked = now
        try:
            mtime = self._control.stat().st_mtime_ns
            if mtime == self._mtime:
                return
            state = json.loads(self._control.read_text() or "{}")
            self._mtime = mtime
        except (OSError, ValueError):
            return  # half-written or absent: keep the last state
        lost = {int(i) for i in state.get("lost", [])}
        for index, gpu in enumerate(self.gpus):
            if index in lost and not gpu.lost:
                gpu.lost = True
            elif index not in lost and gpu.lost:
                self.recover(index)
        self._driver_gone = bool(state.get("driver_gone", False))
        self.library_missing = self._driver_gone

    def _count(self, name: str) -> None:
        self._apply()
        if self._driver_gone:
            self.calls[name] += 1
            raise _fake._err("NVMLError_DriverNotLoaded")
        super()._count(name)

    def nvmlInit(self) -> None:
        self._apply()
        super().nvmlInit()


_config = json.loads(os.environ.get("FAKE_NVML", "{}"))
sys.modules[__name__] = ScheduledNvml(int(_config.get("gpus", 1)), _config.get("control"))  # type: ignore[assignment]
del _self
