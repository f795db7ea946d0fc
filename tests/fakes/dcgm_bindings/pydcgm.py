"""Fake DCGM bindings (tests only): the slice of ``pydcgm`` DcgmSource talks to.

State lives in :data:`STATE` so a test can program GPUs, field values and
faults: ``values`` {gpu_id: {field_id: value}} (a DCGM blank sentinel stays as
is and is flagged ``isBlank`` like the real bindings do), ``profiling``
(False makes watching profiling fields fail with PROFILING_NOT_SUPPORTED),
``refuse_connect`` (a DCGM status raised by DcgmHandle), ``drop`` (GetLatest
raises CONNECTION_NOT_VALID), and records ``connects``, ``hosts``,
``watches`` and ``live_groups``.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import dcgm_structs

STATE: dict[str, Any] = {}


def reset(values: dict[int, dict[int, Any]]) -> None:
    STATE.clear()
    STATE.update(
        values=values, profiling=True, refuse_connect=None, drop=False, connects=0, hosts=[], watches=[], live_groups=set()
    )


def _blank(value: Any) -> bool:
    if isinstance(value, float):
        return value >= 140737488355328.0
    if isinstance(value, int):
        return value >= 0x7FFFFFFFFFFFFFF0
    return isinstance(value, str) and value.startswith("<<<")


class DcgmFieldGroup:
    def __init__(self, dcgmHandle: Any, name: str = "", fieldIds: list[int] | None = None, fieldGroupId: Any = None) -> None:
        self.name = name
        self.fieldIds = list(fieldIds or [])
        STATE["live_groups"].add(name)

    def Delete(self) -> None:
        STATE["live_groups"].discard(self.name)


class _Samples:
    def __init__(self, group: _Group) -> None:
        self._group = group

    def WatchFields(self, fieldGroup: DcgmFieldGroup, updateFreq: int, maxKeepAge: float, maxKeepSamples: int) -> None:
        if not STATE["profiling"] and any(1001 <= f <= 1100 for f in fieldGroup.fieldIds):
            raise dcgm_structs.DCGMError(dcgm_structs.DCGM_ST_PROFILING_NOT_SUPPORTED)
        STATE["watches"].append((tuple(fieldGroup.fieldIds), updateFreq))

    def UnwatchFields(self, fieldGroup: DcgmFieldGroup) -> None:
        pass

    def GetLatest(self, fieldGroup: DcgmFieldGroup) -> Any:
        if STATE["drop"]:
            raise dcgm_structs.DCGMError(dcgm_structs.DCGM_ST_CONNECTION_NOT_VALID)
        values: dict[int, dict[int, list[Any]]] = {}
        for gpu in self._group.gpu_ids:
            fields = STATE["values"].get(gpu, {})
            values[gpu] = {
                f: [SimpleNamespace(value=fields[f], isBlank=_blank(fields[f]), ts=1)] for f in fieldGroup.fieldIds if f in fields
            }
        return SimpleNamespace(values=values)


class _Group:
    def __init__(self, name: str, gpu_ids: list[int]) -> None:
        self.name = name
        self.gpu_ids = list(gpu_ids)
        self.samples = _Samples(self)
        STATE["live_groups"].add(name)

    def Delete(self) -> None:
        STATE["live_groups"].discard(self.name)


class _System:
    def __init__(self) -> None:
        self.discovery = SimpleNamespace(GetAllSupportedGpuIds=lambda: sorted(STATE["values"]))

    def GetGroupWithGpuIds(self, groupName: str, gpuIds: list[int]) -> _Group:
        return _Group(groupName, gpuIds)


class DcgmHandle:
    def __init__(self, handle: Any = None, ipAddress: str | None = None, opMode: int = 1, **_: Any) -> None:
        if STATE["refuse_connect"] is not None:
            raise dcgm_structs.DCGMError(STATE["refuse_connect"])
        STATE["connects"] += 1
        STATE["hosts"].append(ipAddress)

    def GetSystem(self) -> _System:
        return _System()

    def UpdateAllFields(self, waitForUpdate: bool) -> None:
        pass

    def Shutdown(self) -> None:
        pass


# freshly "installed" DCGM sees one GPU until a test programs another set
reset({0: {50: "NVIDIA H200", 54: "GPU-fake-0", 203: 50, 1002: 0.5}})
