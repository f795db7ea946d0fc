"""A large replay file never lets the GPU read up before it is parsed."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from exporter.gpu import build_gpu_source
from exporter.gpu import replay as replay_module
from exporter.runner import RunnerGroup
from exporter.samples import SourceError
from exporter.store import SnapshotStore
from tests.support.waiting import wait_until

TRACE = Path(replay_module.__file__).resolve().parent.parent / "data" / "traces" / "kernels.csv"


def _big_trace(tmp_path: Path, megabytes: float) -> Path:
    header, *rows = TRACE.read_text().splitlines()
    lines, size = [header], 0
    while size < megabytes * 1e6:
        lines.extend(rows)
        size += sum(len(r) + 1 for r in rows)
    path = tmp_path / "big.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_files_are_parsed_when_the_source_is_built_not_in_its_first_sample(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _big_trace(tmp_path, 3.0)
    calls: list[str] = []
    real = replay_module.parse_trace

    def counted(text: str, where: str) -> list[dict[str, float | int | str]]:
        calls.append(where)
        return real(text, where)

    monkeypatch.setattr(replay_module, "parse_trace", counted)
    source = build_gpu_source(f"replay:{path},{path}", 0.25, 2.0)  # what serve does before it serves
    assert source is not None and len(calls) == 2
    started = time.monotonic()
    result = source.sample()
    assert len(calls) == 2  # nothing parsed in the sample
    assert time.monotonic() - started < 0.2
    assert any(p.name == "llm_gpu_power_watts" for p in result.points)


def test_a_missing_file_at_start_up_is_a_sample_fault_not_a_crash(tmp_path: Path) -> None:
    source = build_gpu_source(f"replay:{tmp_path / 'absent.csv'}", 1.0, 2.0)
    assert source is not None
    with pytest.raises(SourceError) as err:
        source.sample()
    assert err.value.reason == "file_missing"


def test_a_slow_reparse_reads_down_while_it_parses_then_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "gpu0.csv"
    path.write_text(TRACE.read_text())
    source = build_gpu_source(f"replay:{path}", 0.1, 0.3)
    assert source is not None
    parsing, finish = threading.Event(), threading.Event()
    real = replay_module.parse_trace

    def slow_parse(text: str, where: str) -> list[dict[str, float | int | str]]:
        parsing.set()
        finish.wait(10)  # stands for seconds of parsing; bounded
        return real(text, where)

    store = SnapshotStore()
    group = RunnerGroup(store)
    group.add(source)
    group.start()
    try:
        wait_until(lambda: store.snapshot().source_up("gpu"), 5, "the replayed GPU up")
        monkeypatch.setattr(replay_module, "parse_trace", slow_parse)
        path.write_text(TRACE.read_text() + "\n")  # the file changes on disk: the next sample re-parses it
        os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
        assert parsing.wait(5)
        wait_until(lambda: not store.snapshot().source_up("gpu"), 0.3 + 1.0, "the slow parse to read down")
        snap = store.snapshot()
        assert snap.values("llm_gpu_power_watts") == []
        assert snap.sources["gpu"].last_error is not None and snap.sources["gpu"].last_error.reason == "timeout"
        finish.set()
        wait_until(
            lambda: store.snapshot().source_up("gpu") and store.snapshot().values("llm_gpu_power_watts"),
            5,
            "the replayed GPU back up with values",
        )
    finally:
        finish.set()
        group.stop()
