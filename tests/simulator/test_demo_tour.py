"""``demo`` without ``--scenario`` is a tour: healthy, then each scenario, each closed by the verdict it drew.

A real run as a user starts it (simulator, exporter and load as the demo starts
them), piped, so the transcript is plain text: a short tour of two scenarios
(``--tour``, ``--tour-seconds 15``), bounded at 240 s; and, marked slow, the
whole default tour as a first-time user runs it (every scenario, in order) with
half the default dwell (15 s instead of 30 s, about 3.5 minutes), whose transcript
must name every scenario's primary.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading

import psutil
import pytest

from exporter.demo.plan import EXPECTED_PRIMARY, TOUR
from tests.simulator.sim_helpers import ROOT
from tests.support.ports import free_port

ENV = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
VISITED = ["healthy", "kv_pressure", "tp_imbalance"]
#: healthy, two scenarios of 15 s and one return to healthy take about 65 s on 2 CPUs
LIMIT_S = 240


@pytest.mark.slow  # a 15 s tour of two scenarios: ~70 s
def test_the_tour_visits_each_scenario_and_names_its_primary() -> None:
    _tour(VISITED, ["--tour", ",".join(VISITED[1:]), "--tour-seconds", "15"], LIMIT_S)


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(900)
def test_the_default_tour_names_every_scenarios_primary() -> None:
    # every scenario of the default tour, in its order, with half the default dwell (15 s of 30):
    # a primary named in half the time is named in the whole; the run costs ~3 min of CI, not ~7
    _tour(list(TOUR), ["--tour-seconds", "15"], 800)


def _tour(visited: list[str], flags: list[str], limit_s: float) -> None:
    VISITED = visited  # noqa: N806 - the transcript checks below read it like the constant
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
    assert [lines[i].split()[2].rstrip(":") for i in starts] == VISITED, text
    for n, (name, i) in enumerate(zip(VISITED, starts), 1):
        assert lines[i].startswith(f"== {n}/{len(VISITED)} {name}: "), lines[i]
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
    assert sum(line.startswith("-- back to healthy after ") for line in lines) == len(VISITED) - 2, text
    # the closing table: scenario -> primary named, matched
    head = lines.index(f"tour summary: {len(VISITED)} of {len(VISITED)} scenarios read as expected")
    table = [line.split() for line in lines[head + 2 : head + 2 + len(VISITED)]]
    assert [row[0] for row in table] == VISITED and all(row[-1] == "yes" for row in table), text
    assert table[1][1:3] == [EXPECTED_PRIMARY[VISITED[1]]] * 2
    assert children, "the demo started no child processes"
    assert not [pid for pid in children if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
