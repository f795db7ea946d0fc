"""Discovery's log lines are bounded by time, never by pods x refreshes (issue 37, item 6).

Pods flapping in and out of the list once wrote 96 lines a second: a pod started, a pod
stopped, its bad annotation again, its new engine source down, each per pod per refresh.
Here discovery is driven through many refreshes on a fake clock, with the real pod-list
reader (from memory, no API server), the real runner group (its runners sampled by the
test, no thread started) and engine sources whose pods are on a closed 127.0.0.1 port. The
test counts the records, checks that every event is in the log (a line of its own, or
counted in a line that says how many) and that the counters did not change their meaning.
"""

from __future__ import annotations

import copy
import json
import logging
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from exporter.kubernetes.discovery import LOG_DETAIL_LINES, LOG_KINDS, LOG_WINDOW_S, DiscoverySource
from exporter.kubernetes.pods import PodDirectory, PodLister, parse_pod_list
from exporter.kubernetes.settings import KubernetesConfig
from exporter.runner import LOG_EVERY_S, RunnerGroup, SourceRunner, TransitionLog
from exporter.samples import SourceError
from exporter.store import SnapshotStore
from tests.support import k8s
from tests.support.ports import free_port

GOOD, BAD = 8, 8
REFRESHES = 120  # one a second: 12 windows of 10 s


class _Lister(PodLister):
    """The node's pod list from memory, read by the real reader; or a failure."""

    def __init__(self) -> None:
        super().__init__("http://127.0.0.1:1/pods", k8s.NODE)
        self.items: list[dict[str, Any]] = []
        self.left_out: dict[str, int] = {}
        self.fail = False

    def list(self) -> tuple[list[Any], dict[str, int]]:
        if self.fail:
            raise SourceError("connection", "pod list http://127.0.0.1:1/pods: connection refused")
        doc = copy.deepcopy(k8s.pods_json())
        doc["items"] = self.items
        pods, skipped = parse_pod_list(json.dumps(doc).encode(), k8s.NODE)
        return pods, {**skipped, **self.left_out}


class _Rig:
    """Discovery on a fake clock, in a runner group that is never started: the test samples."""

    def __init__(self) -> None:
        self.now = 0.0
        self.lister = _Lister()
        self.store = SnapshotStore()
        directory = PodDirectory(self.lister, clock=self.clock, min_age=0.0)
        self.discovery = DiscoverySource(
            directory, interval=1.0, timeout=5.0, engine_timeout=1.0, process_sampler=False, remove_wait=1.0, clock=self.clock
        )
        self.group = RunnerGroup(self.store)
        runner = self.group.add(self.discovery)
        assert isinstance(runner, SourceRunner)
        runner.transitions = TransitionLog(self.discovery.name, LOG_EVERY_S, clock=self.clock)
        self.runner = runner

    def clock(self) -> float:
        return self.now

    def refresh(self) -> None:
        """One discovery interval: the refresh, then one attempt of every discovered source."""
        self.now += 1.0
        self.runner.sample_once()
        self.runner.transitions.flush()
        for r in list(self.group.runners):
            if r is not self.runner and isinstance(r, SourceRunner):
                r.sample_once()
                r.transitions.flush()

    def close(self) -> None:
        self.discovery.close()
        for r in list(self.group.runners):
            self.group.remove(r.name, timeout=1.0)


@pytest.fixture
def rig() -> Iterator[_Rig]:
    undo = KubernetesConfig(enabled=True, node_name=k8s.NODE).apply_labels()
    made = _Rig()
    try:
        yield made
    finally:
        made.close()
        undo()


def _pods(port: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``GOOD`` pods whose engines are on a closed port, ``BAD`` pods with a port that is no number."""
    scrape = "llm-layer-exporter.io/scrape"
    good = [k8s.tenant_pod(i, {scrape: "true", "llm-layer-exporter.io/port": str(port)}) for i in range(GOOD)]
    bad = [k8s.tenant_pod(100 + i, {scrape: "true", "llm-layer-exporter.io/port": "http"}) for i in range(BAD)]
    return good, bad


def _single(line: str) -> str | None:
    """The kind of event a line written as it happened reports (None: not one of discovery's)."""
    if line.startswith("discovery: scraping "):
        return "added"
    if line.startswith("discovery: stopped scraping "):
        return "removed"
    if line.startswith("discovery: pod ") and line.endswith("; pod skipped"):
        return "skipped"
    if line.startswith("discovery: pod list: items left out"):
        return "left_out"
    if line.startswith("source engine:") and " down: " in line:
        return "down"
    return None


#: kind -> the counted line, its count captured
COUNTED = {
    kind: re.compile("^discovery: " + re.escape(what).replace(re.escape("{n}"), r"(\d+)"))
    for kind, (_, what) in LOG_KINDS.items()
}


def _tally(records: list[logging.LogRecord]) -> tuple[Counter[str], Counter[str]]:
    """(events the lines report by kind, lines by kind): a line of its own is one event, a counted line its count."""
    events: Counter[str] = Counter()
    lines: Counter[str] = Counter()
    for r in records:
        text = r.getMessage()
        for kind, pattern in COUNTED.items():
            m = pattern.match(text)
            if m:
                events[kind] += int(m.group(1))
                lines[kind] += 1
                break
        else:
            kind_of = _single(text)
            if kind_of is not None:
                events[kind_of] += 1
                lines[kind_of] += 1
    return events, lines


def test_flapping_pods_write_lines_bounded_by_windows_with_every_event_counted(
    rig: _Rig, caplog: pytest.LogCaptureFixture
) -> None:
    good, bad = _pods(free_port())
    expected: Counter[str] = Counter()
    bad_annotation = malformed = 0
    present: set[str] = set()
    problems: set[str] = set()
    left_out: dict[str, int] = {}
    per_window: list[int] = []
    with caplog.at_level(logging.INFO, logger="exporter"):
        for i in range(REFRESHES):
            up = i % 2 == 0
            rig.lister.items = good + bad if up else []
            rig.lister.left_out = {"malformed": 1 + i % 3}
            rig.lister.fail = i % 7 == 6  # a pod list that fails now and then: nothing changes
            before = len(caplog.records)
            rig.refresh()
            if i % int(LOG_WINDOW_S) == 0:
                per_window.append(0)
            per_window[-1] += len(caplog.records) - before
            if rig.lister.fail:
                continue
            # what discovery must have seen, from the list alone
            now_present = {p["metadata"]["name"] for p in good} if up else set()
            now_problems = {p["metadata"]["name"] for p in bad} if up else set()
            expected["added"] += len(now_present - present)
            expected["removed"] += len(present - now_present)
            expected["down"] += len(now_present - present)  # each new engine source fails its first attempt
            expected["skipped"] += len(now_problems - problems)
            expected["left_out"] += rig.lister.left_out != left_out
            present, problems, left_out = now_present, now_problems, dict(rig.lister.left_out)
            bad_annotation += len(now_problems)
            malformed += rig.lister.left_out["malformed"]
        rig.discovery.close()  # what the last windows counted is written
        records = list(caplog.records)

    events, lines = _tally(records)
    assert expected["added"] >= 50 and expected["skipped"] >= 50, "the pods did flap"
    assert {k: events[k] for k in expected} == dict(expected), "every event is in the log, alone or counted"

    kinds = len(LOG_KINDS)
    windows = REFRESHES / LOG_WINDOW_S
    discovery_lines = [r for r in records if r.getMessage().startswith("source kubernetes:discovery")]
    # the pod list failed 17 times: its own runner writes one line a LOG_EVERY_S at most
    assert 1 <= len(discovery_lines) <= REFRESHES / LOG_EVERY_S + 1
    # every line is one of these; none per pod per refresh
    assert len(records) == sum(lines.values()) + len(discovery_lines), [r.getMessage()[:120] for r in records]
    for kind, n in lines.items():
        assert n <= LOG_DETAIL_LINES + windows + 1, f"{kind}: {n} lines in {windows:g} windows"
    assert len(records) <= kinds * (LOG_DETAIL_LINES + windows + 1) + len(discovery_lines)
    assert sum(expected.values()) >= 8 * len(records), "lines are bounded by windows, not by pods x refreshes"
    # past the first window, a window holds at most one line per kind (and the list's own transitions)
    assert max(per_window[1:]) <= kinds + 1, per_window

    # the counters count every list read, as they did
    assert rig.discovery.skipped["bad_annotation"] == bad_annotation
    assert rig.discovery.skipped["malformed"] == malformed


def test_after_a_quiet_window_a_new_pod_is_logged_at_once_in_its_own_line(rig: _Rig, caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    good, _ = _pods(port)
    with caplog.at_level(logging.INFO, logger="exporter.kubernetes.discovery"):
        for i in range(30):  # a flood: more than LOG_DETAIL_LINES pods each second
            rig.lister.items = good if i % 2 == 0 else []
            rig.refresh()
        flood = len(caplog.records)
        for _ in range(int(3 * LOG_WINDOW_S)):  # quiet: the list does not change
            rig.refresh()
        # the quiet windows wrote what the flood had counted, then nothing
        assert any(COUNTED["added"].match(r.getMessage()) for r in caplog.records[flood:])
        quiet = len(caplog.records)
        for _ in range(3):
            rig.refresh()
        assert len(caplog.records) == quiet
        newcomer = k8s.tenant_pod(500, {"llm-layer-exporter.io/scrape": "true", "llm-layer-exporter.io/port": str(port)})
        rig.lister.items = [*rig.lister.items, newcomer]
        rig.refresh()
    lines = [r.getMessage() for r in caplog.records[quiet:]]
    assert lines[0] == f"discovery: scraping tenants/tenant-500 (http://127.0.0.1:{port}/metrics, engine auto)"
    assert lines[1].startswith("source engine:tenants/tenant-500 down: ") and len(lines) == 2
