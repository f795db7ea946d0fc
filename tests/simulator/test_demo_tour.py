"""``demo`` without ``--scenario`` is a tour: healthy, then each scenario, each closed by the verdict it drew.

A real run as a user starts it (simulator, exporter and load as the demo starts
them), piped, so the transcript is plain text: a short tour of two scenarios
(``--tour``, ``--tour-seconds 15``), bounded at 240 s, whose transcript must announce
each scenario, close it with the verdict naming its primary, go back to healthy in
between and end in the summary table.

Where the default tour's other claims are proven, without running its ~5 minutes in CI:
the default list is every scenario that stands for a cause, healthy first
(test_demo_tour_view.py, ``tour_names``); each scenario, on the tour's own stack
settings, is concluded by the demo's own ``conclude`` within half the default dwell
(tests/diagnosis/test_diagnosis_scenarios.py, from readings that module takes anyway).
What is left, the tour's loop over more than two scenarios, is the loop this test runs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading

import psutil

from exporter.demo.plan import EXPECTED_PRIMARY
from tests.simulator.sim_helpers import ROOT
from tests.support.ports import free_port

ENV = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
VISITED = ["healthy", "kv_pressure", "tp_imbalance"]
#: healthy, two scenarios of 15 s and one return to healthy take about 65 s on 2 CPUs
LIMIT_S = 240


def test_the_tour_visits_each_scenario_and_names_its_primary() -> None:
    _tour(VISITED, ["--tour", ",".join(VISITED[1:]), "--tour-seconds", "15"], LIMIT_S)


def _tour(visited: list[str], flags: list[str], limit_s: float) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", "demo", *flags, "--listen-address", f"127.0.0.1:{port}"],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    children: set[int] = set()
    watchdog = threading.Timer(limit_s, proc.kill)  # the transcript loop below ends when the demo does
    watchdog.start()
    try:
        ps = psutil.Process(proc.pid)
        lines: list[str] = []
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if proc.poll() is None:
                try:
                    children |= {c.pid for c in ps.children(recursive=True)}
                except psutil.Error:
                    pass
        code = proc.wait(30)
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    text = "\n".join(lines)
    assert code == 0, text
    assert "\x1b[" not in text, "a pipe must get plain text"
    # each scenario: announced with what was injected, then the verdict line naming its primary
    starts = [i for i, line in enumerate(lines) if line.startswith("== ")]
    assert [lines[i].split()[2].rstrip(":") for i in starts] == visited, text
    for n, (name, i) in enumerate(zip(visited, starts), 1):
        assert lines[i].startswith(f"== {n}/{len(visited)} {name}: "), lines[i]
        assert lines[i + 1].strip().startswith("injected: "), lines[i + 1]
        section = lines[i : starts[n]] if n < len(starts) else lines[i:]
        verdicts = [line for line in section if line.startswith("verdict: ")]
        assert len(verdicts) == 1, section
        expected = EXPECTED_PRIMARY[name]
        if expected is None:
            assert verdicts[0] == "verdict: healthy primary none: no symptom", text
        else:
            assert re.match(rf"verdict: degraded primary {re.escape(expected)} \(confidence [01]\.\d\d\): .+ ← ", verdicts[0]), (
                text
            )
    assert sum(line.startswith("-- back to healthy after ") for line in lines) == len(visited) - 2, text
    # the closing table: scenario -> primary named, matched
    head = lines.index(f"tour summary: {len(visited)} of {len(visited)} scenarios read as expected")
    table = [line.split() for line in lines[head + 2 : head + 2 + len(visited)]]
    assert [row[0] for row in table] == visited and all(row[-1] == "yes" for row in table), text
    assert table[1][1:3] == [EXPECTED_PRIMARY[visited[1]]] * 2
    assert children, "the demo started no child processes"
    assert not [pid for pid in children if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
