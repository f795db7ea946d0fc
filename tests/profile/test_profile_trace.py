"""Bounded, streaming reading of Chrome trace files: gzip or not, cut, garbled, over the cap."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from exporter.profile.classify import Split
from exporter.profile.trace import MAX_EVENT_BYTES, Budget, TraceError, events, list_traces, new_traces, read_split
from tests.profile.traces import gpu_trace, write_trace

KERNEL_US = {"attention": 600.0, "gemm": 300.0, "other": 100.0}


def _split(paths: list[Path], cap: int = 64 * 1024 * 1024) -> Split:
    split = Split()
    read_split(paths, split.add, cap)
    return split


@pytest.mark.parametrize("name", ["rank0.pt.trace.json", "rank0.pt.trace.json.gz"])
def test_a_trace_reads_the_same_plain_or_gzipped(tmp_path: Path, name: str) -> None:
    trace = gpu_trace(KERNEL_US, repeats=40)
    path = write_trace(tmp_path / name, trace)
    got = list(events(path, Budget(64 * 1024 * 1024)))
    assert got == trace["traceEvents"]
    assert _split([path]).shares()["attention"] == pytest.approx(0.6)


def test_a_bare_event_array_is_a_trace_too(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(gpu_trace(KERNEL_US)["traceEvents"]))
    assert _split([path]).shares()["gemm"] == pytest.approx(0.3)


def test_events_cut_across_every_chunk_boundary_are_all_read(tmp_path: Path) -> None:
    # 3 MB of events: every 256 KiB read ends inside an event, a string or a number somewhere
    trace = gpu_trace(KERNEL_US, repeats=800)
    path = write_trace(tmp_path / "big.json", trace)
    assert path.stat().st_size > 3 * 1024 * 1024
    assert sum(1 for _ in events(path, Budget(64 * 1024 * 1024))) == len(trace["traceEvents"])


def test_a_trace_over_the_cap_is_refused_naming_the_cap(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "big.json.gz", gpu_trace(KERNEL_US, repeats=800))
    assert path.stat().st_size < 1024 * 1024  # small on disk: the cap counts what it inflates to
    with pytest.raises(TraceError, match="over the 1048576 byte read cap"):
        _split([path], cap=1024 * 1024)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"\x00\x01garbage", "not JSON"),
        (b'{"schemaVersion": 1, "other": []}', "no traceEvents array"),
        (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "gemm", "dur": 5}, {"ph": "X", "cat"', "ends inside"),
        (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "gemm", "dur": 5}, {"ph": nope}]}', "malformed trace event"),
        (gzip.compress(b'{"traceEvents": [')[:-6], "ends early"),
        (b"\x1f\x8b\x08\x00garbage-after-a-gzip-magic", "not a valid gzip"),
    ],
    ids=["binary", "no-events", "cut-short", "bad-event", "gzip-cut", "gzip-garbage"],
)
def test_a_garbled_trace_is_one_clear_error(tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=reason):
        _split([path])


def test_one_huge_event_is_refused_without_reading_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(b'{"traceEvents": [{"name": "' + b"x" * (MAX_EVENT_BYTES + 10) + b'"}]}')
    with pytest.raises(TraceError, match="over the size cap"):
        _split([path])


def test_only_traces_new_or_changed_since_the_listing_before_count(tmp_path: Path) -> None:
    old = write_trace(tmp_path / "old.pt.trace.json", gpu_trace(KERNEL_US))
    rewritten = write_trace(tmp_path / "again.pt.trace.json", gpu_trace(KERNEL_US))
    (tmp_path / "notes.txt").write_text("not a trace")
    before = list_traces(tmp_path)
    assert set(before) == {old, rewritten}
    sub = tmp_path / "rank1"
    sub.mkdir()
    new = write_trace(sub / "new.pt.trace.json.gz", gpu_trace(KERNEL_US))
    write_trace(rewritten, gpu_trace(KERNEL_US, repeats=5))  # same name, another profile: larger
    os.utime(new, ns=(before[old][0] - 10, before[old][0] - 10))  # an engine's clock behind ours still counts
    assert new_traces(before, list_traces(tmp_path)) == [new, rewritten]
    with pytest.raises(TraceError, match="cannot list the profile directory"):
        list_traces(tmp_path / "missing")
