"""Which pod and container a process runs in, from ``/proc/<pid>/cgroup``.

Why the cgroup: NVML names the processes on a GPU by host PID only, and the
serving process of a discovered pod must be found without per-pod config. The
kubelet puts every container in a cgroup whose path carries the pod's UID and
the container's runtime ID, so one small file per process answers both.

The layouts this parser reads (one line of the file; v1 has one line per
controller, v2 a single ``0::`` line):

- cgroup v2, systemd driver, containerd:
  ``0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_with_underscores>.slice/cri-containerd-<id>.scope``
- cgroup v2, cgroupfs driver: ``0::/kubepods/burstable/pod<uid>/<id>``
- cgroup v1: ``11:memory:/kubepods/besteffort/pod<uid>/<id>`` (any controller line)
- CRI-O: ``crio-<id>.scope`` (systemd) or ``crio-<id>`` (cgroupfs); ``crio-conmon-<id>``
  is the monitor process, not the container, and is not matched
- Docker (dockershim, cri-dockerd): ``docker-<id>.scope`` or the bare ``<id>``
- Guaranteed pods have no QoS level: ``kubepods-pod<uid>.slice``, ``/kubepods/pod<uid>``
- A private cgroup namespace (the default for containers on cgroup v2) shows
  other containers' paths relative to ours: ``0::/../../kubepods-...-pod<uid>.slice/...``;
  the segments are searched wherever they are, so that reads the same.

``proc_root`` is ``/proc`` on a node (``hostPID: true``) and a folder of
``<pid>/cgroup`` files in tests.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

#: longest cgroup file read (a v1 file has ~13 lines of ~200 bytes)
MAX_CGROUP_BYTES = 16 * 1024
#: most PIDs one scan of the proc root looks at (a node has a few thousand)
MAX_SCAN_PIDS = 65536

_POD = re.compile(r"pod([0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{12})(?:\.slice)?$")
_CONTAINER = re.compile(r"^(?:cri-containerd-|crio-|docker-|containerd-)?([0-9a-f]{64})(?:\.scope)?$")


@dataclass(frozen=True, slots=True)
class CgroupIdentity:
    """A process's pod UID (dashed, lower case) and container runtime ID (64 hex, or "" when not in one)."""

    pod_uid: str
    container_id: str


def parse_cgroup(text: str) -> CgroupIdentity | None:
    """The pod and container of one ``/proc/<pid>/cgroup`` text; None outside any pod.

    The v2 line is read first; on v1 the first controller line that names a pod wins
    (every controller shows the same pod on a kubelet-managed node).
    """
    lines = [ln for ln in text.splitlines() if ln.strip()]
    lines.sort(key=lambda ln: not ln.startswith("0::"))
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        found = parse_path(parts[2])
        if found is not None:
            return found
    return None


def parse_path(path: str) -> CgroupIdentity | None:
    """The pod and container a cgroup path names; None when no segment is a pod's."""
    segments = [s for s in path.strip().split("/") if s]
    for i, segment in enumerate(segments):
        match = _POD.search(segment)
        if match is None:
            continue
        uid = match.group(1).replace("_", "-").lower()
        container = ""
        for later in segments[i + 1 :]:
            cmatch = _CONTAINER.match(later)
            if cmatch is not None:
                container = cmatch.group(1)
                break
        return CgroupIdentity(uid, container)
    return None


def read_identity(pid: int, proc_root: str = "/proc") -> CgroupIdentity | None:
    """The pod and container of ``pid``; None when it is gone, unreadable or in no pod."""
    try:
        fd = os.open(os.path.join(proc_root, str(pid), "cgroup"), os.O_RDONLY)
    except OSError:
        return None
    try:
        data = os.read(fd, MAX_CGROUP_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
    return parse_cgroup(data.decode("utf-8", errors="replace"))


def list_pids(proc_root: str = "/proc", limit: int = MAX_SCAN_PIDS) -> list[int]:
    """PIDs under ``proc_root``, lowest first, at most ``limit`` of them."""
    try:
        names = os.listdir(proc_root)
    except OSError:
        return []
    pids = sorted(int(n) for n in names if n.isdigit())
    return pids[:limit]


def read_ppid(pid: int, proc_root: str = "/proc") -> int | None:
    """The parent PID from ``<proc_root>/<pid>/stat`` (field 4, after the command name)."""
    try:
        with open(os.path.join(proc_root, str(pid), "stat"), "rb") as f:
            data = f.read(4096)
        return int(data[data.rfind(b")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def container_root_pid(pod_uid: str, container_id: str, proc_root: str = "/proc") -> int | None:
    """The root process of one container of a pod: the lowest PID in it whose parent is not in it.

    ``container_id`` is the runtime ID from the pod's status (without the
    ``containerd://`` scheme); matching on it keeps the sandbox's pause process
    and sidecars out. One pass over the proc root, so it is called only while
    the process is not known (at start and after it exits).
    """
    members: list[int] = []
    for pid in list_pids(proc_root):
        ident = read_identity(pid, proc_root)
        if ident is not None and ident.pod_uid == pod_uid and ident.container_id == container_id:
            members.append(pid)
    inside = set(members)
    for pid in members:
        if read_ppid(pid, proc_root) not in inside:
            return pid
    return members[0] if members else None


__all__ = ["CgroupIdentity", "container_root_pid", "list_pids", "parse_cgroup", "parse_path", "read_identity", "read_ppid"]
