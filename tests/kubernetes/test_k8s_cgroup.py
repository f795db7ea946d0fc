"""/proc/<pid>/cgroup -> pod UID and container ID, for every layout a kubelet writes."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from exporter.kubernetes.cgroup import (
    CgroupIdentity,
    container_root_pid,
    list_pids,
    parse_cgroup,
    read_identity,
    read_ppid,
)
from tests.support.k8s import FIXTURES, LLAMA, write_proc

CONTAINER = hashlib.sha256((LLAMA + "vllm").encode()).hexdigest()  # how the fixtures were made


@pytest.mark.parametrize(
    "name",
    [
        "v2-systemd-containerd",
        "v2-cgroupfs-containerd",
        "v2-namespaced",
        "v2-guaranteed-crio",
        "v1-cgroupfs-docker",
        "v1-systemd-docker",
    ],
)
def test_every_kubelet_layout_names_the_pod_and_container(name: str) -> None:
    text = (FIXTURES / "cgroup" / f"{name}.txt").read_text()
    assert parse_cgroup(text) == CgroupIdentity(LLAMA, CONTAINER)


def test_conmon_is_in_the_pod_but_in_no_container() -> None:
    text = (FIXTURES / "cgroup" / "v2-crio-conmon.txt").read_text()
    assert parse_cgroup(text) == CgroupIdentity(LLAMA, "")


@pytest.mark.parametrize("name", ["host-process", "host-user-session"])
def test_host_processes_are_in_no_pod(name: str) -> None:
    assert parse_cgroup((FIXTURES / "cgroup" / f"{name}.txt").read_text()) is None


def test_garbage_is_no_pod() -> None:
    assert parse_cgroup("") is None
    assert parse_cgroup("not a cgroup file\n\x00\x01") is None
    assert parse_cgroup("0::/kubepods/burstable/podnot-a-uid/abc\n") is None


def test_read_identity_from_a_proc_root(tmp_path: Path) -> None:
    write_proc(tmp_path, 1234, (FIXTURES / "cgroup" / "v2-systemd-containerd.txt").read_text())
    assert read_identity(1234, str(tmp_path)) == CgroupIdentity(LLAMA, CONTAINER)
    assert read_identity(999, str(tmp_path)) is None  # gone
    assert read_ppid(1234, str(tmp_path)) == 1


def test_the_container_root_is_the_process_whose_parent_is_outside(tmp_path: Path) -> None:
    line = (FIXTURES / "cgroup" / "v2-systemd-containerd.txt").read_text()
    pause = f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{LLAMA.replace('-', '_')}.slice/cri-containerd-{'e' * 64}.scope\n"
    write_proc(tmp_path, 90, pause, ppid=80, comm="pause")  # the sandbox: another container ID
    write_proc(tmp_path, 100, line, ppid=95, comm="vllm serve")  # parent: containerd-shim, outside
    write_proc(tmp_path, 101, line, ppid=100)
    write_proc(tmp_path, 99, line, ppid=100)  # a lower PID (PID reuse) whose parent is inside
    write_proc(tmp_path, 200, "0::/system.slice/kubelet.service\n")
    (tmp_path / "self").mkdir()  # non-numeric entries are ignored
    assert list_pids(str(tmp_path)) == [90, 99, 100, 101, 200]
    assert container_root_pid(LLAMA, CONTAINER, str(tmp_path)) == 100
    assert container_root_pid(LLAMA, "f" * 64, str(tmp_path)) is None
    assert container_root_pid("00000000-0000-0000-0000-000000000000", CONTAINER, str(tmp_path)) is None


def test_a_missing_proc_root_finds_nothing(tmp_path: Path) -> None:
    assert list_pids(str(tmp_path / "nope")) == []
    assert container_root_pid(LLAMA, CONTAINER, str(tmp_path / "nope")) is None
