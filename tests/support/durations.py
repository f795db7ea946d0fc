"""Each test's duration by tier, the duration budget, and the run's summary.

Why a budget: a tier stays what it claims only while its tests stay in it. A unit
test over ``UNIT_BUDGET_S`` has grown a real wait or a real process; a stack test
over ``STACK_BUDGET_S`` is a benchmark or a soak in disguise. Enforced at the end of
a run (``--duration-budget``, which ``scripts/test.sh`` passes), not per test: the
figure is a test's setup, call and teardown together, as the controller of a
parallel run receives them, and a test over budget fails the run with its name.
Without ``--duration-budget`` (``scripts/test.sh --quick``, a developer's loop on a
machine doing other work) the same tests are listed but the run does not fail: a
budget judged on a loaded laptop would be a test of the laptop.

``python -m tests.support.durations FILE...`` prints the 30 slowest tests of the
run's tiers (the JSON files ``--durations-file`` wrote) and each tier's total.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

from tests.support.tiers import MARKED_TIERS

#: seconds, setup + call + teardown; the real tier has no budget (an engine's cold start is its cost)
UNIT_BUDGET_S = 2.0
STACK_BUDGET_S = 90.0
BUDGETS = {"unit": UNIT_BUDGET_S, "stack": STACK_BUDGET_S}


def tier_of_report(report: pytest.TestReport) -> str:
    """The tier a report's test is in, from its markers (a parallel run's workers send them as keywords)."""
    marked = [name for name in MARKED_TIERS if name in report.keywords]
    return marked[0] if marked else "unit"


class DurationRecorder:
    """A pytest plugin: adds up each test's phases; writes them; fails the run on a budget overrun."""

    def __init__(self, out: Path | None, enforce: bool) -> None:
        self.out = out
        self.enforce = enforce
        self.seconds: dict[str, float] = {}
        self.tiers: dict[str, str] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration
        self.tiers[report.nodeid] = tier_of_report(report)

    def over_budget(self) -> list[tuple[str, str, float]]:
        """(nodeid, tier, seconds) of every test over its tier's budget, slowest first."""
        over = [
            (node, self.tiers[node], s)
            for node, s in self.seconds.items()
            if self.tiers[node] in BUDGETS and s > BUDGETS[self.tiers[node]]
        ]
        return sorted(over, key=lambda row: -row[2])

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if hasattr(session.config, "workerinput"):
            return  # an xdist worker: the controller has every report
        if self.out is not None:
            rows = {node: {"tier": self.tiers[node], "seconds": round(s, 3)} for node, s in self.seconds.items()}
            self.out.parent.mkdir(parents=True, exist_ok=True)
            self.out.write_text(json.dumps(rows, indent=1, sort_keys=True))
        over = self.over_budget()
        if over:
            reporter = session.config.pluginmanager.get_plugin("terminalreporter")
            lines = [f"{s:8.2f} s  {tier:5} (budget {BUDGETS[tier]:.0f} s)  {node}" for node, tier, s in over]
            what = "exceeded" if self.enforce else "exceeded (reported only: --duration-budget not given)"
            text = f"duration budget {what} (tests/support/durations.py):\n" + "\n".join(lines)
            if reporter is not None:
                reporter.write_line(text, red=self.enforce, yellow=not self.enforce)
            else:
                print(text, file=sys.stderr)
            if self.enforce and session.exitstatus == 0:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED


def summary(files: list[Path], slowest: int = 30) -> str:
    """Each tier's test count and summed seconds, then the ``slowest`` tests across them."""
    rows: dict[str, dict[str, object]] = {}
    for path in files:
        if path.exists():
            rows.update(json.loads(path.read_text()))
    totals: dict[str, tuple[int, float]] = {}
    for row in rows.values():
        tier, s = str(row["tier"]), float(str(row["seconds"]))
        n, t = totals.get(tier, (0, 0.0))
        totals[tier] = (n + 1, t + s)
    out = [f"{tier:5}: {n} tests, {t:.0f} s of test time" for tier, (n, t) in sorted(totals.items())]
    ranked = sorted(rows.items(), key=lambda kv: -float(str(kv[1]["seconds"])))[:slowest]
    out.append(f"the {len(ranked)} slowest tests:")
    out += [f"{float(str(r['seconds'])):8.2f} s  {r['tier']:5}  {node}" for node, r in ranked]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.support.durations", description=__doc__)
    ap.add_argument("files", nargs="+", type=Path, help="JSON files written by --durations-file")
    ap.add_argument("--slowest", type=int, default=30)
    args = ap.parse_args(argv)
    print(summary(args.files, args.slowest))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
