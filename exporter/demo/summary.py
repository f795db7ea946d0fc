"""What the tour concluded: per scenario the primary named most, whether it was the expected one, the table.

Why the second half of a scenario's verdicts: the first verdicts after a switch still read
the scenario before (the diagnosis window drains over seconds); the latest half says what
the scenario itself drew.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from exporter.demo.plan import EXPECTED_PRIMARY
from exporter.demo.verdicts import primary_name


@dataclass
class Conclusion:
    """What the verdict said about one scenario of the tour."""

    scenario: str
    expected: str | None
    verdict: dict[str, Any] | None
    named: str | None
    share: tuple[int, int] = (0, 0)

    @property
    def matched(self) -> bool:
        if self.verdict is None:
            return False
        if self.expected is None:
            return self.named is None and self.verdict.get("state") == "healthy"
        return self.named == self.expected


def conclude(scenario: str, verdicts: list[dict[str, Any]]) -> Conclusion:
    """The verdict of a scenario: the primary named most often over the second half of its
    verdicts (ties: the latest), as its latest verdict naming it said it."""
    expected = EXPECTED_PRIMARY.get(scenario)
    if not verdicts:
        return Conclusion(scenario, expected, None, None)
    half = verdicts[len(verdicts) // 2 :]
    names = [primary_name(v) for v in half]
    counts = Counter(names)
    last_at = {name: i for i, name in enumerate(names)}
    best = max(counts, key=lambda n: (counts[n], last_at[n]))
    chosen = half[last_at[best]]
    return Conclusion(scenario, expected, chosen, best, (counts[best], len(half)))


def summary_lines(results: list[Conclusion]) -> list[str]:
    """The tour's closing table, plain text."""
    rows = [("scenario", "expected primary", "primary named", "match")]
    for r in results:
        rows.append(
            (
                r.scenario,
                r.expected or "none (healthy)",
                r.named or (f"none ({r.verdict.get('state')})" if r.verdict else "no verdict"),
                "yes" if r.matched else "NO",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    matched = sum(r.matched for r in results)
    if not results:
        return ["tour summary: no scenario ran to its end"]
    out = [f"tour summary: {matched} of {len(results)} scenarios read as expected"]
    out += ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    return out
