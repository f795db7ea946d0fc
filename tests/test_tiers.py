"""The tiers hold: every test in exactly one, every rule still names something, the unit tier forks nothing."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from tests.support import durations, tiers

ROOT = Path(__file__).resolve().parent.parent


def test_every_collected_test_is_in_exactly_one_tier(request: pytest.FixtureRequest) -> None:
    items = request.session.items
    assert items, "the session collected nothing"
    for item in items:
        in_tiers = tiers.tiers_of(item)
        assert len(in_tiers) == 1, f"{item.nodeid} is in {in_tiers}"
        assigned, why = item.stash[tiers.TIER_KEY]
        assert in_tiers == [assigned], f"{item.nodeid}: marked {in_tiers}, assigned {assigned} ({why})"


def _functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


@pytest.mark.parametrize("table", ["REAL_PATHS", "STACK_PATHS"])
def test_every_path_rule_names_a_file_or_folder_of_tests(table: str) -> None:
    for rule in getattr(tiers, table):
        target = ROOT / rule
        assert target.is_dir() if rule.endswith("/") else target.is_file(), f"{table}: {rule} does not exist"


@pytest.mark.parametrize("table", ["REAL_NODES", "STACK_NODES"])
def test_every_node_rule_names_a_test_that_exists_in_a_file_not_already_ruled_whole(table: str) -> None:
    nodes: tuple[str, ...] = getattr(tiers, table)
    assert len(set(nodes)) == len(nodes), f"{table} lists a node twice"
    for node in nodes:
        file, name = node.split("::")
        assert name in _functions(ROOT / file), f"{table}: {node} names no test"
        assert tiers._under(file, tiers.REAL_PATHS + tiers.STACK_PATHS) is None or table == "REAL_NODES", (
            f"{table}: {node} is in a file a path rule already places whole"
        )


def test_the_scenario_stacks_are_stack_files_run_in_one_group_by_the_test_command(request: pytest.FixtureRequest) -> None:
    for rule in tiers.SCENARIO_STACK_PATHS:
        assert (ROOT / rule).is_file() and tiers._under(rule, tiers.STACK_PATHS), f"{rule}: not a stack file"
    # every collected test of those files (the run that collects them) is in the group, and no other
    for item in request.session.items:
        marker = item.get_closest_marker("xdist_group")
        if tiers._relative(item) in tiers.SCENARIO_STACK_PATHS:
            assert marker is not None and marker.args == (tiers.SCENARIO_GROUP,), item.nodeid
        else:
            assert marker is None, item.nodeid
    # the group means something only where xdist distributes by group
    assert '-n "$stack_workers" --dist loadgroup' in (ROOT / "scripts/test.sh").read_text()


def test_the_tiers_are_the_only_markers_of_their_kind() -> None:
    """The old markers are gone for good: a file that writes one again would mean nothing."""
    for path in (ROOT / "tests").rglob("*.py"):
        text = path.read_text()
        for old in ("mark.integration", "mark.slow", "mark.external", "mark.stack", "mark.real"):
            assert f"pytest.{old}" not in text or path.name == "test_tiers.py", f"{path}: pytest.{old}"


def test_a_unit_test_cannot_start_a_child_process() -> None:
    """This test is itself in the unit tier: the guard is on around it."""
    with pytest.raises(tiers.ChildProcessInUnitTest, match="tests/support/tiers.py"):
        subprocess.run([sys.executable, "-c", "pass"], check=False)
    with pytest.raises(tiers.ChildProcessInUnitTest):
        os.system("true")
    assert os.fork.__name__ == "refused"  # not called: were the guard off, the test run itself would fork


def test_the_guard_puts_everything_back(monkeypatch: pytest.MonkeyPatch) -> None:
    inside = subprocess.Popen.__init__
    with tiers.process_guard("x"):
        assert subprocess.Popen.__init__ is not inside
    assert subprocess.Popen.__init__ is inside


def test_library_helpers_are_told_apart_from_our_programs() -> None:
    assert tiers._library_helper(["/sbin/ldconfig", "-p"])
    assert tiers._library_helper(("fc-list", "--format=%{file}"))
    assert tiers._library_helper("ldconfig -p")
    assert not tiers._library_helper([sys.executable, "-m", "exporter"])
    assert not tiers._library_helper(["promtool", "check", "metrics"])
    assert not tiers._library_helper([])


def _report(nodeid: str, seconds: float, *markers: str) -> pytest.TestReport:
    return cast(pytest.TestReport, SimpleNamespace(nodeid=nodeid, duration=seconds, keywords=dict.fromkeys(markers, 1)))


def test_the_budget_adds_the_phases_and_names_each_test_over_its_tier() -> None:
    rec = durations.DurationRecorder(out=None, enforce=True)
    for phase_s in (0.5, 1.0, 0.6):  # setup, call, teardown: 2.1 s in all
        rec.pytest_runtest_logreport(_report("t::unit_slow", phase_s))
    rec.pytest_runtest_logreport(_report("t::unit_ok", 1.9))
    rec.pytest_runtest_logreport(_report("t::stack_slow", 91.0, "stack"))
    rec.pytest_runtest_logreport(_report("t::stack_ok", 89.0, "stack"))
    rec.pytest_runtest_logreport(_report("t::real_long", 600.0, "real"))
    over = rec.over_budget()
    assert [(node, tier) for node, tier, _ in over] == [("t::stack_slow", "stack"), ("t::unit_slow", "unit")]
    assert over[1][2] == pytest.approx(2.1)


def test_the_summary_gives_each_tier_and_the_slowest_tests(tmp_path: Path) -> None:
    rows: dict[str, Any] = {f"t::{i}": {"tier": "unit", "seconds": i / 10} for i in range(40)}
    rows["t::stack"] = {"tier": "stack", "seconds": 50.0}
    (tmp_path / "a.json").write_text(__import__("json").dumps(rows))
    text = durations.summary([tmp_path / "a.json", tmp_path / "missing.json"], slowest=3)
    lines = text.splitlines()
    assert lines[0].startswith("stack: 1 tests") and lines[1].startswith("unit : 40 tests, 78 s")
    assert lines[2] == "the 3 slowest tests:" and "t::stack" in lines[3] and "t::39" in lines[4] and len(lines) == 6


#: where the real tier may cold-start the CPU vLLM, and how many times each place does per run: the
#: shared engine (tests/conftest.py) once; tune's launch mode three times (the baseline, the trial and
#: the configuration it leaves running are what it measures). Issue 31: at most 4 per run.
VLLM_STARTS = {"tests/conftest.py": 1, "tests/tune/test_tune_vllm.py": 3}


def test_the_cpu_vllm_is_started_in_two_places_at_most_four_times_a_run() -> None:
    """A new test of the CPU vLLM uses the shared ``cpu_vllm`` fixture: a cold start is 30-90 s."""
    callers = set()
    for path in (ROOT / "tests").rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "vllm_proc"]
        if calls:
            callers.add(path.relative_to(ROOT).as_posix())
    assert callers == set(VLLM_STARTS), f"vllm_proc() is called from {sorted(callers)}: use the cpu_vllm fixture"
    assert sum(VLLM_STARTS.values()) <= 4
